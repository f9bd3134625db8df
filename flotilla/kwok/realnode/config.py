"""The node's config files, rendered from the package's templates (``@KEY@`` replaced) into ``DIR/config`` once
per state directory, so the ports picked at the first start stay across restarts; and the kubelet's ``maxPods``,
rewritten in place.
"""

from __future__ import annotations

from pathlib import Path

from flotilla.kwok.realnode import host
from flotilla.kwok.realnode.layout import (BRIDGE, CGROUP_ROOT, CLUSTER, CNI_BIN, HERE, NETWORK, PAUSE_IMAGE, SUBNET,
                                           RealNode, RealNodeError)

#: The kubelet's ``maxPods`` as the node starts (:file:`kubelet.yaml`); ``restart_kubelet`` sets another.
MAX_PODS = 110


def render(template: str, **values: str) -> str:
    """The package's file ``template`` with each ``@KEY@`` replaced by ``values[KEY]``."""
    text = (HERE / template).read_text()
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    return text


def cluster_kubeconfig() -> Path:
    """The kubeconfig kwokctl writes for the node's cluster (the components on the machine use it)."""
    from flotilla.kwok.cluster import workdir
    return workdir(CLUSTER) / "kubeconfig.yaml"


def first_start(rn: RealNode) -> bool:
    """Whether the state directory has no configs yet: the node has not been started from it."""
    return not (rn.dir / "config" / "kubelet.yaml").exists()


def write_configs(rn: RealNode) -> None:
    """The state directory's layout, containerd's config, the CNI's conflist and the kubelet's config (its ports
    picked now), written at the first start only."""
    config = rn.dir / "config"
    if not first_start(rn):
        return   # kept from the first start: the kubelet's ports stay what they were
    for sub in ("config", "logs", "pids", "images", "cni/net.d", "cni/ipam", "kubelet/pki", "pod-logs"):
        (rn.dir / sub).mkdir(parents=True, exist_ok=True)
    common = {"DIR": str(rn.dir)}
    (config / "containerd.toml").write_text(render("containerd.toml", PAUSE_IMAGE=PAUSE_IMAGE, CNI_BIN=CNI_BIN,
                                                   **common))
    (rn.dir / "cni" / "net.d" / "10-flotilla.conflist").write_text(
        render("cni.conflist", NETWORK=NETWORK, BRIDGE=BRIDGE, SUBNET=SUBNET, **common))
    port = host.free_port(10250)
    healthz = host.free_port(10248)
    from flotilla.kwok.realnode import network
    (config / "kubelet.yaml").write_text(render("kubelet.yaml", CGROUP_ROOT=CGROUP_ROOT, PORT=str(port),
                                                HEALTHZ_PORT=str(healthz), MAX_PODS=str(MAX_PODS),
                                                CLUSTER_DNS=network.dns_address(),
                                                CLUSTER_DOMAIN=network.CLUSTER_DOMAIN, **common))


def set_max_pods(rn: RealNode, max_pods: int) -> bool:
    """Write ``maxPods: max_pods`` into the kubelet's config (the rest of it, ports included, kept); False when
    it already says so."""
    path = rn.dir / "config" / "kubelet.yaml"
    lines = path.read_text().splitlines(keepends=True)
    at = [k for k, line in enumerate(lines) if line.startswith("maxPods:")]
    if len(at) != 1:
        raise RealNodeError(f"{path}: expected one maxPods line, found {len(at)}")
    line = f"maxPods: {max_pods}\n"
    if lines[at[0]] == line:
        return False
    lines[at[0]] = line
    path.write_text("".join(lines))
    return True
