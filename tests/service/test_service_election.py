"""Roles and leader election with fencing, on a real PostgreSQL (in-process: the timing is forced, not waited on
by chance). The multi-process HA run on KWOK clusters is in test_service_ha.py."""

from __future__ import annotations

import time

import pytest
from click.testing import CliRunner

from flotilla.scheduler import Scheduler
from flotilla.scheduler_main import main
from flotilla.service.jobspec import prepare
from flotilla.service.loop import ServiceLoop, service_backends
from flotilla.service.roles import RoleError, check_role
from flotilla.service.roles.election import LeaderElector
from flotilla.service.roles.scheduler import SchedulerRunner
from flotilla.service.settings import from_config
from flotilla.service.store import Fenced, Store
from tests.support.service import POSTGRES_URL, config, job, job_file, reset_postgres

needs_postgres = [pytest.mark.postgres,
                  pytest.mark.skipif(not POSTGRES_URL, reason="FLOTILLA_TEST_POSTGRES_URL is not set "
                                                              "(scripts/postgres-test)")]


def test_api_and_scheduler_roles_refuse_sqlite():
    with pytest.raises(RoleError) as info:
        check_role("scheduler", "sqlite:///x.db")
    assert str(info.value) == ("--role scheduler needs a PostgreSQL store shared by every replica (store.url or "
                               "--store postgresql+psycopg://...); sqlite:///x.db is one process's file: use --role all "
                               "with SQLite")
    check_role("all", "sqlite:///x.db")
    check_role("api", "postgresql+psycopg://h/db")
    result = CliRunner().invoke(main, ["serve", "--role", "api", "--store", "sqlite:///x.db"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        "error: --role api needs a PostgreSQL store shared by every replica (store.url or --store "
        "postgresql+psycopg://...); sqlite:///x.db is one process's file: use --role all with SQLite")


def stores(n: int) -> tuple:
    """``n`` stores on a fresh PostgreSQL database (as many processes would open), the config's settings."""
    reset_postgres(POSTGRES_URL)
    out = [Store(POSTGRES_URL) for _ in range(n)]
    settings = from_config(config())
    out[0].sync_queues(settings.queues)
    return out, settings


def submit(store, settings, n, queue="A", job_set="s1", cpu="1"):
    body = job_file(queue, job_set, [job(f"{job_set}-{i}", cpu=cpu) for i in range(n)])
    return [s.id for s in store.submit(queue, job_set, "alice", prepare(body, settings)[1])]


@pytest.mark.parametrize("_", [pytest.param(None, marks=needs_postgres, id="postgres")])
def test_a_deposed_leader_writes_nothing(_):
    (first, second), settings = stores(2)
    ids = submit(first, settings, 2)
    a = LeaderElector(first, "a", lease_duration=0.6, renew_period=0.2)
    b = LeaderElector(second, "b", lease_duration=0.6, renew_period=0.2)
    assert (a.round(), b.round()) == (True, False)
    assert (a.fence.term, b.leader) == (1, "a")
    with first.fenced(a.fence):     # the leader writes
        assert first.record_cycle({ids[0]: ("c1", ["c1-node-1"])}, {}, time.time()) == ({ids[0]}, set())

    time.sleep(0.8)                 # a is paused past its lease; b takes over with the next term
    assert b.round() is True
    assert b.fence.term == 2
    with pytest.raises(Fenced) as info, first.fenced(a.fence):
        first.record_cycle({ids[1]: ("c1", ["c1-node-2"])}, {}, time.time())
    assert str(info.value) == "a is no longer the leader (term 1); b (term 2) is"
    assert first.get_job(ids[1])["state"] == "queued"       # nothing of the refused transaction was stored
    assert a.round() is False and a.leader == "b"           # a learns it follows
    with second.fenced(b.fence):
        assert second.record_cycle({ids[1]: ("c2", ["c2-node-1"])}, {}, time.time()) == ({ids[1]}, set())

    # A leader whose own lease ran out, even with nobody taking over, writes nothing until it renews.
    time.sleep(0.8)
    with pytest.raises(Fenced) as info, second.fenced(b.fence):
        second.mark_pending([ids[1]], time.time())
    assert str(info.value) == "b's lease (term 2) expired; it must be renewed before writing"
    assert b.round() is True and b.fence.term == 3
    # A clean shutdown hands over at once.
    b.resign()
    assert a.round() is True and a.fence.term == 4
    first.close(), second.close()


@pytest.mark.parametrize("_", [pytest.param(None, marks=needs_postgres, id="postgres")])
def test_only_the_leader_runs_cycles_and_a_new_term_rereads_the_store(_):
    cfg = config()
    both, settings = stores(2)
    ids = submit(both[0], settings, 3)
    electors = [LeaderElector(s, name, lease_duration=0.6, renew_period=0.2) for s, name in zip(both, "ab")]
    runners = [SchedulerRunner(ServiceLoop(s, settings, Scheduler(cfg), service_backends(cfg), seed=0), e)
               for s, e in zip(both, electors)]
    assert [e.round() for e in electors] == [True, False]
    assert [r.cycle() for r in runners] == [True, False]
    assert {both[0].get_job(i)["state"] for i in ids} == {"pending"}
    assert runners[1].loop.cycles == 0
    time.sleep(0.8)
    assert electors[1].round() is True
    # the old leader's next cycle is refused at its first write, and counted
    assert runners[0].cycle() is False and runners[0].fenced_writes == 1
    assert runners[1].cycle() is True
    # b's clusters (its own simulated ones) never saw the jobs: b renews nothing, a's leases stand until they expire.
    assert {both[1].get_job(i)["state"] for i in ids} == {"pending"}
    for s in both:
        s.close()


@pytest.mark.parametrize("_", [pytest.param(None, marks=needs_postgres, id="postgres")])
def test_an_api_replica_learns_of_events_another_process_wrote(_):
    from flotilla.service.roles.events import EventPoller

    (writer, replica), settings = stores(2)
    poller = EventPoller(replica, period=0.05)
    poller.start()
    time.sleep(0.2)
    before = replica.writes
    submit(writer, settings, 1)
    deadline = time.monotonic() + 5
    while replica.writes == before and time.monotonic() < deadline:
        time.sleep(0.02)
    poller.stop()
    assert replica.writes == before + 1      # one wake-up for the one commit (its two events)
    writer.close(), replica.close()


@pytest.mark.postgres
@pytest.mark.skipif(not POSTGRES_URL, reason="FLOTILLA_TEST_POSTGRES_URL is not set (scripts/test sets it)")
def test_a_follower_ends_a_session_stuck_holding_the_write_lock_once_the_lease_ran_out():
    # A leader stopped while the server still works for it (here: a statement that runs on) keeps the write lock;
    # PostgreSQL's idle-in-transaction timeout does not end an active session. Once the lease has run out, a
    # follower's round ends that session and takes the lead with the next term.
    import threading

    import sqlalchemy as sa

    reset_postgres(POSTGRES_URL)
    store = Store(POSTGRES_URL)
    leader = LeaderElector(store, "stuck", lease_duration=1.0, renew_period=0.2)
    follower = LeaderElector(store, "next", lease_duration=1.0, renew_period=0.2)
    try:
        assert leader.round() and leader.fence.term == 1
        held, failed = threading.Event(), []

        def stuck_writer():
            try:
                with store.write() as conn:
                    held.set()
                    conn.execute(sa.text("SELECT pg_sleep(60)"))
            except Exception as exc:   # ended by the follower
                failed.append(type(exc).__name__)

        thread = threading.Thread(target=stuck_writer, daemon=True)
        thread.start()
        assert held.wait(10)
        time.sleep(1.5)   # the lease (1 s) runs out; the stuck transaction is older than a lease
        started = time.monotonic()
        assert follower.round()
        assert (follower.fence.term, follower.leader) == (2, "next")
        thread.join(10)
        assert failed == ["OperationalError"] and time.monotonic() - started < 10
    finally:
        store.close()
