"""The simulated cluster says nothing about an earlier run of a job started again before that run's end was polled
(the backend protocol's ``poll_events``, as the Kubernetes backend's ledger): the service would take a stale
``cancelled`` for news about the new run and fail it."""

from flotilla.core.backend import ClusterDecisions, JobEvent, SimulatedCluster
from flotilla.core.decisions import Placement
from flotilla.core.model import Job, Node


def cluster_and_jobs():
    clock = [100.0]
    cluster = SimulatedCluster("c1", [Node("n1", "c1", {"cpu": 4000})], clock=lambda: clock[0])
    a, b = Job("a", "q", requests={"cpu": 1000}), Job("b", "q", requests={"cpu": 1000})
    cluster.apply(ClusterDecisions(start=[Placement(a, "c1", "n1"), Placement(b, "c1", "n1")]))
    assert [(e.job_id, e.kind) for e in cluster.poll_events()] == [("a", "running"), ("b", "running")]
    clock[0] = 105.0
    return cluster, a, b


def test_a_job_stopped_and_started_again_before_a_poll_reports_its_new_run_only():
    cluster, a, b = cluster_and_jobs()
    cluster.apply(ClusterDecisions(cancel=[a, b]))
    cluster.apply(ClusterDecisions(start=[Placement(a, "c1", "n1")]))
    assert cluster.poll_events() == [JobEvent("b", "cancelled", "c1", "n1", 105.0, "cancelled"),
                                     JobEvent("a", "running", "c1", "n1", 105.0)]
    assert [j.id for j in cluster.running_jobs()] == ["a"]


def test_a_run_ended_and_polled_is_reported_before_a_new_start():
    cluster, a, _ = cluster_and_jobs()
    cluster.apply(ClusterDecisions(cancel=[a]))
    assert [(e.job_id, e.kind) for e in cluster.poll_events()] == [("a", "cancelled")]
    cluster.apply(ClusterDecisions(start=[Placement(a, "c1", "n1")]))
    assert [(e.job_id, e.kind) for e in cluster.poll_events()] == [("a", "running")]
