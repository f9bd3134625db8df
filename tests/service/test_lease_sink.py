"""The lease action's sink (flotilla.core.handover): record, then hand over what was recorded.

A sink that refuses a lease keeps that job from the clusters; the calls come in the order record, hand_over;
the service's sink records in the store before any cluster sees a decision, so a crash between the two leaves
leases that expire and jobs that are queued again, then run once.
"""

from __future__ import annotations

import random

import pytest

from flotilla.config import parse_config
from flotilla.core.handover import BackendSink, Handover
from flotilla.core.model import Job, Snapshot
from flotilla.scheduler import Scheduler
from flotilla.service.handover import StoreSink
from flotilla.service.jobspec import prepare
from flotilla.service.loop import ServiceLoop, service_backends
from flotilla.service.settings import from_config
from tests.support.loop import Clock
from tests.support.service import STORE_PARAMS, config as service_config, job, job_file, make_store

CONFIG = """\
actions: [evict, allocate, preempt, lease]
priorityClasses: [{name: armada-default, priority: 30000, preemptible: false}]
defaultPriorityClass: armada-default
queues: [{name: A, weight: 1}]
clusters:
  - name: c1
    kind: simulated
    nodes: [{count: 1, namePrefix: node, resources: {cpu: 4, memory: 8Gi}}]
"""


class Refusing(BackendSink):
    """Applies to the backends like the default sink, refuses ``refused``'s lease, and notes each call."""

    def __init__(self, backends, refused: str):
        super().__init__(backends)
        self.refused = refused
        self.calls: list[tuple[str, list[str]]] = []

    def record(self, handover: Handover) -> Handover:
        self.calls.append(("record", [p.job.id for p in handover.start]))
        return Handover([p for p in handover.start if p.job.id != self.refused], handover.stop)

    def hand_over(self, accepted: Handover) -> None:
        self.calls.append(("hand_over", [p.job.id for p in accepted.start]))
        super().hand_over(accepted)


def test_a_refused_lease_is_not_handed_over_and_record_comes_first():
    cfg = parse_config(CONFIG, "flotilla.yaml")
    scheduler = Scheduler(cfg)
    backends = dict(service_backends(cfg, clock=lambda: 0.0))
    jobs = [Job(f"a-{i}", "A", "s", priority_class="armada-default", requests={"cpu": 1000, "memory": 1 << 30})
            for i in (1, 2, 3)]
    snapshot = Snapshot([backends["c1"].snapshot()], jobs, scheduler.queues(), scheduler.priority_classes(),
                        "armada-default", 0.0)
    sink = Refusing(backends, "a-2")

    decisions = scheduler.run_cycle(snapshot, random.Random(0), sink=sink)

    assert sorted(p.job.id for p in decisions.scheduled) == ["a-1", "a-2", "a-3"]
    assert sink.calls == [("record", ["a-1", "a-2", "a-3"]), ("hand_over", ["a-1", "a-3"])]
    assert sorted(job.id for job in backends["c1"].running_jobs()) == ["a-1", "a-3"]


def _loop(kind, tmp_path, clock):
    cfg = service_config()
    settings = from_config(cfg)
    store = make_store(kind, tmp_path)
    store.sync_queues(settings.queues)
    backends = dict(service_backends(cfg, clock=clock))
    return settings, store, backends, lambda: ServiceLoop(store, settings, Scheduler(cfg), backends, clock=clock,
                                                          seed=0)


@pytest.mark.parametrize("kind", STORE_PARAMS)
def test_the_service_sink_refuses_a_job_cancelled_while_the_cycle_ran(kind, tmp_path):
    clock = Clock()
    settings, store, backends, make = _loop(kind, tmp_path, clock)
    _, new = prepare(job_file("A", "s", [job("x", duration="1h"), job("y", duration="1h")]), settings)
    first, second = [s.id for s in store.submit("A", "s", "alice", new, now=clock.now)]
    loop = make()
    real = store.record_cycle

    def cancelled_meanwhile(leased, preempted, now):
        assert sorted(leased) == sorted([first, second])   # both placed by the scheduler
        store.cancel("A", job_ids=[second], by="alice", now=now)
        return real(leased, preempted, now)

    store.record_cycle = cancelled_meanwhile
    report = loop.run_cycle()

    assert report.leased == 1
    assert store.get_job(first)["state"] == "pending"
    assert store.get_job(second)["state"] == "cancelled"
    assert [job.id.split("#")[0] for b in backends.values() for job in b.running_jobs()] == [first]
    store.close()


@pytest.mark.parametrize("kind", STORE_PARAMS)
def test_a_crash_between_record_and_hand_over_leaves_leases_that_expire(kind, tmp_path, monkeypatch):
    clock = Clock()
    settings, store, backends, make = _loop(kind, tmp_path, clock)
    _, new = prepare(job_file("A", "s", [job("x", duration="1h")]), settings)
    (job_id,) = [s.id for s in store.submit("A", "s", "alice", new, now=clock.now)]

    def crash(self, accepted):
        raise SystemExit("the process ends between the two steps")

    with monkeypatch.context() as patch:
        patch.setattr(StoreSink, "hand_over", crash)
        with pytest.raises(SystemExit):
            make().run_cycle()
    assert store.get_job(job_id)["state"] == "leased"
    assert [job for b in backends.values() for job in b.running_jobs()] == []

    loop = make()           # the process started again, on the same store and clusters
    clock.now += 1.0        # within lease.timeout (2s): still leased, nothing runs it
    loop.run_cycle()
    assert store.get_job(job_id)["state"] == "leased"
    clock.now += 1.5        # past it: the lease expires and the job is queued again, then leased anew
    loop.run_cycle()
    clock.now += 1.0
    loop.run_cycle()
    record = store.get_job(job_id)
    assert record["state"] == "running"
    events = [(e["kind"], e["time"] - 1_000_000.0, e["reason"]) for e in store.events("A", "s")]
    assert events == [("submitted", 0.0, "by alice"), ("queued", 0.0, ""), ("leased", 0.0, ""),
                      ("lease-expired", 2.5, "lease on cluster c2 not renewed for 2s (timeout 2s)"),
                      ("queued", 2.5, "retry 1 of 3"), ("leased", 2.5, ""), ("pending", 2.5, ""),
                      ("running", 2.5, "")]
    running = [job.id for b in backends.values() for job in b.running_jobs()]
    assert running == [job_id]
    store.close()


def test_serve_needs_the_lease_action():
    from flotilla.service.loop import lease_missing

    text = CONFIG.replace("actions: [evict, allocate, preempt, lease]", "actions: [evict, allocate, preempt]")
    cfg = parse_config(text, "flotilla.yaml")
    assert str(lease_missing(cfg, Scheduler(cfg))) == (
        "flotilla.yaml:1: actions: serve needs the lease action (it records the decisions, then hands them to the "
        "clusters): expected e.g. [evict, allocate, preempt, lease]")
    cfg = parse_config(CONFIG, "flotilla.yaml")
    assert lease_missing(cfg, Scheduler(cfg)) is None
