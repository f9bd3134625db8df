"""The loop's kept state against the store: the snapshot it builds equals one built from scratch, unchanged jobs
reach the core as the same objects, and an idle cycle renews every lease with one row per cluster."""

from __future__ import annotations

import dataclasses

import pytest
import sqlalchemy as sa

from flotilla.scheduler import Scheduler
from flotilla.core.model import Job
from flotilla.service.jobspec import prepare
from flotilla.service.leases import ClusterReport, ingest
from flotilla.service.loop import ServiceLoop, service_backends
from flotilla.service.schema import cluster_reports, leases
from flotilla.service.settings import QueueSpec, from_config
from flotilla.service.store import RUNNING, ActiveCopy, Beat
from tests.support.service import STORE_PARAMS, config, job, job_file, make_store

FIELDS = [f.name for f in dataclasses.fields(Job)]


class Clock:
    def __init__(self, now: float = 1_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=STORE_PARAMS)
def env(request, tmp_path):
    cfg = config()
    settings = from_config(cfg)
    clock = Clock()
    store = make_store(request.param, tmp_path)
    store.sync_queues(settings.queues, now=1.0)
    backends = service_backends(cfg, clock=clock)
    loop = ServiceLoop(store, settings, Scheduler(cfg), backends, clock=clock, seed=0)
    yield store, loop, clock, cfg
    store.close()


def submit(store, jobs, queue="A", owner="alice", now=10.0, job_set="s"):
    _, new = prepare(job_file(queue, job_set, jobs), from_config(config()))
    return [s.id for s in store.submit(queue, job_set, owner, new, now=now)]


def fields(pod: Job) -> tuple:
    return tuple(getattr(pod, name) for name in FIELDS)


def describe(snapshot) -> dict:
    """Everything a snapshot says, order apart (jobs compared field by field)."""
    return {"clusters": {c.name: ([n.name for n in c.nodes], sorted(map(fields, c.running)), dict(c.foreign))
                         for c in snapshot.clusters},
            "queued": sorted(map(fields, snapshot.queued)),
            "queues": sorted((q.name, q.weight, sorted(q.limits.items()), q.parent, q.cordoned) for q in snapshot.queues),
            "classes": snapshot.priority_classes, "default": snapshot.default_priority_class}


def from_scratch(loop, snaps, now) -> dict:
    """The snapshot a loop with nothing kept builds from the store as it is now."""
    other = ServiceLoop(loop.store, loop.settings, loop.scheduler, loop.backends, clock=loop.clock)
    beats: dict[str, Beat] = {}
    other.active.load(loop.store.load_active(), beats)
    return describe(other.build_snapshot(snaps, now))


def checked(loop) -> list[tuple[dict, dict]]:
    """Each snapshot the loop builds, with the one built from scratch at that moment (after ingest)."""
    if not hasattr(loop, "checks"):
        build = loop.build_snapshot
        loop.checks = []

        def both(snaps, now):
            snapshot = build(snaps, now)
            loop.checks.append((describe(snapshot), from_scratch(loop, snaps, now)))
            return snapshot

        loop.build_snapshot = both
    return loop.checks


def pods(snapshot) -> dict[str, Job]:
    return {pod.id: pod for pod in [*snapshot.queued, *(p for c in snapshot.clusters for p in c.running)]}


def cycle(loop) -> tuple[dict, dict]:
    """One cycle; checks the loop's snapshot against a fresh one; returns (pods before, pods now) by id."""
    before = pods(loop.last_snapshot) if loop.last_snapshot is not None else {}
    checks = checked(loop)
    loop.run_cycle()
    kept, fresh = checks.pop()
    assert kept == fresh
    return before, pods(loop.last_snapshot)


def same_objects(before: dict, now: dict) -> set[str]:
    return {i for i in before.keys() & now.keys() if before[i] is now[i]}


def running_ids(loop) -> dict[str, set[str]]:
    return {c.name: {p.id for p in c.running} for c in loop.last_snapshot.clusters}


