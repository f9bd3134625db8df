"""What ``stop`` removes once the node's processes are gone: the node's pods (drained first, while the kubelet
still tears their sandboxes down), the mounts under the state directory, the bridge and the CNI's per-pod NAT
chains, and the pods' cgroups. The iptables chains the kubelet and the CNI plugins leave are :mod:`chains`'.
"""

from __future__ import annotations

import shlex
import subprocess
import time
from pathlib import Path

from flotilla.kwok.realnode import host
from flotilla.kwok.realnode.layout import BRIDGE, CGROUP_ROOT, NETWORK, NODE, RealNode


def drain_node(rn: RealNode) -> None:
    """Delete the node's pods while the kubelet runs (it tears their sandboxes and networks down), then the node."""
    from flotilla.kubernetes.client import ApiError, KubeError, pod_path

    try:
        client = rn.client(timeout=5.0)
    except Exception:  # noqa: BLE001 - no usable kubeconfig: nothing to drain through
        return
    try:
        selector = {"fieldSelector": f"spec.nodeName={NODE}"}
        for pod in client.get("/api/v1/pods", **selector)["items"]:
            meta = pod["metadata"]
            try:
                client.delete(pod_path(meta["namespace"], meta["name"]), {"gracePeriodSeconds": 1})
            except ApiError:
                pass
        deadline = time.monotonic() + 30
        while client.get("/api/v1/pods", **selector)["items"] and time.monotonic() < deadline:
            time.sleep(0.2)
        try:
            client.delete(f"/api/v1/nodes/{NODE}")
        except ApiError:
            pass
    except KubeError:
        pass
    finally:
        client.close()


def mounts_under(directory: Path) -> list[str]:
    prefix = str(directory).rstrip("/") + "/"
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        target = line.split()[4].replace("\\040", " ")
        if target.startswith(prefix) or target == str(directory):
            out.append(target)
    return out


def unmount_all(directory: Path) -> list[str]:
    """Unmount everything under ``directory``, deepest first; what is still mounted after a lazy retry."""
    for target in sorted(set(mounts_under(directory)), key=len, reverse=True):
        if subprocess.run(["umount", target], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", target], capture_output=True)
    return mounts_under(directory)


def remove_network() -> None:
    """The bridge, and the NAT rules and chains the bridge plugin made for pods it did not tear down."""
    subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)
    # The bridge plugin's ipMasq adds one POSTROUTING rule and one CNI-<hash> chain per pod, commented with
    # the network's name; a sandbox not torn down by the plugin leaves them behind.
    saved = subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True).stdout
    tag = f'name: \\"{NETWORK}\\"'
    chains = set()
    for line in saved.splitlines():
        if tag not in line:
            continue
        chains.update(word for word in line.split() if word.startswith("CNI-"))
        if line.startswith("-A POSTROUTING "):
            delete_rule(line)
    for chain in sorted(chains):
        subprocess.run(["iptables", "-t", "nat", "-F", chain], capture_output=True)
        subprocess.run(["iptables", "-t", "nat", "-X", chain], capture_output=True)


def delete_rule(saved_line: str) -> None:
    """Delete one ``iptables-save`` rule line (``-A CHAIN ...``) from the nat table, quoting as the shell would."""
    args = shlex.split(saved_line)
    args[0] = "-D"
    subprocess.run(["iptables", "-t", "nat", *args], capture_output=True)


def remove_cgroups() -> None:
    """The pods' cgroup root in every hierarchy, deepest cgroups first (a cgroup still holding a task stays)."""
    for hierarchy in host.cgroup_hierarchies():
        root = hierarchy / CGROUP_ROOT.lstrip("/")
        if not root.is_dir():
            continue
        for path in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            try:
                path.rmdir()
            except OSError:
                pass
        try:
            root.rmdir()
        except OSError:
            pass
