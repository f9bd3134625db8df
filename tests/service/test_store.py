"""The job store on SQLite and (when FLOTILLA_TEST_POSTGRES_URL is set, as in CI) on a real PostgreSQL."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from flotilla.core.backend import JobEvent
from flotilla.service import schema
from flotilla.service.jobspec import prepare
from flotilla.service.leases import ClusterReport, ingest
from flotilla.service.settings import QueueSpec
from flotilla.service.store import (CANCELLED, FAILED, LEASED, PENDING, QUEUED, RUNNING, SUCCEEDED, Conflict,
                                   NotFound, SubmissionRejected, rebuild_states)
from tests.support.service import STORE_PARAMS, job, job_file, make_store, settings


@pytest.fixture(params=STORE_PARAMS)
def store(request, tmp_path):
    s = make_store(request.param, tmp_path)
    s.sync_queues(settings().queues, now=1.0)
    yield s
    s.close()


def submit(store, jobs, queue="A", job_set="s1", owner="alice", now=10.0):
    _, new = prepare(job_file(queue, job_set, jobs), settings())
    return store.submit(queue, job_set, owner, new, now=now)


def test_schema_is_created_at_the_latest_version_and_migrating_again_does_nothing(store):
    assert store.schema_version() == schema.LATEST
    assert store.migrate() == []


def test_a_new_migration_runs_once_even_when_two_processes_migrate_at_once(store):
    ran = []

    def v2(conn):
        ran.append(1)
        conn.execute(sa.text("CREATE TABLE flotilla_schema_test_extra (x INTEGER)"))

    migrations = [*schema.MIGRATIONS, (schema.LATEST + 1, "test", v2)]
    threads = [threading.Thread(target=store.migrate, args=(migrations,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ran == [1]
    assert store.schema_version() == schema.LATEST + 1
    with store.write() as conn:
        conn.execute(sa.text("DROP TABLE flotilla_schema_test_extra"))


def test_submit_stores_jobs_and_events_and_a_seen_client_id_returns_the_existing_job(store):
    first = submit(store, [job("a"), job("b"), job("a")])
    assert [s.existing for s in first] == [False, False, True]
    assert first[0].id == first[2].id
    again = submit(store, [job("b"), job("c")], now=11.0)
    assert again[0].id == first[1].id and again[0].existing
    assert not again[1].existing
    assert store.count_jobs() == 3
    kinds = [(e["jobId"], e["kind"]) for e in store.events("A", "s1")]
    assert kinds == [(first[0].id, "submitted"), (first[0].id, "queued"), (first[1].id, "submitted"),
                     (first[1].id, "queued"), (again[1].id, "submitted"), (again[1].id, "queued")]
    # The same clientId in another queue is another job.
    other = submit(store, [job("a")], queue="B", owner="bob")
    assert other[0].id != first[0].id and not other[0].existing


def test_a_submission_is_one_transaction(store, monkeypatch):
    def boom(conn, rows):
        raise RuntimeError("crash after the jobs, before the events")

    monkeypatch.setattr("flotilla.service.store.jobs.insert_events", boom)   # the submission part's append
    with pytest.raises(RuntimeError):
        submit(store, [job(f"c{i}") for i in range(50)])
    monkeypatch.undo()
    assert store.count_jobs() == 0
    assert store.events("A", "s1") == []


def test_concurrent_submissions_with_overlapping_client_ids_create_each_job_once(store):
    results, errors = [], []

    def worker(offset):
        try:
            for round_ in range(5):
                results.extend(submit(store, [job(f"c{(offset + round_ + i) % 12}") for i in range(6)]))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    ids = {}
    for s in results:
        ids.setdefault(s.client_id, set()).add(s.id)
    assert all(len(v) == 1 for v in ids.values())
    assert store.count_jobs() == len(ids) == 12


def test_gang_ids_are_not_reused_and_a_resubmitted_gang_returns_its_jobs(store):
    gang = [job(f"g{i}", gang=("g", 2)) for i in range(2)]
    first = submit(store, gang)
    again = submit(store, gang)
    assert [s.id for s in again] == [s.id for s in first] and all(s.existing for s in again)
    with pytest.raises(SubmissionRejected) as err:
        submit(store, [job(f"h{i}", gang=("g", 2)) for i in range(2)])
    assert "job 0 (clientId 'h0')" in str(err.value) and "gang id 'g' is already used" in str(err.value)
    with pytest.raises(SubmissionRejected) as err:
        submit(store, [job("g0", gang=("g", 2)), job("new", gang=("g", 2))])
    assert "job 1 (clientId 'new')" in str(err.value) and "partly submitted" in str(err.value)
    assert store.count_jobs() == 2


def test_cancel_queued_now_and_running_through_the_loop(store):
    ids = [s.id for s in submit(store, [job("a"), job("b"), job("c")])]
    leased, _ = store.record_cycle({ids[0]: ("c1", ["n1"])}, {}, now=20.0)
    assert leased == {ids[0]}
    out = store.cancel("A", job_set="s1", by="alice", now=21.0)
    assert sorted(out["cancelled"]) == sorted(ids[1:]) and out["cancelling"] == [ids[0]]
    assert store.get_job(ids[1])["state"] == CANCELLED
    running = store.get_job(ids[0])
    assert running["state"] == LEASED and running["cancelRequested"]
    # The cluster does not run it: the next ingest finishes the cancellation.
    result = ingest(store, {"c1": ClusterReport([], set())}, now=22.0, lease_timeout=60, max_retries=3)
    assert ids[0] not in result.active
    assert store.get_job(ids[0])["state"] == CANCELLED
    assert [e["kind"] for e in store.events("A", "s1") if e["jobId"] == ids[0]] == \
        ["submitted", "queued", "leased", "cancelling", "cancelled"]


def test_reprioritize_and_queue_lifecycle(store):
    ids = [s.id for s in submit(store, [job("a"), job("b")])]
    assert sorted(store.reprioritize("A", 5, job_set="s1", by="alice", now=12.0)) == sorted(ids)
    assert store.get_job(ids[0])["priority"] == 5
    assert store.events("A", "s1")[-1]["kind"] == "reprioritized"
    with pytest.raises(Conflict):
        store.create_queue(QueueSpec("A"))
    store.create_queue(QueueSpec("C", 2.0, {"cpu": 0.5}, ("x",), ("g",)))
    assert store.get_queue("C") == QueueSpec("C", 2.0, {"cpu": 0.5}, ("x",), ("g",))
    store.update_queue(QueueSpec("C", 3.0))
    assert store.get_queue("C").weight == 3.0
    with pytest.raises(NotFound):
        store.update_queue(QueueSpec("nope"))
    with pytest.raises(Conflict):
        store.delete_queue("A")          # two queued jobs
    store.cancel("A", job_set="s1")
    store.delete_queue("A")
    store.delete_queue("C")
    assert [q.name for q in store.list_queues()] == ["B"]


def test_leases_renew_expire_and_fail_after_max_retries(store):
    (only,) = [s.id for s in submit(store, [job("a")])]
    now = 100.0
    for attempt in range(4):
        store.record_cycle({only: ("c1", ["n1"])}, {}, now=now)
        store.mark_pending([only], now)
        result = ingest(store, {"c1": ClusterReport([JobEvent(only, "running", "c1", "n1", now + 1)], {only})},
                              now=now + 1, lease_timeout=10, max_retries=3)
        assert result.active[only].state == RUNNING
        # Renewed while the cluster reports it...
        ingest(store, {"c1": ClusterReport([], {only})}, now=now + 9, lease_timeout=10, max_retries=3)
        assert only in store.load_active()
        # ...and expired once the cluster stops answering.
        ingest(store, {}, now=now + 25, lease_timeout=10, max_retries=3)
        state = store.get_job(only)["state"]
        assert state == (QUEUED if attempt < 3 else FAILED)
        now += 100
    job_record = store.get_job(only)
    assert job_record["retries"] == 4 and "gave up after 3 retries" in job_record["reason"]
    kinds = [e["kind"] for e in store.events("A", "s1")]
    assert kinds.count("lease-expired") == 4 and kinds[-1] == "failed"
    assert rebuild_states(store.all_events()) == store.job_states()


def test_events_resume_after_an_id_and_succeeded_jobs_leave_the_lease_table(store):
    ids = [s.id for s in submit(store, [job("a"), job("b")])]
    store.record_cycle({ids[0]: ("c1", ["n1"]), ids[1]: ("c2", ["m1"])}, {}, now=20.0)
    store.mark_pending(ids, 20.0)
    seen = store.events("A", "s1")
    cut = seen[-1]["id"]
    ingest(store, {"c1": ClusterReport([JobEvent(ids[0], "running", "c1", "n1", 21.0),
                                       JobEvent(ids[0], "succeeded", "c1", "n1", 22.0)], set()),
                  "c2": ClusterReport([JobEvent(ids[1], "running", "c2", "m1", 21.5)], {ids[1]})},
                 now=23.0, lease_timeout=60, max_retries=3)
    later = store.events("A", "s1", after=cut)
    assert [(e["jobId"], e["kind"]) for e in later] == [(ids[0], "running"), (ids[0], "succeeded"),
                                                        (ids[1], "running")]
    assert store.get_job(ids[0])["state"] == SUCCEEDED and store.get_job(ids[1])["state"] == RUNNING
    assert set(store.load_active()) == {ids[1]}
    assert {j.id for j in store.load_queued()} == set()
    assert store.get_job(ids[1])["node"] == "m1"
    assert PENDING not in store.job_states().values()


def test_bulk_load_of_queued_jobs_shares_request_mappings(store):
    submit(store, [job(f"c{i}") for i in range(300)])
    queued = store.load_queued()
    assert len(queued) == 300
    assert len({id(q.pods[0]["requests"]) for q in queued}) == 1


def test_the_loops_copy_of_the_queue_follows_every_change_through_the_event_log(store):
    """QueuedJobs after each change equals a fresh read of the queue, and only changed jobs are read again."""
    from flotilla.service.loop import QueuedJobs

    copy = QueuedJobs(store)

    def fresh():
        return {q.id: q for q in store.load_queued()}

    def check(reread: int, expected_ids: list[str]):
        assert copy.sync() == (reread, len(expected_ids))
        assert list(copy.jobs) == expected_ids
        assert {job_id: record for job_id, (record, _) in copy.jobs.items()} == fresh()
        for record, pods in copy.jobs.values():
            assert [(p.id, p.queue, p.priority, p.requests) for p in pods] == \
                [(record.id, record.queue, record.priority, record.pods[0]["requests"])]

    first = [s.id for s in submit(store, [job(f"a{i}") for i in range(4)])]
    check(4, first)                                     # the first sync reads the whole queue
    check(0, first)                                     # nothing happened: nothing read
    more = [s.id for s in submit(store, [job(f"b{i}") for i in range(2)], queue="B", owner="bob", now=11.0)]
    check(2, first + more)                              # new jobs at the end
    store.reprioritize("A", 5, job_ids=[first[2]], now=12.0)
    check(1, first + more)                              # changed in place
    assert copy.jobs[first[2]][1][0].priority == 5
    store.cancel("A", job_ids=[first[0]], now=13.0)
    check(1, first[1:] + more)
    store.record_cycle({first[1]: ("c1", ["n1"])}, {}, now=14.0)
    check(1, first[2:] + more)                          # leased: out of the queue
    # The lease expires (its cluster never reports it): back in the queue, at the end.
    ingest(store, {"c1": ClusterReport([], set())}, now=100.0, lease_timeout=10, max_retries=3)
    check(1, first[2:] + more + [first[1]])
    # A second copy starting now reads the same queue (order apart).
    other = QueuedJobs(store)
    other.sync()
    assert set(other.jobs) == set(copy.jobs)


@pytest.mark.parametrize("reload_min", [1000, 0], ids=["by-id", "full-reads"])
def test_the_loops_copy_of_active_jobs_equals_a_fresh_read_after_every_cycle(store, monkeypatch, reload_min):
    """ActiveCopy through ingest: leases, running, pending, cancel, reprioritize, expiry, with renewals kept."""
    from flotilla.service.store import ActiveCopy

    ids = [s.id for s in submit(store, [job(f"c{i}") for i in range(4)])]
    store.record_cycle({ids[0]: ("c1", ["n1"]), ids[1]: ("c1", ["n2"]), ids[2]: ("c1", ["n1"])}, {}, now=20.0)
    copy = ActiveCopy()
    copy.RELOAD_MIN = reload_min

    def cycle(now, running=(), events=()):
        result = ingest(store, {"c1": ClusterReport(list(events), set(running))}, now=now, lease_timeout=10,
                              max_retries=0, copy=copy)
        assert result.active is copy.jobs
        assert copy.jobs == store.load_active()
        return copy.jobs

    active = cycle(21.0, {ids[0], ids[1], ids[2]}, [JobEvent(ids[0], "running", "c1", "n1", 21.0)])
    assert {i: (j.state, j.renewed_at) for i, j in active.items()} == {
        ids[0]: (RUNNING, 21.0), ids[1]: (LEASED, 21.0), ids[2]: (LEASED, 21.0)}
    store.mark_pending([ids[1]], now=22.0)
    store.reprioritize("A", 7, job_ids=[ids[0]], now=22.5)
    active = cycle(23.0, {ids[0], ids[1], ids[2]})
    assert (active[ids[1]].state, active[ids[0]].priority, active[ids[2]].renewed_at) == (PENDING, 7, 23.0)
    store.cancel("A", job_ids=[ids[2]], now=24.0)
    active = cycle(25.0, {ids[0], ids[1]})               # c1 no longer runs it: cancelled at once
    assert set(active) == {ids[0], ids[1]} and store.get_job(ids[2])["state"] == CANCELLED
    assert cycle(30.0, {ids[0]})[ids[1]].renewed_at == 25.0  # ids[1] missing: its lease is not renewed
    active = cycle(36.0, {ids[0]})                        # 11 s after its last renewal: expired, failed
    assert set(active) == {ids[0]} and store.get_job(ids[1])["state"] == FAILED
    assert active[ids[0]].renewed_at == 36.0
    # A transaction that fails after the rules changed the copy: the copy is dropped and read again whole.
    def fail(*args, **kwargs):
        raise RuntimeError("disk full")

    with monkeypatch.context() as patch:
        patch.setattr(store._leases, "_write_changes", fail)
        with pytest.raises(RuntimeError):
            ingest(store, {"c1": ClusterReport([], {ids[0]})}, now=37.0, lease_timeout=10, max_retries=0, copy=copy)
    assert (copy.cursor, copy.jobs) == (None, {})
    assert store.load_active()[ids[0]].renewed_at == 36.0   # nothing of it reached the store
    assert cycle(38.0, {ids[0]})[ids[0]].renewed_at == 38.0