def test_the_kept_snapshot_equals_a_fresh_one_and_unchanged_jobs_stay_the_same_objects(env):
    store, loop, clock, cfg = env
    # Eight 4-cpu jobs fill the four 8-cpu nodes: two preemptible ones in A, the rest not.
    a = submit(store, [job(f"a{i}", cpu="4", pc="armada-preemptible") for i in range(2)]
               + [job(f"a{i}", cpu="4", duration="30s") for i in range(2, 4)])
    b = submit(store, [job(f"b{i}", cpu="4") for i in range(4)], queue="B", owner="bob")
    big = submit(store, [job("big", cpu="9")], queue="B", owner="bob")   # fits no node: stays queued
    clock.now = 100.0
    cycle(loop)                                          # all leased
    assert sorted(p.id for p in loop.last_snapshot.queued) == sorted(big + a + b)
    clock.now += 1
    _, now = cycle(loop)                                 # running
    assert set().union(*running_ids(loop).values()) == set(a + b)
    assert [p.id for p in loop.last_snapshot.queued] == big
    clock.now += 1
    lists = [c.running for c in loop.last_snapshot.clusters]
    queued_list = loop.last_snapshot.queued
    before, now = cycle(loop)                            # idle: the same objects, the same lists
    assert same_objects(before, now) == set(a + b + big)
    assert all(x is y for x, y in zip(lists, (c.running for c in loop.last_snapshot.clusters)))
    assert loop.last_snapshot.queued is queued_list

    # A submission: only the new job is new; the rest are the objects of the last cycle.
    clock.now += 1
    (late,) = submit(store, [job("late", cpu="9")], now=clock.now)
    before, now = cycle(loop)
    assert set(now) - set(before) == {late} and same_objects(before, now) == set(a + b + big)

    # A cancellation of a running job: it is stopped, then gone; nothing else changes.
    store.cancel("B", job_ids=[b[0]], now=clock.now)
    clock.now += 1
    before, now = cycle(loop)
    clock.now += 1
    before, now = cycle(loop)
    assert b[0] not in now and same_objects(before, now) == set(now)
    assert store.get_job(b[0])["state"] == "cancelled"

    # A reprioritized queued job is a new object; so is nothing else.
    store.reprioritize("B", 9, job_ids=big, now=clock.now)
    clock.now += 1
    before, now = cycle(loop)
    assert now[big[0]].priority == 9 and same_objects(before, now) == set(now) - set(big)

    # Completions: a[2] and a[3] run for 30 s.
    clock.now += 40
    cycle(loop)
    clock.now += 1
    before, now = cycle(loop)
    assert [store.get_job(i)["state"] for i in a[2:]] == ["succeeded", "succeeded"]
    assert not set(a[2:]) & set(now) and same_objects(before, now) == set(now)

    # Queue changes: a weight, a new queue with a job, a cordon. Running jobs are the same objects throughout.
    store.update_queue(QueueSpec("A", 3.0, {}, ("alice",), ()), now=clock.now)
    clock.now += 1
    before, now = cycle(loop)
    assert {q.name: q.weight for q in loop.last_snapshot.queues}["A"] == 3.0
    assert same_objects(before, now) == set(now)
    store.create_queue(QueueSpec("C", 1.0, {}, ("alice",), ()), now=clock.now)
    (c0,) = submit(store, [job("c0", cpu="9")], queue="C", now=clock.now)
    clock.now += 1
    before, now = cycle(loop)     # a new queue known: every job looked at again, each kept where unchanged
    assert c0 in now and same_objects(before, now) == set(now) - {c0}
    store.set_cordon("queue", "C", True, now=clock.now)
    clock.now += 1
    before, now = cycle(loop)
    assert [q.name for q in loop.last_snapshot.queues if q.cordoned] == ["C"]

    # A preemption: 20 of 32 cpus are taken; four non-preemptible jobs of B need the room of a preemptible
    # one of A.
    new = submit(store, [job(f"n{i}", cpu="4") for i in range(4)], queue="B", owner="bob", now=clock.now)
    clock.now += 1
    cycle(loop)
    for _ in range(3):
        clock.now += 1
        before, now = cycle(loop)
    assert sorted(store.get_job(i)["state"] for i in a[:2]) == ["preempted", "running"]
    assert [store.get_job(i)["state"] for i in new] == ["running"] * 4
    assert same_objects(before, now) == set(now)

    # A cluster stops answering: its jobs leave the snapshot, their leases expire, they are queued again.
    on_c2 = running_ids(loop)["c2"]
    assert on_c2
    loop.set_cluster_available("c2", False)
    clock.now += 1
    cycle(loop)
    assert "c2" not in running_ids(loop)
    clock.now += 3                                       # past lease.timeout (2 s)
    cycle(loop)
    assert all(store.get_job(i)["state"] == "queued" for i in on_c2)
    loop.set_cluster_available("c2", True)
    for _ in range(3):
        clock.now += 1
        cycle(loop)
    clock.now += 1
    before, now = cycle(loop)
    assert same_objects(before, now) == set(now)

    # A restart: a new loop reads the store afresh; its snapshot equals the old loop's, and its next
    # idle cycle hands over the objects of its first.
    old = describe(loop.last_snapshot)
    fresh = ServiceLoop(store, loop.settings, Scheduler(cfg), loop.backends, clock=clock, seed=0)
    before, now = cycle(fresh)
    assert before == {}
    assert describe(fresh.last_snapshot)["clusters"] == old["clusters"]
    clock.now += 1
    before, now = cycle(fresh)
    assert same_objects(before, now) == set(now) == set(before)


