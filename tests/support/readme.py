"""deploy/README.md's ``sh`` blocks as its real-node tests run them: verbatim, in order, in one ``bash``."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.support.image import REPO

README = REPO / "deploy" / "README.md"
#: The walk from nothing to a job; its first three blocks (the toolchain's PATH, the image on the node, the
#: storage) come before the other sections' blocks.
WALK = "## From nothing to a job on this machine's real node"
HA_BUNDLED = "## HA with the bundled PostgreSQL"
PLAIN = "## HA on your PostgreSQL: the plain manifests"


def blocks(section: str) -> list[str]:
    """The ``sh`` blocks of the README's section (its ``## `` title), in order."""
    body = README.read_text().split(section + "\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```sh\n(.*?)^```$", body, flags=re.S | re.M)


def run_blocks(commands: list[str], env: dict[str, str], keep: Path | None = None) -> subprocess.CompletedProcess:
    """The blocks in one ``bash`` that stops at the first failure (``set -euo pipefail``), from the repository's
    root; with ``keep``, the environment they end with is written there (``env -0``) for the blocks that follow."""
    script = "set -euo pipefail\n" + "\n".join(commands) + (f"\nenv -0 > {keep}\n" if keep else "")
    return subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, timeout=3600, env=env)


def kept_env(path: Path) -> dict[str, str]:
    """The environment :func:`run_blocks` kept."""
    return dict(item.split("=", 1) for item in path.read_text().split("\0") if "=" in item)


def said(result: subprocess.CompletedProcess) -> list[str]:
    """Its output's lines with runs of spaces as one (helm aligns its reports' values with spaces)."""
    return [" ".join(line.split()) for line in result.stdout.splitlines()]


def remove_release(real_node, claims: tuple[str, ...]) -> None:
    """What an interrupted earlier run of the walk or the HA section left: the release ``flotilla`` in namespace
    ``flotilla`` (it would make ``helm install`` refuse the name), its pods, the ``claims``, the walk's volume and
    class."""
    kube = ["--kubeconfig", real_node.kubeconfig, "--kube-context", real_node.context, "--namespace", "flotilla"]
    subprocess.run([str(real_node.bin_dir / "helm"), "uninstall", "flotilla", *kube, "--wait"], capture_output=True,
                   timeout=300)
    real_node.delete_pods("flotilla")
    kubectl = [str(real_node.bin_dir / "kubectl"), "--kubeconfig", real_node.kubeconfig, "--context",
               real_node.context, "--ignore-not-found"]
    for args in (*(("--namespace", "flotilla", "delete", "persistentvolumeclaim", claim) for claim in claims),
                 ("delete", "persistentvolume", "flotilla-store"), ("delete", "storageclass", "local")):
        subprocess.run([*kubectl, *args], capture_output=True, timeout=300)
