"""In-cluster pods, PodGroups and queues as plain dicts, for the intake tests that need no cluster."""

from __future__ import annotations
from flotilla.service.settings import QueueSpec


UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


#: Every side watch listed once: the tracker offers what it holds.
SYNCED = dict(namespaces_synced=True, podgroups_synced=True, jobs_synced=True, jobsets_synced=True)


def pod(name="p", namespace="team-a", uid=UID, node=None, labels=None, annotations=None, **spec) -> dict:
    body = {"schedulerName": "flotilla", "containers": [
        {"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
        {"name": "d", "resources": {"limits": {"cpu": "1"}}}],
        "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}}}],
        "overhead": {"cpu": "100m"}, **spec}
    if node:
        body["nodeName"] = node
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid, "labels": labels or {},
                         "annotations": annotations or {}, "creationTimestamp": "2026-01-02T03:04:05Z",
                         "ownerReferences": [{"kind": "Job", "name": "train", "controller": True}]},
            "spec": body, "status": {"phase": "Pending"}}


def queues():
    return [QueueSpec("A", namespaces=("team-a",)), QueueSpec("B", namespaces=("team-b",))]


def podgroup(name="pg", namespace="team-a", **spec) -> dict:
    return {"metadata": {"namespace": namespace, "name": name}, "spec": spec}
