"""What the node needs of this machine, checked and found: commands and their Debian packages, a static busybox,
the Kubernetes toolchain, the node IP, free ports and the cgroup v1 hierarchies (the pods' cgroup root in each).
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

from flotilla.kwok.realnode import processes
from flotilla.kwok.realnode.layout import CGROUP_ROOT, CNI_BIN, RealNodeError

TOOLS = ("kubelet", "kube-controller-manager", "kube-scheduler", "kube-proxy", "coredns")
COMMANDS = {"containerd": "containerd", "ctr": "containerd", "runc": "runc", "iptables": "iptables",
            CNI_BIN + "/bridge": "containernetworking-plugins", "gcc": "gcc", "conntrack": "conntrack"}


def missing_commands() -> dict[str, str]:
    """Commands the node needs that are not on this machine -> the Debian package that has them."""
    return {cmd: pkg for cmd, pkg in COMMANDS.items()
            if not (os.access(cmd, os.X_OK) if cmd.startswith("/") else shutil.which(cmd))}


def busybox_path() -> Path:
    """Debian's ``busybox-static`` binary (a dynamic busybox would not run in an image without a libc)."""
    path = Path("/bin/busybox")
    if not path.is_file():
        raise RealNodeError("/bin/busybox missing: install Debian's busybox-static package")
    with open(path, "rb") as fh:
        header = fh.read(4096)
    if b"ld-linux" in header or b"/lib64/ld" in header:
        raise RealNodeError("/bin/busybox is dynamically linked: install Debian's busybox-static package")
    return path


def tools(bin_dir: Path | None = None) -> Path:
    """The toolchain directory, with kubelet, kube-controller-manager and kube-scheduler beside the KWOK tools."""
    from flotilla.kwok.cluster import KwokError, find_bin_dir

    try:
        bin_dir = bin_dir or find_bin_dir()
    except KwokError as exc:
        raise RealNodeError(str(exc)) from None
    missing = [t for t in TOOLS if not (bin_dir / t).exists()]
    if missing:
        raise RealNodeError(f"{bin_dir} lacks {', '.join(missing)}: run scripts/k8s-tools (it builds them)")
    return bin_dir


def node_ip() -> str:
    """This machine's address toward the outside (the kubelet refuses a loopback node IP)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("192.0.2.254", 9))   # no packet is sent: only picks the route's source address
            address = sock.getsockname()[0]
        except OSError:
            address = ""
    if address and not address.startswith("127."):
        return address
    out = processes.run(["ip", "-4", "-o", "addr", "show", "scope", "global"], check=False).stdout.split()
    for word in out:
        if "/" in word and word[0].isdigit():
            return word.split("/")[0]
    raise RealNodeError("no non-loopback IPv4 address on this machine for the kubelet's --node-ip")


def free_port(preferred: int) -> int:
    """``preferred`` if nothing listens on it, else a port the system picks."""
    for port in (preferred, 0):
        with socket.socket() as sock:
            try:
                sock.bind(("0.0.0.0", port))
            except OSError:
                continue
            return sock.getsockname()[1]
    raise RealNodeError("no free port")


def cgroup_hierarchies() -> list[Path]:
    """The cgroup v1 hierarchies (the kubelet's cgroupRoot must exist in each)."""
    out = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[2] == "cgroup":
            out.append(Path(parts[1]))
    return out


def make_cgroups() -> None:
    """The pods' cgroup root (:data:`CGROUP_ROOT`) in every hierarchy; ``teardown.remove_cgroups`` removes it."""
    for hierarchy in cgroup_hierarchies():
        (hierarchy / CGROUP_ROOT.lstrip("/")).mkdir(exist_ok=True)
