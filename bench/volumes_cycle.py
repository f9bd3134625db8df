"""One scheduling cycle with WaitForFirstConsumer claims against none: the core's side of volumes at scale.

A benchmark, not a test. ``--nodes`` nodes (1,000), each with ``--pvs-per-node`` local PVs (5) pinned by
``kubernetes.io/hostname``, one WaitForFirstConsumer StorageClass without a provisioner, and ``--jobs`` queued
one-core jobs (5,000) in one queue: first with no claims, then each naming a claim of its own that any of the
PVs matches, resolved by the Kubernetes backend's view (flotilla/kubernetes/volumes.py) from API objects as its
informers keep them. Prints jobs placed and the cycle's seconds for each.

    PYTHONPATH=. python3 bench/volumes_cycle.py
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flotilla.config.loader import parse_config  # noqa: E402
from flotilla.core.model import ClusterSnapshot, Job, Node, PriorityClass, Queue, Snapshot  # noqa: E402
from flotilla.kubernetes.volumes import VolumeState  # noqa: E402
from flotilla.scheduler import Scheduler  # noqa: E402

HOST = "kubernetes.io/hostname"


def state(nodes: int, per_node: int, jobs: int, prebound: bool = False) -> VolumeState:
    """``prebound``: each claim ``c<j>`` is named by the claimRef of PV ``j`` (its binding under way: the start was
    given back, say after ``volumeBindTimeout``, before the PV controller bound the claim)."""
    volumes = VolumeState("ns")

    def claim_ref(i):
        return {"claimRef": {"namespace": "ns", "name": f"c{i}", "uid": f"u{i}"}} if prebound and i < jobs else {}
    volumes.replace("pvs", [{
        "metadata": {"name": f"pv-{n}-{k}", "resourceVersion": "1"},
        "spec": {**claim_ref(n * per_node + k), "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "local",
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": HOST, "operator": "In", "values": [f"node-{n}"]}]}]}}},
        "status": {"phase": "Available"}} for n in range(nodes) for k in range(per_node)])
    volumes.replace("pvcs", [{
        "metadata": {"name": f"c{j}", "namespace": "ns", "uid": f"u{j}", "resourceVersion": "1"},
        "spec": {"storageClassName": "local", "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Pending"}} for j in range(jobs)])
    volumes.replace("storageclasses", [{"metadata": {"name": "local"}, "provisioner": "kubernetes.io/no-provisioner",
                                        "volumeBindingMode": "WaitForFirstConsumer"}])
    return volumes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--pvs-per-node", type=int, default=5)
    args = parser.parse_args(argv)
    volumes = state(args.nodes, args.pvs_per_node, args.jobs)
    prebound = state(args.nodes, args.pvs_per_node, args.jobs, prebound=True)
    nodes = [Node(f"node-{n}", "c1", {"cpu": 32000}, {HOST: f"node-{n}"}) for n in range(args.nodes)]
    requests = {"cpu": 1000}
    claimed = [Job(f"j{j}", "A", requests=requests, claims=(f"ns/c{j}",), submitted=j) for j in range(args.jobs)]
    cases = {"no claims": ([Job(f"p{j}", "A", requests=requests, submitted=j) for j in range(args.jobs)], volumes),
             "a claim each": (claimed, volumes), "each pre-bound": (claimed, prebound)}
    for name, (jobs, volumes) in cases.items():
        scheduler = Scheduler(parse_config("queues: [{name: A}]\n", None))
        started = time.perf_counter()
        snapshot = Snapshot([ClusterSnapshot("c1", nodes, volumes=volumes.view())], jobs, [Queue("A")],
                            [PriorityClass("armada-default", 30000, False)], "armada-default")
        decisions = scheduler.run_cycle(snapshot)
        print(f"{name:14} {len(decisions.scheduled):6} placed  {time.perf_counter() - started:6.2f} s")
        volumes.changed()
    return 0


if __name__ == "__main__":
    sys.exit(main())
