"""What kube tools read of Flotilla's binds: a ``Scheduled`` Event per bind as kube-scheduler writes it, no Event
into a namespace being deleted, a held in-cluster start nominated to its node, and an in-cluster pod deleted by its
owner cancelled (not failed). Driven by watch events as the API server sends them, with a recording client."""

from __future__ import annotations

from flotilla.core.backend import ClusterDecisions
from flotilla.core.decisions import Placement
from flotilla.core.model import Job
from flotilla.kubernetes.intake import POD_NAME, POD_NAMESPACE, POD_UID, job_id_of
from flotilla.kubernetes.pods import JOB_ID
from tests.support.kube_fakes import backend_with, events, foreign, node, start


def settle(backend) -> None:
    if backend.reporting.pool is not None:
        backend.reporting.pool.shutdown(wait=True)
        backend.reporting.pool = None


def seen(backend, job_id: str, node_name: str, phase: str = "Pending", namespace: str = "default") -> None:
    backend.dispatch.on_pod("ADDED", {
        "metadata": {"namespace": namespace, "name": f"flotilla-{job_id}-0", "uid": f"uid-{job_id}",
                     "labels": {JOB_ID: job_id}, "annotations": {JOB_ID: job_id}},
        "spec": {"nodeName": node_name, "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": phase}})


def event_bodies(client) -> list[dict]:
    return [body for path, body in client.posts if path.endswith("/events")]


def test_every_bind_gets_a_scheduled_event_as_kube_scheduler_writes_it():
    backend, client = backend_with(node("n1", "4"))
    try:
        start(backend, ("j1", "n1", 1000))
        seen(backend, "j1", "n1")
        seen(backend, "j1", "n1", "Running")   # later news of the pod: no second Event
        settle(backend)
        [event] = event_bodies(client)
        assert (event["type"], event["reason"], event["action"], event["message"]) == \
            ("Normal", "Scheduled", "Binding", "Successfully assigned default/flotilla-j1-0 to n1")
        assert event["metadata"]["name"].startswith("flotilla-j1-0.")
        assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "default",
                                           "name": "flotilla-j1-0", "uid": "uid-j1"}
        assert event["source"] == {"component": "flotilla"} and event["reportingComponent"] == "flotilla"
        # A pod the watch lists after a restart was not bound by this process: nothing said.
        seen(backend, "old", "n1", "Running")
        settle(backend)
        assert len(event_bodies(client)) == 1
    finally:
        backend._pool.shutdown(wait=False)


def test_no_event_into_a_namespace_being_deleted():
    backend, client = backend_with(node("n1", "4"))
    try:
        backend.dispatch.on_event("namespaces", "MODIFIED", {"metadata": {"name": "gone", "deletionTimestamp": "x"},
                                                     "status": {"phase": "Terminating"}})
        backend.reporter.scheduled("gone", "p", "uid-p", "n1")
        backend.reporter.scheduled("default", "p", "uid-p", "n1")
        assert [body["metadata"]["namespace"] for body in event_bodies(client)] == ["default"]
        backend.dispatch.on_event("namespaces", "DELETED", {"metadata": {"name": "gone"}})
        backend.reporter.scheduled("gone", "p", "uid-p", "n1")
        assert len(event_bodies(client)) == 2
    finally:
        backend._pool.shutdown(wait=False)


def in_cluster_job(job_id: str, cpu: int) -> Job:
    return Job(job_id, "q", requests={"cpu": cpu}, annotations={POD_UID: f"uid-{job_id}", POD_NAMESPACE: "team",
                                                                 POD_NAME: f"pod-{job_id}"})


def test_a_held_in_cluster_start_is_nominated_to_its_node_until_dropped():
    backend, client = backend_with(node("n1", "4"))
    try:
        victim = foreign("victim", "n1", "4")
        backend.dispatch.on_pod("ADDED", victim)
        victim["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        backend.dispatch.on_pod("MODIFIED", victim)
        work: list = []
        with backend._lock:
            backend._apply(ClusterDecisions(start=[Placement(in_cluster_job("j1", 2000), "c", "n1")]), work)
        assert backend.held() == {"n1": ["j1"]}
        settle(backend)
        patches = [(path, body) for path, body in client.posts if path.endswith("/status")]
        assert patches == [("/api/v1/namespaces/team/pods/pod-j1/status",
                            {"metadata": {"uid": "uid-j1"}, "status": {"nominatedNodeName": "n1"}})]
        [event] = event_bodies(client)
        assert (event["type"], event["reason"], event["message"]) == (
            "Normal", "Nominated", "flotilla: waiting on node n1 for the pods leaving it (preempted) to be gone")
        with backend._lock:
            backend._apply(ClusterDecisions(cancel=[in_cluster_job("j1", 2000)]), work)
        settle(backend)
        assert [body for path, body in client.posts if path.endswith("/status")][-1] == \
            {"metadata": {"uid": "uid-j1"}, "status": {"nominatedNodeName": None}}
    finally:
        backend._pool.shutdown(wait=False)


def in_cluster_pod(name: str, node_name: str, conditions=()) -> dict:
    uid = f"0000000{name}-0000-0000-0000-000000000000"
    return {"metadata": {"namespace": "team", "name": name, "uid": uid, "annotations": {JOB_ID: job_id_of(uid)}},
            "spec": {"nodeName": node_name, "schedulerName": "flotilla",
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Running", "conditions": list(conditions)}}


def test_an_in_cluster_pod_deleted_by_its_owner_is_cancelled_an_evicted_one_failed():
    backend, _ = backend_with(node("n1", "4"))
    try:
        backend.dispatch.on_pod("ADDED", in_cluster_pod("a", "n1"))
        backend.dispatch.on_pod("ADDED", in_cluster_pod("b", "n1", [{
            "type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting"}]))
        events(backend)
        for name in ("a", "b"):
            backend.dispatch.on_pod("DELETED", {"metadata": {"namespace": "team", "name": name}})
        assert events(backend) == [
            (job_id_of("0000000a-0000-0000-0000-000000000000"), "cancelled", "pod deleted outside Flotilla", "Deleted"),
            (job_id_of("0000000b-0000-0000-0000-000000000000"), "failed", "pod deleted outside Flotilla: EvictionByEvictionAPI: Eviction API: evicting", "")]
    finally:
        backend._pool.shutdown(wait=False)