def lease_writes(store) -> list[str]:
    """Statements that change the leases table, recorded while the returned list lives."""
    seen: list[str] = []

    def before(conn, cursor, statement, parameters, context, executemany):
        text = statement.lstrip().upper()
        if text.startswith(("UPDATE LEASES", "INSERT INTO LEASES", "DELETE FROM LEASES")):
            seen.append(text.split()[0])

    sa.event.listen(store.engine, "before_cursor_execute", before)
    return seen


def test_an_idle_cycle_writes_one_row_per_cluster_and_no_lease_and_renewal_survives_a_new_leader(env):
    store, loop, clock, cfg = env
    ids = submit(store, [job(f"j{i}", cpu="6") for i in range(4)])   # one per node, two per cluster
    clock.now = 100.0
    loop.run_cycle()
    clock.now += 1
    loop.run_cycle()               # running: every lease marked seen once
    clock.now += 1
    loop.run_cycle()
    writes = lease_writes(store)
    clock.now += 1
    loop.run_cycle()
    assert writes == []
    with store.read() as conn:
        assert dict(conn.execute(sa.select(cluster_reports.c.cluster, cluster_reports.c.reported_at)).all()) == {
            "c1": 103.0, "c2": 103.0}
        assert {r.seen for r in conn.execute(sa.select(leases.c.seen))} == {1}
    active = store.load_active()
    assert {i: (j.state, j.renewed_at) for i, j in active.items()} == {i: (RUNNING, 103.0) for i in ids}

    # c1 stops answering at 103. A new leader (fresh copies) takes over at 104 and expires c1's jobs exactly
    # when the old one would have: not at 105 (2 s after the last report), at 105.5.
    on_c1 = {i for i, j in active.items() if j.cluster == "c1"}
    assert len(on_c1) == 2
    loop.set_cluster_available("c1", False)
    clock.now = 104.0
    loop.forget()
    loop.run_cycle()
    clock.now = 105.0
    loop.run_cycle()
    assert {store.get_job(i)["state"] for i in on_c1} == {RUNNING}
    clock.now = 105.5
    loop.run_cycle()
    assert {store.get_job(i)["state"] for i in on_c1} == {"queued"}
    assert {store.get_job(i)["state"] for i in set(ids) - on_c1} == {RUNNING}
    assert store.load_active()[next(iter(set(ids) - on_c1))].renewed_at == 105.5


