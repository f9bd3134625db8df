"""The real node's names and where its pieces are: the constants every part shares, :class:`RealNode` (the state
directory and the files in it) and :class:`RealNodeError`.

Every other module of the package imports this one and nothing imports the
package's front (``__init__``) from inside it, so the parts load in any order.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

#: The package's directory: the templates (kubelet.yaml, containerd.toml, cni.conflist, ...) and pause.c.
HERE = Path(__file__).resolve().parent
NODE = "real-1"
CLUSTER = "flotilla-realnode"
CONTEXT = f"kwok-{CLUSTER}"
IMAGE = "flotilla.local/busybox:1"
PAUSE_IMAGE = "flotilla.local/pause:1"
CGROUP_ROOT = "/flotilla-realnode"
BRIDGE = "flrn0"
NETWORK = "flotilla-realnode"
SUBNET = "10.244.0.0/24"
CNI_BIN = "/usr/lib/cni"
NODE_LABEL = "flotilla.io/real-node"


class RealNodeError(RuntimeError):
    """The real node could not be started, reached or stopped; the message says what and where."""


@dataclass(frozen=True)
class RealNode:
    """Where the running node's pieces are: what a client needs (kubeconfig, context, image) and the state dir."""

    dir: Path

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def context(self) -> str:
        return CONTEXT

    @property
    def image(self) -> str:
        return IMAGE

    @property
    def node(self) -> str:
        return NODE

    @property
    def socket(self) -> Path:
        return self.dir / "containerd.sock"

    def pid_file(self, component: str) -> Path:
        return self.dir / "pids" / f"{component}.pid"

    def argv_file(self, component: str) -> Path:
        """The command line the component was started with (JSON), to tell it from a process given its pid later."""
        return self.dir / "pids" / f"{component}.argv"

    def log_file(self, component: str) -> Path:
        return self.dir / "logs" / f"{component}.log"

    def exports(self) -> str:
        """Shell lines for ``eval``: where the node's cluster is, which image it has, and its containerd's socket
        (``CONTAINERD_ADDRESS``, which ``ctr`` reads, so ``ctr -n k8s.io images import`` loads an image into it as
        on a node of one's own)."""
        return (f"export KUBECONFIG={self.kubeconfig}\n"
                f"export FLOTILLA_REAL_NODE_CONTEXT={self.context}\n"
                f"export FLOTILLA_REAL_NODE_IMAGE={self.image}\n"
                f"export CONTAINERD_ADDRESS={self.socket}\n")

    def client(self, **kwargs):
        from flotilla.kubernetes.client import KubeClient
        return KubeClient.from_kubeconfig(str(self.kubeconfig), self.context, **kwargs)


def state_dir() -> Path:
    return Path(os.environ.get("FLOTILLA_REAL_NODE_DIR") or "/tmp/flotilla-realnode")


def node(directory: Path | None = None) -> RealNode:
    return RealNode(directory or state_dir())
