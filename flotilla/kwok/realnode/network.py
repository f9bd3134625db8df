"""The real node's Services and DNS: kube-proxy (iptables mode) and CoreDNS, host processes as on a node.

A pod on a cluster of one's own reaches the API server through the
``kubernetes`` Service and finds Services by name; so does a pod on
``real-1``:

- **kube-proxy** (iptables mode, :file:`kube-proxy.yaml`) watches Services and
  EndpointSlices and writes the ``KUBE-*`` chains that DNAT a ClusterIP to an
  endpoint. The ``kubernetes`` Service's endpoint is the API server's
  advertise address, this machine's node IP (the API server binds every
  address), which a pod reaches through the bridge's gateway; its serving
  certificate names that IP, the Service's ClusterIP (:data:`API_CLUSTER_IP`,
  the first address of the API server's default Service range) and the
  ``kubernetes.default.svc.cluster.local`` names, so an in-cluster client
  verifies it. ``clusterCIDR`` is the bridge's subnet: traffic from outside it
  to a ClusterIP is masqueraded, a pod's own is not (the bridge hands its
  frames to iptables, ``bridge-nf-call-iptables``, so replies are un-NATed).
  ``stop`` ends it and runs ``kube-proxy --cleanup``, which removes its chains.
- **CoreDNS** (:file:`Corefile`) with its ``kubernetes`` plugin answers
  ``SERVICE.NAMESPACE.svc.cluster.local`` (and pods' and reverse names) from
  the API server, and forwards every other name to the resolvers of this
  machine's ``/etc/resolv.conf``. It listens on the node IP, port 53 (the
  bridge's gateway exists only once a pod has a sandbox; the node IP is there
  from the start and pods reach it the same way), which is the kubelet's
  ``clusterDNS``, with ``clusterDomain: cluster.local``.

Both are started once the node is Ready, each skipped while it runs, and
waited for: kube-proxy until its healthz says it has synced its rules,
CoreDNS until its ``ready`` plugin says the ``kubernetes`` plugin has read
the API. Their pids and command lines are recorded, logs go to ``logs/``,
like the node's other processes.
"""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from flotilla.kwok.realnode import config, host, processes
from flotilla.kwok.realnode.layout import CONTEXT, NODE, SUBNET, RealNode, RealNodeError

#: The ``kubernetes`` Service's ClusterIP: the first address of the API server's default Service range
#: (10.0.0.0/24; kwokctl passes no ``--service-cluster-ip-range``). Its serving certificate must name it.
API_CLUSTER_IP = "10.0.0.1"
CLUSTER_DOMAIN = "cluster.local"
#: The processes, in the order they start (stopped in the reverse one).
COMPONENTS = ("kube-proxy", "coredns")


def dns_address() -> str:
    """Where CoreDNS listens and the kubelet's ``clusterDNS`` points: the node IP."""
    return host.node_ip()


def write_configs(rn: RealNode) -> None:
    """kube-proxy's config and CoreDNS's Corefile, written once (their ports kept across restarts)."""
    config_dir = rn.dir / "config"
    if not (config_dir / "kube-proxy.yaml").exists():
        (config_dir / "kube-proxy.yaml").write_text(config.render(
            "kube-proxy.yaml", KUBECONFIG=str(config.cluster_kubeconfig()), CONTEXT=CONTEXT,
            NODE=NODE, NODE_IP=host.node_ip(), CLUSTER_CIDR=SUBNET,
            HEALTHZ_PORT=str(host.free_port(10256)), METRICS_PORT=str(host.free_port(10249))))
    if not (config_dir / "Corefile").exists():
        (config_dir / "Corefile").write_text(config.render(
            "Corefile", DNS_IP=dns_address(), DOMAIN=CLUSTER_DOMAIN, KUBECONFIG=str(config.cluster_kubeconfig()),
            CONTEXT=CONTEXT, READY_PORT=str(host.free_port(8181))))


def _setting(rn: RealNode, file: str, prefix: str) -> str:
    """The value after ``prefix`` on the first line of ``config/FILE`` that starts with it (stripped)."""
    for line in (rn.dir / "config" / file).read_text().splitlines():
        if line.strip().startswith(prefix):
            return line.strip()[len(prefix):].strip().strip('"')
    raise RealNodeError(f"{rn.dir / 'config' / file}: no line starting with {prefix!r}")


def start(rn: RealNode, bin_dir: Path, timeout: float = 60.0) -> None:
    """Start kube-proxy and CoreDNS where not running, then wait until both serve."""
    write_configs(rn)
    if processes.pid(rn, "kube-proxy") is None:
        processes.spawn(rn, "kube-proxy", [str(bin_dir / "kube-proxy"),
                                           "--config", str(rn.dir / "config" / "kube-proxy.yaml"), "--v=1"])
    if processes.pid(rn, "coredns") is None:
        processes.spawn(rn, "coredns", [str(bin_dir / "coredns"), "-conf", str(rn.dir / "config" / "Corefile")])
    _wait_serving(rn, "kube-proxy", f"http://{_setting(rn, 'kube-proxy.yaml', 'healthzBindAddress:')}/healthz",
                  timeout)
    _wait_serving(rn, "coredns", f"http://{_setting(rn, 'Corefile', 'ready')}/ready", timeout)


def _wait_serving(rn: RealNode, component: str, url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if processes.pid(rn, component) is None:
            reason = processes.exit_reason(rn, component) or "not running"
            raise RealNodeError(f"{component} ended ({reason}); its log ({rn.log_file(component)}):\n"
                                f"{processes.tail(rn.log_file(component))}")
        if time.monotonic() > deadline:
            raise RealNodeError(f"{component} not serving {url} after {timeout:.0f}s; its log "
                                f"({rn.log_file(component)}):\n{processes.tail(rn.log_file(component))}")
        time.sleep(0.1)


def running(rn: RealNode) -> bool:
    return all(processes.pid(rn, c) is not None for c in COMPONENTS)


def stop(rn: RealNode, bin_dir: Path | None) -> list[str]:
    """End CoreDNS and kube-proxy, then remove kube-proxy's chains; what could not be removed."""
    for component in reversed(COMPONENTS):
        processes.end(rn, component)
    proxy = (bin_dir / "kube-proxy") if bin_dir else None
    if proxy is None or not proxy.exists():
        return []
    try:
        result = subprocess.run([str(proxy), "--cleanup", "--v=0"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"kube-proxy --cleanup: {exc}"]
    if result.returncode != 0:
        return [f"kube-proxy --cleanup failed ({result.returncode}): {result.stderr.strip()[-400:]}"]
    return []
