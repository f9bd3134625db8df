"""The event log the scheduling loop reads its changes from, on SQLite and PostgreSQL.

The loop's copies of the queued and active jobs read "events with id greater
than the last seen". Two things would hide a change from them until a
restart: an id handed out again after its row was deleted (SQLite reuses the
largest rowid of a table without AUTOINCREMENT), and an id that becomes
visible after a larger one did (concurrent writers on PostgreSQL). These
tests pin both down, and a stateful property test checks that the loop's
change reader sees exactly the jobs each operation changed.
"""

from __future__ import annotations

import itertools
import sqlite3
import threading

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings as hsettings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, \
    run_state_machine_as_test

from flotilla.scheduler import Scheduler
from flotilla.service import schema
from flotilla.service.jobspec import prepare
from flotilla.service.loop import QueuedJobs, ServiceLoop, service_backends
from flotilla.service.settings import QueueSpec, from_config
from flotilla.service.store import Store
from flotilla.service.store.engine import insert_events
from tests.support.service import POSTGRES_URL, STORE_PARAMS, config as service_config, job, job_file, make_store, \
    reset_postgres


class Clock:
    def __init__(self, now: float = 1_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def new_jobs(settings, queue: str, job_set: str, client_ids, cpu: str = "1"):
    return prepare(job_file(queue, job_set, [job(cid, cpu=cpu) for cid in client_ids]), settings)[1]


# -- finding 1: a forced queue delete stalled scheduling ------------------------------------------

@pytest.mark.parametrize("kind", STORE_PARAMS)
def test_after_force_deleting_the_queue_with_the_newest_events_the_loop_schedules_other_queues(kind, tmp_path):
    cfg = service_config()
    settings = from_config(cfg)
    store = make_store(kind, tmp_path)
    store.sync_queues(settings.queues)
    store.create_queue(QueueSpec("X", owners=("alice",)))
    clock = Clock()
    loop = ServiceLoop(store, settings, Scheduler(cfg), service_backends(cfg, clock=clock), clock=clock, seed=0)

    (first,) = store.submit("A", "s", "alice", new_jobs(settings, "A", "s", ["a0"]), now=clock.now)
    loop.run_cycle()
    clock.now += 1
    loop.run_cycle()
    assert store.get_job(first.id)["state"] == "running"
    # X's jobs ask for more cpu than any node has: they stay queued, and theirs are the newest events.
    clock.now += 1
    stuck = [s.id for s in store.submit("X", "s", "alice", new_jobs(settings, "X", "s", ["x0", "x1", "x2"],
                                                                    cpu="64"), now=clock.now)]
    loop.queued.sync()   # what a cycle does first
    assert sorted(loop.queued.jobs) == sorted(stuck)
    assert [e["jobId"] for e in store.all_events()][-1] == stuck[-1]
    seen = store.last_event_id()

    clock.now += 1
    assert store.delete_queue("X", force=True, by="root", now=clock.now) == {
        "deleted": "X", "jobs": 3, "cancelled": sorted(stuck), "cancelling": []}
    (later,) = store.submit("A", "s", "alice", new_jobs(settings, "A", "s", ["a1"]), now=clock.now)

    loop.run_cycle()
    assert store.get_job(later.id)["state"] == "pending"
    loop.queued.sync()
    assert loop.queued.jobs == {}
    fresh = store.all_events(after=seen)
    assert [(e["kind"], e["jobId"]) for e in fresh] == \
        [("deleted", job_id) for job_id in stuck] + [(kind, later.id) for kind in ("submitted", "queued", "leased",
                                                                                 "pending")]
    store.close()


# -- SQLite: AUTOINCREMENT, and the migration of databases made without it -------------------------

#: The events table as schema v1 to v5 made it on SQLite (a rowid alias: deleted ids come back).
V5_EVENTS = """
CREATE TABLE events (
    id INTEGER NOT NULL,
    queue VARCHAR(255) NOT NULL,
    job_set VARCHAR(255) NOT NULL,
    job_id VARCHAR(32) NOT NULL,
    kind VARCHAR(32) NOT NULL,
    time FLOAT NOT NULL,
    cluster VARCHAR(255),
    node TEXT,
    reason TEXT DEFAULT '' NOT NULL,
    pod INTEGER,
    PRIMARY KEY (id)
)"""


def v5_database(path) -> None:
    """A database at schema v5 with the events table of v5 and events 1..6, the newest two since deleted."""
    engine = sa.create_engine(f"sqlite:///{path}")
    schema.migrate(engine, lambda conn: None, schema.MIGRATIONS[:5])
    engine.dispose()
    db = sqlite3.connect(path)
    db.executescript("DROP TABLE events;" + V5_EVENTS + ";"
                     "CREATE INDEX ix_events_job_set ON events (queue, job_set, id);"
                     "CREATE INDEX ix_events_job ON events (job_id);")
    db.executemany("INSERT INTO events (id, queue, job_set, job_id, kind, time, cluster, node, reason, pod) "
                   "VALUES (?, 'A', 's', ?, ?, ?, NULL, NULL, '', ?)",
                   [(1, "j1", "submitted", 1.0, None), (2, "j1", "queued", 1.0, None),
                    (3, "j2", "submitted", 2.0, None), (4, "j2", "pod-running", 3.0, 1),
                    (5, "j3", "submitted", 4.0, None), (6, "j3", "queued", 4.0, None)])
    db.execute("DELETE FROM events WHERE id > 4")
    db.commit()
    db.close()


def event_rows(store: Store) -> list[tuple]:
    with store.read() as conn:
        return [tuple(row) for row in conn.execute(sa.select(schema.events).order_by(schema.events.c.id))]


def test_sqlite_event_ids_are_never_reused_after_the_newest_are_deleted(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/fresh.db")
    with store.write() as conn:
        insert_events(conn, [{"queue": "A", "job_set": "s", "job_id": f"j{n}", "kind": "queued",
                                     "time": 1.0, "cluster": None, "node": None, "reason": ""} for n in range(3)])
    with store.write() as conn:
        conn.execute(schema.events.delete().where(schema.events.c.id > 1))
    with store.write() as conn:
        insert_events(conn, [{"queue": "A", "job_set": "s", "job_id": "j9", "kind": "queued",
                                     "time": 2.0, "cluster": None, "node": None, "reason": ""}])
    assert [row[0] for row in event_rows(store)] == [1, 4]
    store.close()


def test_the_v6_migration_keeps_every_event_and_continues_past_the_largest_id(tmp_path):
    path = tmp_path / "old.db"
    v5_database(path)
    store = Store(f"sqlite:///{path}", migrate=False)
    kept = event_rows(store)
    assert [row[0] for row in kept] == [1, 2, 3, 4]
    assert store.migrate(schema.MIGRATIONS[:6]) == [6]
    assert store.schema_version() == 6
    assert event_rows(store) == kept
    with store.read() as conn:
        assert conn.execute(sa.text("SELECT seq FROM sqlite_sequence WHERE name = 'events'")).scalar_one() == 4
        indexes = {row[0] for row in conn.execute(sa.text(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'events'"))}
        assert indexes == {"ix_events_job_set", "ix_events_job"}
        assert conn.execute(sa.text("SELECT name FROM sqlite_master WHERE name LIKE 'events_%'")).all() == []
    for round_ in range(2):
        with store.write() as conn:
            insert_events(conn, [{"queue": "A", "job_set": "s", "job_id": "j5", "kind": "queued",
                                         "time": 5.0, "cluster": None, "node": None, "reason": ""}])
        with store.write() as conn:   # the newest deleted again: its id is still not handed out twice
            conn.execute(schema.events.delete().where(schema.events.c.id == 5 + round_))
    assert [row[0] for row in event_rows(store)] == [1, 2, 3, 4]
    assert store.last_event_id() == 4
    with store.write() as conn:
        insert_events(conn, [{"queue": "A", "job_set": "s", "job_id": "j6", "kind": "queued",
                                     "time": 6.0, "cluster": None, "node": None, "reason": ""}])
    assert [row[0] for row in event_rows(store)] == [1, 2, 3, 4, 7]
    assert store.migrate(schema.MIGRATIONS[:6]) == []
    store.close()


def test_the_v6_migration_of_an_empty_log_starts_at_one(tmp_path):
    path = tmp_path / "empty.db"
    v5_database(path)
    db = sqlite3.connect(path)
    db.execute("DELETE FROM events")
    db.commit()
    db.close()
    store = Store(f"sqlite:///{path}")
    assert store.schema_version() == schema.LATEST and event_rows(store) == []
    with store.write() as conn:
        insert_events(conn, [{"queue": "A", "job_set": "s", "job_id": "j1", "kind": "queued",
                                     "time": 1.0, "cluster": None, "node": None, "reason": ""}])
    assert [row[0] for row in event_rows(store)] == [1]
    store.close()


def test_events_are_written_only_inside_the_serialised_write_transaction(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/w.db")
    with store.read() as conn, pytest.raises(RuntimeError) as exc:
        insert_events(conn, [{"queue": "A", "job_set": "s", "job_id": "j1", "kind": "queued",
                                     "time": 1.0, "cluster": None, "node": None, "reason": ""}])
    assert str(exc.value) == "events are written only inside Store.write(), which serialises writers"
    assert store.last_event_id() == 0
    store.close()


# -- PostgreSQL: an id never becomes visible before a smaller one ------------------------------------

postgres_only = [pytest.mark.postgres,
                 pytest.mark.skipif(not POSTGRES_URL, reason="FLOTILLA_TEST_POSTGRES_URL is not set")]


def waiting_advisory_locks(store: Store) -> int:
    with store.read() as conn:
        return conn.execute(sa.text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
                            ).scalar_one()


@pytest.mark.parametrize("kind", [pytest.param("postgres", marks=postgres_only)])
def test_postgres_a_writer_behind_an_open_transaction_waits_so_the_reader_skips_nothing(kind, tmp_path):
    settings = from_config(service_config())
    store = make_store(kind, tmp_path)
    store.sync_queues(settings.queues)
    reader = QueuedJobs(store)
    reader.sync()
    holding, release = threading.Event(), threading.Event()
    later: list = []

    def slow_writer():   # an open transaction that has inserted its events and not committed yet
        with store.write() as conn:
            insert_events(conn, [{"queue": "A", "job_set": "s", "job_id": "slow", "kind": "cancelling",
                                         "time": 1.0, "cluster": None, "node": None, "reason": ""}])
            holding.set()
            release.wait()

    def fast_writer():
        later.extend(store.submit("B", "s", "bob", new_jobs(settings, "B", "s", ["b0"])))

    slow = threading.Thread(target=slow_writer)
    slow.start()
    holding.wait()
    fast = threading.Thread(target=fast_writer)
    fast.start()
    # The second writer either waits for the first (the store serialises writers) or, were it not to,
    # commits first with the larger id; the reader reads in between in both cases.
    while fast.is_alive() and waiting_advisory_locks(store) == 0:
        fast.join(0.01)
    reader.sync()
    assert reader.jobs == {}
    release.set()
    slow.join()
    fast.join()
    assert store.queued_changes(reader.cursor)[1] == ["slow", later[0].id]
    reader.sync()
    assert sorted(reader.jobs) == [later[0].id]
    store.close()


@pytest.mark.parametrize("kind", STORE_PARAMS)
def test_concurrent_writers_and_a_polling_reader_agree_on_every_change(kind, tmp_path):
    settings = from_config(service_config())
    store = make_store(kind, tmp_path)
    store.sync_queues(settings.queues)
    reader = QueuedJobs(store)
    reader.sync()
    submitted: dict[str, list[str]] = {"A": [], "B": []}
    seen: set[str] = set()

    def writer(queue: str, owner: str):
        for n in range(12):
            ids = [s.id for s in store.submit(queue, f"s{n}", owner,
                                              new_jobs(settings, queue, f"s{n}", [f"{queue}{n}a", f"{queue}{n}b"]))]
            submitted[queue].extend(ids)
            if n % 3 == 2:
                store.cancel(queue, f"s{n}", by=owner)

    threads = [threading.Thread(target=writer, args=("A", "alice")), threading.Thread(target=writer, args=("B", "bob"))]
    for t in threads:
        t.start()
    cursor = reader.cursor
    while any(t.is_alive() for t in threads):
        cursor, ids, _ = store.queued_changes(cursor)
        seen.update(ids)
        reader.sync()
    for t in threads:
        t.join()
    cursor, ids, _ = store.queued_changes(cursor)
    seen.update(ids)
    reader.sync()
    assert seen == set(submitted["A"]) | set(submitted["B"])
    assert {i: record for i, (record, _) in reader.jobs.items()} == {q.id: q for q in store.load_queued()}
    assert len(reader.jobs) == 2 * 2 * 8
    store.close()


# -- the stateful property: every change reaches the loop, exactly once per read ----------------------

QUEUE_NAMES = ("P", "Q", "R")
SETTINGS = from_config(service_config())
_CLIENT_IDS = itertools.count()


class EventLogMachine(RuleBasedStateMachine):
    """Random submits, cancels, forced queue deletes and re-creates, and store restarts.

    After every step the loop's change reader (:meth:`Store.queued_changes`
    from its cursor) names exactly the jobs that step changed, every new
    event id is above every id seen before, and the loop's queued copy
    (:class:`QueuedJobs`) equals the queued jobs in the store.
    """

    def __init__(self, kind: str, directory, number: int):
        super().__init__()
        self.kind = kind
        self.url = f"sqlite:///{directory}/events-{number}.db" if kind == "sqlite" else POSTGRES_URL
        self.settings = SETTINGS
        # PostgreSQL: the test made the schema; a restart there migrates nothing either (it is current).
        self.migrate = kind == "sqlite"
        self.store = Store(self.url, migrate=self.migrate)
        if kind == "postgres":   # the schema is made once per test; each example starts from empty tables
            with self.store.write() as conn:
                conn.execute(sa.text("TRUNCATE queues, job_sets, jobs, leases, events, cordons"))
        self.queues: dict[str, dict[str, str]] = {}   # queue -> job id -> "queued" | "cancelled"
        self.reader = QueuedJobs(self.store)
        self.reader.sync()
        self.cursor = self.reader.cursor
        self.high = self.store.last_event_id()
        self.changed: set[str] = set()

    def teardown(self):
        self.store.close()

    def expect(self, changed) -> None:
        self.changed = set(changed)

    @invariant()
    def the_reader_sees_exactly_what_changed(self):
        cursor, ids, queued = self.store.queued_changes(self.cursor)
        assert len(ids) == len(set(ids))
        assert set(ids) == self.changed
        fresh = self.store.all_events(after=self.cursor)
        assert all(e["id"] > self.high for e in fresh)
        if fresh:
            self.high = fresh[-1]["id"]
        self.cursor = cursor
        self.changed = set()
        self.reader.sync()
        assert self.reader.cursor == cursor
        want = {job_id for jobs in self.queues.values() for job_id, state in jobs.items() if state == "queued"}
        assert set(self.reader.jobs) == want
        assert {i: record for i, (record, _) in self.reader.jobs.items()} == \
            {q.id: q for q in self.store.load_queued()}

    @rule(name=st.sampled_from(QUEUE_NAMES))
    def create_queue(self, name):
        if name in self.queues:
            return self.expect(())
        self.store.create_queue(QueueSpec(name, owners=("alice",)))
        self.queues[name] = {}
        self.expect(())

    @precondition(lambda self: self.queues)
    @rule(data=st.data(), count=st.integers(1, 3), job_set=st.sampled_from(("s1", "s2")))
    def submit(self, data, count, job_set):
        queue = data.draw(st.sampled_from(sorted(self.queues)))
        client_ids = [f"c{next(_CLIENT_IDS)}" for _ in range(count)]
        out = self.store.submit(queue, job_set, "alice", new_jobs(self.settings, queue, job_set, client_ids))
        for s in out:
            self.queues[queue][s.id] = "queued"
        self.expect(s.id for s in out)

    @precondition(lambda self: any(self.queues.values()))
    @rule(data=st.data(), whole_set=st.booleans())
    def cancel(self, data, whole_set):
        queue = data.draw(st.sampled_from(sorted(q for q, jobs in self.queues.items() if jobs)))
        jobs = self.queues[queue]
        if whole_set:
            job_set = data.draw(st.sampled_from(("s1", "s2")))
            result = self.store.cancel(queue, job_set, by="alice")
            listed = {j["id"] for j in self.store.list_jobs(queue, job_set)}
            want = {i for i in listed if jobs[i] == "queued"}
        else:
            picked = data.draw(st.lists(st.sampled_from(sorted(jobs)), min_size=1, max_size=3, unique=True))
            result = self.store.cancel(queue, job_ids=picked, by="alice")
            want = {i for i in picked if jobs[i] == "queued"}
        assert sorted(result["cancelled"]) == sorted(want) and result["cancelling"] == []
        for job_id in want:
            jobs[job_id] = "cancelled"
        self.expect(want)

    @precondition(lambda self: self.queues)
    @rule(data=st.data())
    def delete_queue_forced(self, data):
        queue = data.draw(st.sampled_from(sorted(self.queues)))
        jobs = self.queues.pop(queue)
        result = self.store.delete_queue(queue, force=True, by="root")
        assert result == {"deleted": queue, "jobs": len(jobs),
                          "cancelled": sorted(i for i, s in jobs.items() if s == "queued"), "cancelling": []}
        self.expect(jobs)

    @rule()
    def restart(self):
        self.store.close()
        self.store = Store(self.url, migrate=self.migrate)
        self.reader.store = self.store
        self.expect(())


@pytest.mark.parametrize("kind", STORE_PARAMS)
def test_the_loop_sees_every_change_through_random_submits_cancels_deletes_and_restarts(kind, tmp_path):
    numbers = itertools.count()
    if kind == "postgres":
        reset_postgres(POSTGRES_URL)
        Store(POSTGRES_URL).close()
    run_state_machine_as_test(
        lambda: EventLogMachine(kind, tmp_path, next(numbers)),
        settings=hsettings(max_examples=25, stateful_step_count=20, deadline=None,
                           suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
