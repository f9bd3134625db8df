"""The runner's lease rules, on simulated clusters (no API server): outages, lease expiry, stale pods."""

from __future__ import annotations

from flotilla.config import load_config
from flotilla.core.backend import SimulatedCluster
from flotilla.scheduler import Scheduler
from flotilla.core.model import Job, Node
from flotilla.kubernetes.runner import Runner

CONFIG = """
queues: [{name: A, weight: 1}, {name: B, weight: 1}]
lease: {timeout: 30s}
"""


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def setup(tmp_path, cores=(4, 4)):
    path = tmp_path / "flotilla.yaml"
    path.write_text(CONFIG)
    config = load_config(path)
    clock = Clock()
    backends = {name: SimulatedCluster(name, [Node("n1", name, {"cpu": c * 1000})], clock=clock)
                for name, c in zip(("a", "b"), cores)}
    runner = Runner(Scheduler(config), backends, lease_timeout=config.lease.timeout, clock=clock)
    return runner, backends, clock


def jobs(prefix, n, queue="A", cpu=1):
    return [Job(f"{prefix}-{i}", queue, priority_class="armada-default", requests={"cpu": cpu * 1000}, submitted=i)
            for i in range(1, n + 1)]


def test_an_unreachable_cluster_keeps_its_leases_until_the_timeout_then_they_move(tmp_path):
    runner, backends, clock = setup(tmp_path)
    runner.submit(jobs("j", 8))
    runner.cycle()
    runner.pump_events()
    on_a = {job_id for job_id, r in runner.jobs.items() if r.cluster == "a"}
    assert len(on_a) == 4 and runner.counts() == {"running": 8}

    backends["a"].available = False
    clock.t += 10
    result = runner.cycle()
    assert result.unavailable == ["a"] and result.expired == []
    assert all(runner.jobs[j].cluster == "a" and runner.jobs[j].state == "running" for j in on_a)

    # Room appears on b; a is still away past the lease timeout: a's jobs are queued again and go to b.
    for job_id in [j for j, r in runner.jobs.items() if r.cluster == "b"]:
        backends["b"]._stop(job_id, "succeeded", clock.t, "")
    runner.pump_events()
    clock.t += 31
    result = runner.cycle()
    assert sorted(result.expired) == sorted(on_a)
    assert {p.job.id for p in result.decisions.scheduled} == on_a
    assert all(runner.jobs[j].cluster == "b" for j in on_a)

    # a comes back with the old runs still there: they are cancelled, never counted twice.
    backends["a"].available = True
    runner.cycle()
    assert backends["a"].running_jobs() == []
    assert {j.id for j in backends["b"].running_jobs()} == on_a
    assert [h[1] for h in runner.jobs[sorted(on_a)[0]].history].count("leased") == 2


def test_other_flotilla_jobs_count_for_their_queue_and_unknown_queues_only_take_resources(tmp_path):
    runner, backends, clock = setup(tmp_path, cores=(4, 4))
    from flotilla.core.backend import ClusterDecisions
    from flotilla.core.decisions import Placement

    known = Job("old-1", "B", priority_class="armada-default", requests={"cpu": 2000})
    stranger = Job("x-1", "not-configured", priority_class="gold", requests={"cpu": 2000})
    backends["a"].apply(ClusterDecisions(start=[Placement(known, "a", "n1"), Placement(stranger, "a", "n1")]))
    backends["a"].poll_events()
    runner.submit(jobs("j", 6))
    result = runner.cycle()
    assert len(result.decisions.scheduled) == 4  # a is full (2 + 2), b takes 4
    assert {p.cluster for p in result.decisions.scheduled} == {"b"}
    assert result.decisions.queues["B"].allocated == {"cpu": "2"}


