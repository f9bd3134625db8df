"""Queues the config makes follow the config: removed when it drops them, retiring while they have unfinished jobs.

A config queue left out of the config (a ``helm rollback``, an edited file)
is removed with its history when it has no unfinished job; with some, it
retires: new jobs are refused with the reason, the jobs it has run, and the
scheduling loop removes it once they have finished. Queues made through the
API stay whatever the config says. A store from before origins (v8)
migrates and keeps its queues.
"""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from flotilla.config import parse_config
from flotilla.scheduler import Scheduler
from flotilla.service import schema
from flotilla.service.loop import service_backends
from flotilla.service.server import build_service
from flotilla.service.settings import QueueSpec
from flotilla.service.store import NewJob, Pod, Store, SubmissionRejected
from tests.support.metrics import Clock
from tests.support.service import CONFIG, config, headers, job, job_file

WITHOUT_B = CONFIG.replace("  - {name: B, weight: 1, owners: [bob]}\n", "")
RETIRING = ("queue 'B' was removed from the configuration: it takes no new jobs, and is removed once its "
            "unfinished jobs finish")


def names(store) -> list[str]:
    return [q.name for q in store.list_queues()]


def new_job(index: int = 0) -> NewJob:
    return NewJob(index=index, client_id=None, priority=0, priority_class="armada-default",
                  pods=[Pod({"cpu": 1000})], grace_period=1.0, deadline=60.0)


@pytest.fixture
def store(tmp_path):
    s = Store(f"sqlite:///{tmp_path}/q.db")
    yield s
    s.close()


def test_a_config_queue_left_out_with_no_unfinished_job_is_removed_and_an_api_queue_stays(store):
    assert store.sync_queues([QueueSpec("A"), QueueSpec("B")], now=1.0) == {"removed": [], "retiring": []}
    store.create_queue(QueueSpec("api-made"), now=2.0)
    assert store.sync_queues([QueueSpec("A")], now=3.0) == {"removed": ["B"], "retiring": []}
    assert names(store) == ["A", "api-made"]
    assert store.sync_queues([], now=4.0) == {"removed": ["A"], "retiring": []}
    assert names(store) == ["api-made"]


def test_an_api_queue_the_config_lists_becomes_a_config_queue(store):
    store.create_queue(QueueSpec("X", weight=2.0), now=1.0)
    store.sync_queues([QueueSpec("X", weight=3.0)], now=2.0)
    assert store.get_queue("X").weight == 3.0
    assert store.sync_queues([], now=3.0) == {"removed": ["X"], "retiring": []}
    assert names(store) == []


def test_a_config_queue_left_out_with_a_queued_job_retires_refuses_new_jobs_and_comes_back_when_listed(store):
    store.sync_queues([QueueSpec("A"), QueueSpec("B")], now=1.0)
    [kept] = store.submit("B", "s", "bob", [new_job()], now=2.0)
    assert store.sync_queues([QueueSpec("A")], now=3.0) == {"removed": [], "retiring": ["B"]}
    assert [(q.name, q.retiring) for q in store.list_queues()] == [("A", None), ("B", 3.0)]
    with pytest.raises(SubmissionRejected) as refused:
        store.submit("B", "s", "bob", [new_job()], now=4.0)
    assert [(r.field, r.message) for r in refused.value.rejections] == [("queue", RETIRING)]
    # Still retiring at the next sync (its time kept); nothing to remove while the job is queued.
    assert store.sync_queues([QueueSpec("A")], now=5.0) == {"removed": [], "retiring": ["B"]}
    assert store.remove_retired_queues(now=5.0) == []
    assert store.get_queue("B").retiring == 3.0
    assert store.get_job(kept.id)["state"] == "queued"
    # Listed again: an ordinary config queue, taking jobs.
    assert store.sync_queues([QueueSpec("A"), QueueSpec("B")], now=6.0) == {"removed": [], "retiring": []}
    assert store.get_queue("B").retiring is None
    assert len(store.submit("B", "s", "bob", [new_job()], now=7.0)) == 1