def test_a_job_its_cluster_stops_listing_keeps_its_last_renewal_in_the_store(env):
    store, loop, clock, cfg = env
    ids = submit(store, [job("x"), job("y")])
    store.record_cycle({ids[0]: ("c1", ["c1-node-0"]), ids[1]: ("c1", ["c1-node-1"])}, {}, now=20.0)
    copy = ActiveCopy()
    writes = lease_writes(store)
    ingest(store, {"c1": ClusterReport([], set(ids))}, now=21.0, lease_timeout=10, max_retries=3, copy=copy)
    assert writes == ["UPDATE"]                          # both marked seen in one grouped statement
    del writes[:]
    ingest(store, {"c1": ClusterReport([], set(ids))}, now=22.0, lease_timeout=10, max_retries=3, copy=copy)
    assert writes == []
    ingest(store, {"c1": ClusterReport([], {ids[0]})}, now=23.0, lease_timeout=10, max_retries=3, copy=copy)
    assert writes == ["UPDATE"]                          # y, no longer listed: its renewal at 22 written down
    for now in (24.0, 30.0):
        ingest(store, {"c1": ClusterReport([], {ids[0]})}, now=now, lease_timeout=10, max_retries=3, copy=copy)
    fresh = store.load_active()
    assert fresh == copy.jobs
    assert {i: (j.renewed_at, j.seen, j.lease_renewed) for i, j in fresh.items()} == {
        ids[0]: (30.0, True, 21.0), ids[1]: (22.0, False, 22.0)}
    ingest(store, {"c1": ClusterReport([], {ids[0]})}, now=32.5, lease_timeout=10, max_retries=3, copy=copy)
    assert [store.get_job(i)["state"] for i in ids] == ["leased", "queued"]   # y: 10.5 s after 22
    assert set(copy.jobs) == {ids[0]} and copy.jobs == store.load_active()


def test_a_lease_stored_before_version_5_keeps_its_renewal_time(tmp_path):
    """Upgrading: leases written without ``seen`` count from their own ``renewed_at`` until their cluster reports.

    (SQLite only: the migration's ``ALTER TABLE ... ADD COLUMN`` is the same statement on PostgreSQL.)
    """
    from flotilla.service import schema
    from flotilla.service.store import Store

    store = Store(f"sqlite:///{tmp_path}/old.db", migrate=False)
    assert store.migrate(schema.MIGRATIONS[:4]) == [1, 2, 3, 4]
    with store.engine.begin() as conn:      # a v4 database made before leases had the column
        conn.execute(sa.text("ALTER TABLE leases DROP COLUMN seen"))
    store.sync_queues(from_config(config()).queues, now=1.0)
    ids = submit(store, [job("x"), job("y")])
    store.record_cycle({ids[0]: ("c1", ["c1-node-0"]), ids[1]: ("c1", ["c1-node-1"])}, {}, now=20.0)
    with store.engine.begin() as conn:
        conn.execute(leases.update().where(leases.c.job_id == ids[1]).values(renewed_at=17.0))
    assert store.migrate(schema.MIGRATIONS[:5]) == [5]
    assert {i: (j.renewed_at, j.seen) for i, j in store.load_active().items()} == {
        ids[0]: (20.0, False), ids[1]: (17.0, False)}
    copy = ActiveCopy()
    ingest(store, {"c1": ClusterReport([], {ids[0]})}, now=25.0, lease_timeout=10, max_retries=3, copy=copy)
    ingest(store, {"c1": ClusterReport([], {ids[0]})}, now=27.5, lease_timeout=10, max_retries=3, copy=copy)
    assert [store.get_job(i)["state"] for i in ids] == ["leased", "queued"]   # y: 10.5 s after 17
    assert store.load_active()[ids[0]].renewed_at == 27.5 and copy.jobs == store.load_active()
    store.close()