def test_expiries_use_the_jobs_retries_then_fail_it_as_the_service_does(tmp_path):
    runner, backends, clock = setup(tmp_path, cores=(1, 0))
    runner.max_retries = 2
    runner.submit(jobs("j", 1))
    runner.cycle()
    runner.pump_events()
    record = runner.jobs["j-1"]
    reasons = []
    for _ in range(3):
        assert (record.state, record.cluster) == ("running", "a")
        backends["a"].available = False
        clock.t += 31
        result = runner.cycle()      # a unheard of for 31s: the lease expires
        assert result.expired == ["j-1"]
        reasons.append(record.reason)
        backends["a"].available = True
        if record.state == "failed":
            break
        runner.cycle()               # a back: its old run is cancelled and the job leased again
        runner.pump_events()
    assert reasons == ["lease on cluster a not renewed for 31s (timeout 30s) (retry 1 of 2)",
                       "lease on cluster a not renewed for 31s (timeout 30s) (retry 2 of 2)",
                       "lease on cluster a not renewed for 31s (timeout 30s); gave up after 2 retries"]
    assert (record.state, record.retries) == ("failed", 2)
    runner.cycle()
    assert backends["a"].running_jobs() == []     # the last run, back with its cluster, is cancelled


def test_a_pod_lost_with_its_node_uses_no_retry_and_another_loss_does(tmp_path):
    from flotilla.core.backend import JobEvent

    runner, backends, clock = setup(tmp_path, cores=(2, 0))
    runner.submit(jobs("j", 2))
    runner.cycle()
    runner.pump_events()
    assert runner.counts() == {"running": 2}
    runner._on_event(JobEvent("j-1", "lost", "a", "n1", clock.t, "node n1 deleted", cause="NodeLost"))
    runner._on_event(JobEvent("j-2", "lost", "a", "n1", clock.t, "pod deleted"))
    first, second = runner.jobs["j-1"], runner.jobs["j-2"]
    assert (first.state, first.retries, first.reason) == ("queued", 0, "lost on cluster a: node n1 deleted")
    assert (second.state, second.retries, second.reason) == ("queued", 1,
                                                            "lost on cluster a: pod deleted (retry 1 of 3)")


def test_a_gang_member_returned_at_its_bind_takes_its_gang_back_to_the_queue_whole(tmp_path):
    """Its mates' pods are cancelled and the gang is placed again all together; nobody uses a retry."""
    from dataclasses import replace

    from flotilla.core.backend import ClusterDecisions, JobEvent
    from flotilla.core.model import Gang

    class ReturnsOnce(SimulatedCluster):
        """The first start of g-2 is returned, as the bind check returns a pod that no longer fits."""
        returned = False

        def apply(self, decisions: ClusterDecisions) -> None:
            starts = [p for p in decisions.start if p.job.id != "g-2" or self.returned]
            if len(starts) < len(decisions.start):
                self.returned = True
                self._events.append(JobEvent("g-2", "returned", self.name, "n1", self.clock(),
                                             "not bound to node n1: Insufficient cpu there now"))
            super().apply(replace(decisions, start=starts))

    runner, _, clock = setup(tmp_path)
    backend = ReturnsOnce("a", [Node("n1", "a", {"cpu": 4000})], clock=clock, duration_of=lambda job: 10.0)
    runner.backends = {"a": backend}
    gang = Gang("g", 4)
    runner.submit([replace(job, gang=gang) for job in jobs("g", 4)])
    runner.cycle()
    runner.pump_events()
    assert runner.counts() == {"queued": 4} and backend.running_jobs() == []
    assert [(r.reason, r.retries) for r in runner.jobs.values()] == \
        [("gang g: g-2 went back to the queue (not bound to node n1: Insufficient cpu there now)", 0),
         ("not bound to node n1: Insufficient cpu there now", 0)] + \
        [("gang g: g-2 went back to the queue (not bound to node n1: Insufficient cpu there now)", 0)] * 2
    assert [h[1] for h in runner.jobs["g-1"].history] == ["submitted", "leased", "queued"]

    result = runner.cycle()
    assert sorted(p.job.id for p in result.decisions.scheduled) == ["g-1", "g-2", "g-3", "g-4"]
    clock.t += 10
    runner.cycle()
    runner.pump_events()
    assert runner.counts() == {"succeeded": 4}