def test_a_retiring_queue_is_removed_once_its_last_job_is_cancelled(store):
    store.sync_queues([QueueSpec("A"), QueueSpec("B")], now=1.0)
    [kept] = store.submit("B", "s", "bob", [new_job()], now=2.0)
    store.sync_queues([QueueSpec("A")], now=3.0)
    assert store.cancel("B", job_ids=[kept.id], now=4.0) == {"cancelled": [kept.id], "cancelling": []}
    assert store.remove_retired_queues(now=5.0) == ["B"]
    assert names(store) == ["A"] and store.get_job(kept.id) is None
    assert store.remove_retired_queues(now=6.0) == []


def test_a_store_from_before_origins_migrates_and_counts_its_queues_as_api_queues_until_the_config_lists_them(tmp_path):
    url = f"sqlite:///{tmp_path}/old.db"
    old = Store(url)
    old.sync_queues([QueueSpec("A"), QueueSpec("B")], now=1.0)
    with old.engine.begin() as conn:     # the store as v8 left it: no origin, no retiring
        conn.execute(sa.text("ALTER TABLE queues DROP COLUMN origin"))
        conn.execute(sa.text("ALTER TABLE queues DROP COLUMN retiring"))
        conn.execute(sa.text("UPDATE flotilla_schema SET version = 8"))
    old.close()
    store = Store(url)
    try:
        assert store.schema_version() == schema.LATEST == 9
        assert names(store) == ["A", "B"]
        assert store.sync_queues([QueueSpec("A")], now=2.0) == {"removed": [], "retiring": []}
        assert names(store) == ["A", "B"]       # B: which queues the config made before v9 is not known
        assert store.sync_queues([], now=3.0) == {"removed": ["A"], "retiring": []}
        assert names(store) == ["B"]
    finally:
        store.close()


@pytest.fixture
def service(tmp_path):
    made = []

    def start(cfg):
        clock = Clock(time.time())
        service = build_service(cfg, Scheduler(cfg), store_url=f"sqlite:///{tmp_path}/d.db",
                                backends=service_backends(cfg, clock=clock), seed=0)
        service.clock = clock
        made.append(service)
        return service, TestClient(service.app)

    yield start
    for service in made:
        service.close()


def test_a_restart_without_a_queue_retires_it_runs_its_jobs_and_the_loop_removes_it_after_the_last(service):
    first, client = service(config())
    ids = [j["id"] for j in client.post("/v1/submit", json=job_file("B", "s", [job("b0", duration="2s"),
                                                                                job("b1", duration="2s")]),
                                        headers=headers("bob")).json()["jobs"]]
    first.close()
    # The config without B (as a rollback to a revision that did not list it): B retires.
    second, client = service(parse_config(WITHOUT_B, "test.yaml"))
    listed = {q["name"]: q["retiring"] for q in client.get("/v1/queues", headers=headers("bob")).json()["queues"]}
    assert listed == {"A": False, "B": True}
    assert client.get("/v1/queues/B", headers=headers("bob")).json()["retiring"] is True
    refused = client.post("/v1/submit", json=job_file("B", "s", [job("b2")]), headers=headers("bob"))
    assert refused.status_code == 422 and RETIRING in refused.text
    at_removal = []
    remove = second.store.remove_retired_queues

    def noting_states(now=None):      # the jobs' states when the loop looks for queues to remove
        at_removal.append([second.store.get_job(i)["state"] for i in ids])
        return remove(now)

    second.store.remove_retired_queues = noting_states
    seen = []
    for _ in range(4):        # its queued jobs are scheduled and run as before
        second.clock.now += 1
        second.runner.cycle()
        seen.append(names(second.store))
    assert seen == [["A", "B"], ["A", "B"], ["A"], ["A"]]
    # From the second cycle on (the first snapshot shows B retiring); removed after the ingest that ended them.
    assert at_removal == [["running", "running"], ["succeeded", "succeeded"]]
    assert names(second.store) == ["A"]
    assert [second.store.get_job(i) for i in ids] == [None, None]     # removed with its history
    assert client.get("/v1/queues/B", headers=headers("bob")).status_code == 404
