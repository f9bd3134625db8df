"""The node's kubelet: started (once more after an exit at start-up), waited for until the node is Ready,
stopped alone (a lost node, for tests) and restarted with another ``maxPods``.
"""

from __future__ import annotations

import time
from pathlib import Path

from flotilla.kwok.realnode import config, host, processes
from flotilla.kwok.realnode.layout import NODE, NODE_LABEL, RealNode, RealNodeError, node

#: A kubelet that ends this soon after its start is started once more (an exit at start-up, seen once under a
#: loaded machine and not again by hand); the first exit's reason goes to its log.
EARLY_EXIT = 10.0


class KubeletExited(RealNodeError):
    """The kubelet ended while the node was waited for; ``reason`` is how (an exit status or a signal)."""

    def __init__(self, rn: RealNode, reason: str):
        self.reason = reason
        log = rn.log_file("kubelet")
        super().__init__(f"the kubelet exited ({reason}); its log ({log}):\n{processes.tail(log)}")


def start_kubelet(rn: RealNode | None = None, bin_dir: Path | None = None) -> bool:
    """Start the kubelet if it is not running (False if it was). Does not wait for the node to be Ready."""
    rn = rn or node()
    if processes.pid(rn, "kubelet") is not None:
        return False
    bin_dir = host.tools(bin_dir)
    host.make_cgroups()
    processes.spawn(rn, "kubelet", [
        str(bin_dir / "kubelet"), "--config", str(rn.dir / "config" / "kubelet.yaml"),
        "--kubeconfig", str(config.cluster_kubeconfig()), "--hostname-override", NODE, "--node-ip", host.node_ip(),
        "--root-dir", str(rn.dir / "kubelet"), "--cert-dir", str(rn.dir / "kubelet" / "pki"),
        "--node-labels", f"{NODE_LABEL}=true", "--v=1"])
    return True


def restart_kubelet(rn: RealNode | None = None, bin_dir: Path | None = None, max_pods: int | None = None,
                    timeout: float = 90.0) -> None:
    """Restart the kubelet with ``maxPods: max_pods`` in its config (:data:`~config.MAX_PODS` when None), then
    wait until the node is Ready and its allocatable ``pods`` is ``max_pods``. A kubelet already running with that
    setting is left as it is. The pods on the node run on: the kubelet takes them up again."""
    rn = rn or node()
    max_pods = config.MAX_PODS if max_pods is None else max_pods
    if isinstance(max_pods, bool) or not isinstance(max_pods, int) or max_pods < 1:
        raise RealNodeError(f"maxPods must be a whole number of pods of at least 1, not {max_pods!r}")
    if not (rn.dir / "config" / "kubelet.yaml").exists():
        raise RealNodeError(f"no real node in {rn.dir} (scripts/real-node start)")
    with processes.locked(rn.dir):
        changed = config.set_max_pods(rn, max_pods)
        if changed or processes.pid(rn, "kubelet") is None:
            processes.end(rn, "kubelet")
        kubelet_up(rn, bin_dir, timeout)
    wait_pod_slots(rn, max_pods, timeout)


def wait_pod_slots(rn: RealNode, max_pods: int, timeout: float) -> None:
    """Until the node object's allocatable ``pods`` is ``max_pods`` (the restarted kubelet's first status)."""
    from flotilla.kubernetes.client import KubeError

    client = rn.client()
    deadline = time.monotonic() + timeout
    seen = None
    try:
        while True:
            try:
                status = client.get(f"/api/v1/nodes/{NODE}").get("status") or {}
                seen = (status.get("allocatable") or {}).get("pods")
            except KubeError:
                pass
            if seen == str(max_pods):
                return
            if time.monotonic() > deadline:
                raise RealNodeError(f"node {NODE}: allocatable pods {seen} after {timeout:.0f}s, not {max_pods}; "
                                    f"the kubelet's log ({rn.log_file('kubelet')}):\n"
                                    f"{processes.tail(rn.log_file('kubelet'))}")
            time.sleep(0.1)
    finally:
        client.close()


def kubelet_up(rn: RealNode | None = None, bin_dir: Path | None = None, timeout: float = 90.0) -> None:
    """Start the kubelet if it is not running and wait until the node is Ready. A kubelet this call started that
    exits within :data:`EARLY_EXIT` seconds is started once more, the reason of its first exit written to its
    log (and said on stderr); a second exit is an error naming its reason and the log."""
    rn = rn or node()
    began = time.monotonic()
    if not start_kubelet(rn, bin_dir):
        wait_ready(rn, timeout)
        return
    try:
        wait_ready(rn, timeout)
    except KubeletExited as exc:
        lived = time.monotonic() - began
        if lived > EARLY_EXIT:
            raise
        processes.note(rn, "kubelet", f"the kubelet exited {lived:.1f}s after its start ({exc.reason}); "
                                      "starting it once more")
        processes.say(f"the kubelet exited {lived:.1f}s after its start ({exc.reason}); starting it once more "
                      f"(its log: {rn.log_file('kubelet')})")
        start_kubelet(rn, bin_dir)
        wait_ready(rn, timeout)


def stop_kubelet(rn: RealNode | None = None) -> bool:
    """Stop the kubelet alone (its containers keep running, as on a node whose kubelet died). False if not running."""
    return processes.end(rn or node(), "kubelet")


def node_condition(rn: RealNode, client=None) -> str | None:
    """The node's Ready condition status (``True``, ``False``, ``Unknown``), None while it is not registered."""
    from flotilla.kubernetes.client import ApiError

    own = client is None
    client = client or rn.client()
    try:
        obj = client.get(f"/api/v1/nodes/{NODE}")
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
    finally:
        if own:
            client.close()
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return cond.get("status")
    return None


def wait_ready(rn: RealNode, timeout: float = 90.0) -> None:
    """Until the node is Ready; :class:`KubeletExited` as soon as the kubelet is seen to have ended."""
    from flotilla.kubernetes.client import KubeError

    client = rn.client()
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                if node_condition(rn, client) == "True":
                    return
            except KubeError:
                pass
            reason = processes.exit_reason(rn, "kubelet")
            if reason is None and processes.pid(rn, "kubelet") is None:
                # Ended between the two reads: the handle (if this process started it) holds the status now.
                reason = (processes.exit_reason(rn, "kubelet")
                          or "not started by this process: its exit status is unknown")
            if reason is not None:
                raise KubeletExited(rn, reason)
            if time.monotonic() > deadline:
                raise RealNodeError(f"node {NODE} not Ready after {timeout:.0f}s; the kubelet's log "
                                    f"({rn.log_file('kubelet')}):\n{processes.tail(rn.log_file('kubelet'))}")
            time.sleep(0.1)
    finally:
        client.close()
