"""What the Kubernetes backend's ``snapshot()`` costs in CPU time, in-process, without a cluster.

A ``KubernetesCluster`` on no client takes ``--nodes`` nodes and ``--pods``
pods (60% Flotilla's, 40% someone else's, a few being deleted, a tenth
pending and a tenth ended) through the informers' listing path, then times
``--reps`` snapshots in CPU seconds of the process, the garbage collector
paused around them. It prints the median and the fastest, and a digest of
the last snapshot (its running jobs, foreign usage, nodes and host ports), so
two checkouts can be compared for time and for the same answer. It runs
against whichever ``flotilla`` is first on ``PYTHONPATH``::

    python bench/kube_snapshot.py                              # 10,000 nodes, 100,000 pods
    PYTHONPATH=/path/to/base python bench/kube_snapshot.py     # the same on another checkout

Alternate the two in one sitting (paired runs) on a shared machine. It is a benchmark, not a test: it prints
figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import random
import time

import flotilla
from flotilla.kubernetes.backend import KubernetesCluster
from flotilla.kubernetes.pods import ATTEMPT, JOB_ID


def objects(nodes: int, pods: int, seed: int) -> tuple[list[dict], list[dict]]:
    """The node and pod objects a listing would bring."""
    rng = random.Random(seed)
    node_objects = [{"metadata": {"name": f"n{i}", "labels": {"zone": f"z{i % 3}"}}, "spec": {},
                     "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"},
                                "conditions": [{"type": "Ready", "status": "True"}]}} for i in range(nodes)]
    pod_objects = []
    for i in range(pods):
        ours = rng.random() < 0.6
        meta = {"namespace": "default", "name": f"p{i}", "uid": f"u{i}",
                "labels": {JOB_ID: f"job-{i}", "flotilla.io/queue": "q"} if ours else {"app": f"a{i % 50}"},
                "annotations": {ATTEMPT: "0"} if ours else {}}
        if rng.random() < 0.03:
            meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        spec = {"nodeName": f"n{rng.randrange(nodes)}", "containers": [{"name": "c", "resources": {"requests": {
            "cpu": f"{rng.choice([100, 250, 500, 1000])}m", "memory": "1Gi"}}}]}
        phase = rng.choice(["Running"] * 8 + ["Pending", "Succeeded"])
        pod_objects.append({"metadata": meta, "spec": spec, "status": {"phase": phase}})
    return node_objects, pod_objects


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    node_objects, pod_objects = objects(args.nodes, args.pods, args.seed)
    backend = KubernetesCluster("c", client=object(), start=False, workers=1, delete_finished=False)
    try:
        backend.dispatch.replace("nodes", node_objects)
        backend.dispatch.replace("pods", pod_objects)
        times = []
        gc.disable()
        for _ in range(args.reps):
            began = time.process_time()
            snap = backend.snapshot()
            times.append(time.process_time() - began)
        gc.enable()
    finally:
        backend._pool.shutdown(wait=False)
    answer = [[job.id for job in snap.running],
              sorted((node, sorted(used.items())) for node, used in snap.foreign.items()), [node.name for node in snap.nodes], sorted(snap.foreign_ports.items())]
    times.sort()
    print(json.dumps({"tree": flotilla.__file__.rsplit("/flotilla/", 1)[0], "nodes": args.nodes, "pods": args.pods,
                      "median_ms": round(times[len(times) // 2] * 1000, 2), "min_ms": round(times[0] * 1000, 2),
                      "running": len(snap.running),
                      "digest": hashlib.sha256(json.dumps(answer).encode()).hexdigest()[:16]}))


if __name__ == "__main__":
    main()
