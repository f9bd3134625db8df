"""The Kubernetes backend's pod indexes (per node, ours, everyone else's usage), kept from watch events, answer
as a walk over every pod would: random events, each snapshot compared with the full walk's."""

from __future__ import annotations

import random

from flotilla.core.model import Node
from flotilla.kubernetes.backend import KubernetesCluster
from flotilla.kubernetes.pods import JOB_ID

NODES = ["n1", "n2", "n3"]


def full_walk(backend: KubernetesCluster) -> tuple[list[str], dict[str, dict[str, int]]]:
    """Running job ids and foreign usage per node (``pods``: how many pods), from every pod, as the snapshot's
    definition reads."""
    running, foreign = [], {}
    for pod in backend.cache.pods.values():
        if pod.node is None or pod.node not in backend.nodes or pod.phase in ("Succeeded", "Failed"):
            continue
        requests = pod.requests
        if pod.job is not None:
            if pod.deleting or pod.job.id in backend.book.stopping or backend.book.job_pod.get(pod.job.id) != pod.key \
                    or backend.book.reported.get(pod.key) == "lost":
                requests = pod.job.requests
            else:
                running.append(pod.job.id)
                continue
        used = foreign.setdefault(pod.node, {})
        for resource, amount in requests.items():
            used[resource] = used.get(resource, 0) + amount
        used["pods"] = used.get("pods", 0) + 1   # each pod takes one of the node's pod slots
    return sorted(running), {node: {r: v for r, v in used.items() if v} for node, used in foreign.items()}


def pod(name: str, ours: bool, node: str | None, phase: str, cpu: int, deleting: bool = False) -> dict:
    meta = {"namespace": "default", "name": name, "uid": f"uid-{name}", "labels": {JOB_ID: f"job-{name}"} if ours
            else {"app": "other"}, "annotations": {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec = {"containers": [{"name": "c", "resources": {"requests": {"cpu": f"{cpu}m"}}}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def test_indexed_snapshot_equals_a_walk_over_every_pod():
    backend = KubernetesCluster("c", client=object(), start=False, workers=1)
    try:
        backend.nodes.update({name: Node(name, "c", {"cpu": 64000}) for name in NODES})
        backend.health.synced = {"nodes": True, "pods": True}
        rng = random.Random(7)
        live: dict[str, dict] = {}
        for step in range(3000):
            name = f"p{rng.randrange(60)}"
            if name in live and rng.random() < 0.25:
                backend.dispatch.on_pod("DELETED", {"metadata": {"namespace": "default", "name": name}})
                del live[name]
            else:
                ours = live[name]["ours"] if name in live else rng.random() < 0.4
                node = rng.choice(NODES + ["gone", None])
                phase = rng.choice(["Pending", "Running", "Running", "Succeeded", "Failed"])
                obj = pod(name, ours, node, phase, rng.choice([100, 250, 1000]), deleting=rng.random() < 0.1)
                backend.dispatch.on_pod("MODIFIED", obj)
                live[name] = {"ours": ours}
            if rng.random() < 0.05:
                backend.book.stopping = {f"job-p{rng.randrange(60)}": "preempted"}
            snap = backend.snapshot()
            expected_running, expected_foreign = full_walk(backend)
            assert sorted(job.id for job in snap.running) == expected_running, f"step {step}"
            assert {n: {r: v for r, v in used.items() if v} for n, used in snap.foreign.items() if used} == \
                expected_foreign, f"step {step}"
            for node in NODES:
                assert backend.starts.leaving(node) == any(
                    p.node == node and p.phase not in ("Succeeded", "Failed")
                    and (p.deleting or (p.job is not None and p.job.id in backend.book.stopping))
                    for p in backend.cache.pods.values()), f"step {step}"
    finally:
        backend._pool.shutdown(wait=False)
