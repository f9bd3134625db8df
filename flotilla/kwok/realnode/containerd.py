"""The node's containerd (its own socket, root and state; the CRI plugin with runc and the bridge CNI) and what
goes through it: the images imported at start, the containers removed at stop.
"""

from __future__ import annotations

import subprocess
import time

from flotilla.kwok.realnode import host, processes
from flotilla.kwok.realnode.layout import HERE, IMAGE, PAUSE_IMAGE, RealNode, RealNodeError


def ctr(rn: RealNode, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    """``ctr`` against the node's containerd, in the CRI's namespace ``k8s.io``."""
    return processes.run(["ctr", "--address", str(rn.socket), "-n", "k8s.io", *args], timeout=timeout, check=check)


def start_containerd(rn: RealNode) -> None:
    """Start containerd unless it runs, then wait until it answers on its socket."""
    if processes.pid(rn, "containerd") is None:
        rn.socket.unlink(missing_ok=True)
        processes.spawn(rn, "containerd", ["containerd", "--config", str(rn.dir / "config" / "containerd.toml")])
    deadline = time.monotonic() + 30
    while ctr(rn, "version", check=False, timeout=10).returncode != 0:
        if processes.pid(rn, "containerd") is None or time.monotonic() > deadline:
            raise RealNodeError(f"containerd did not start; its log ({rn.log_file('containerd')}):\n"
                                f"{processes.tail(rn.log_file('containerd'))}")
        time.sleep(0.05)


def import_images(rn: RealNode) -> None:
    """Build and import :data:`IMAGE` and :data:`PAUSE_IMAGE` unless containerd has them."""
    from flotilla.kwok.realnode.images import build_images

    have = set(ctr(rn, "images", "ls", "-q").stdout.split())
    wanted = {IMAGE, PAUSE_IMAGE}
    if wanted <= have:
        return
    try:
        tars = build_images(rn.dir / "images", host.busybox_path(), HERE / "pause.c", IMAGE, PAUSE_IMAGE)
    except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
        raise RealNodeError(f"building the images: {exc}") from None
    for tar in tars:
        ctr(rn, "images", "import", str(tar))
    have = set(ctr(rn, "images", "ls", "-q").stdout.split())
    if not wanted <= have:
        raise RealNodeError(f"images not in containerd after import: {sorted(wanted - have)} (have {sorted(have)})")


def remove_containers(rn: RealNode) -> None:
    """Kill and remove every task and container containerd still has (the kubelet gone, none is torn down)."""
    if not rn.socket.exists() or processes.pid(rn, "containerd") is None:
        return
    tasks = ctr(rn, "tasks", "ls", "-q", check=False).stdout.split()
    for task in tasks:
        ctr(rn, "tasks", "kill", "-s", "KILL", task, check=False)
    deadline = time.monotonic() + 10
    while ctr(rn, "tasks", "ls", "-q", check=False).stdout.split() and time.monotonic() < deadline:
        time.sleep(0.1)
    for task in ctr(rn, "tasks", "ls", "-q", check=False).stdout.split():
        ctr(rn, "tasks", "rm", "-f", task, check=False)
    for container in ctr(rn, "containers", "ls", "-q", check=False).stdout.split():
        ctr(rn, "containers", "rm", container, check=False)
