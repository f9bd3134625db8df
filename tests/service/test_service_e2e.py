"""End to end: a real ``flotilla serve`` process on loopback, driven through the CLI and the API."""

from __future__ import annotations

import json
import signal
import threading
import time

import httpx
import pytest
from tests.support.serve import ORDER, Server, cli, wait_for, write_file

from flotilla.service.store import rebuild_states
from tests.support.service import job
from tests.support.e2e import CONFIG


@pytest.fixture
def server(tmp_path):
    made = []

    def make(extra: str = "") -> Server:
        srv = Server(tmp_path, CONFIG, extra).start()
        made.append(srv)
        return srv

    yield make
    for srv in made:
        if srv.proc and srv.proc.poll() is None:
            srv.kill()


def test_two_queues_through_the_cli_gang_together_and_cancel_a_job_set(server, tmp_path):
    srv = server()
    file_a = write_file(tmp_path, "a.yaml", {"queue": "A", "jobSetId": "sa", "jobs":
                        [job(f"a{i}", cpu="1", duration="1s") for i in range(6)]
                        + [job(f"g{i}", cpu="2", duration="1s", gang=("gang-1", 3)) for i in range(3)]})
    file_b = write_file(tmp_path, "b.yaml", {"queue": "B", "jobSetId": "sb", "jobs":
                        [job(f"b{i}", cpu="1", duration="1s") for i in range(6)]})
    file_long = write_file(tmp_path, "long.yaml", {"queue": "B", "jobSetId": "long", "jobs":
                           [job(f"l{i}", cpu="1", duration="5m") for i in range(4)]})
    out_a = cli(srv, "alice", "submit", str(file_a), "--output", "json")
    assert out_a.returncode == 0, out_a.stderr
    ids_a = [j["id"] for j in json.loads(out_a.stdout)["jobs"]]
    assert [j["clientId"] for j in json.loads(out_a.stdout)["jobs"]] == [f"a{i}" for i in range(6)] + \
        [f"g{i}" for i in range(3)]
    out_b = cli(srv, "bob", "submit", str(file_b), "--output", "json")
    out_long = cli(srv, "bob", "submit", str(file_long), "--output", "json")
    assert out_b.returncode == 0 and out_long.returncode == 0, out_b.stderr + out_long.stderr
    long_ids = {j["id"] for j in json.loads(out_long.stdout)["jobs"]}

    # Every job of both sets succeeds; the watchers see the events in order.
    for user, queue, job_set, count in (("alice", "A", "sa", 9), ("bob", "B", "sb", 6)):
        watched = cli(srv, user, "watch", queue, job_set, "--until-done", "--output", "json", timeout=60)
        assert watched.returncode == 0, watched.stderr
        events = [json.loads(line) for line in watched.stdout.splitlines()]
        assert [e["id"] for e in events] == sorted(e["id"] for e in events)
        per_job: dict[str, list[str]] = {}
        for e in events:
            per_job.setdefault(e["jobId"], []).append(e["kind"])
        assert len(per_job) == count
        assert all(kinds == ORDER for kinds in per_job.values()), per_job
        if queue == "A":
            gang_leases = [e for e in events if e["kind"] == "leased" and e["jobId"] in ids_a[6:]]
            assert len({e["time"] for e in gang_leases}) == 1          # one cycle
            assert len({e["cluster"] for e in gang_leases}) == 1       # one cluster

    # Cancel the long-running job set mid-run.
    wait_for(lambda: all(j["state"] == "running" for j in srv.http("bob").get(
        "/v1/queues/B/jobsets/long/jobs").json()["jobs"]))
    cancelled = cli(srv, "bob", "cancel", "B", "long", "--output", "json")
    assert cancelled.returncode == 0, cancelled.stderr
    assert set(json.loads(cancelled.stdout)["cancelling"]) == long_ids
    watched = cli(srv, "bob", "watch", "B", "long", "--until-done", "--output", "json")
    assert watched.returncode == 5          # all finished, not all succeeded
    events = [json.loads(line) for line in watched.stdout.splitlines()]
    assert {e["jobId"] for e in events if e["kind"] == "cancelled"} == long_ids
    store = srv.store()
    try:
        everything = store.all_events()
        assert {e["jobId"] for e in everything if e["kind"] == "cancelled"} == long_ids
        assert rebuild_states(everything) == store.job_states()
    finally:
        store.close()

    status = cli(srv, "alice", "status", ids_a[0], "--output", "json")
    assert status.returncode == 0
    assert {k: json.loads(status.stdout)[k] for k in ("id", "queue", "jobSet", "state")} == \
        {"id": ids_a[0], "queue": "A", "jobSet": "sa", "state": "succeeded"}
    assert cli(srv, "bob", "status", ids_a[0]).returncode == 1          # not bob's: not found
    assert cli(srv, "nobody", "queue", "list").returncode == 3


def test_restart_after_kill_9_during_concurrent_submissions(server, tmp_path):
    srv = server()
    answered: dict[str, str] = {}           # clientId -> id, for submissions that got a success answer
    batches: list[list[str]] = []
    lock = threading.Lock()
    stop = threading.Event()

    def client(n: int) -> None:
        with srv.http("alice") as http:
            for b in range(1000):
                if stop.is_set():
                    return
                cids = [f"w{n}-b{b}-j{i}" for i in range(20)]
                with lock:
                    batches.append(cids)
                body = {"queue": "A", "jobSetId": f"burst-{n}", "jobs": [job(c, cpu="100m") for c in cids]}
                try:
                    r = http.post("/v1/submit", json=body)
                except httpx.HTTPError:
                    return
                if r.status_code == 200:
                    with lock:
                        answered.update({j["clientId"]: j["id"] for j in r.json()["jobs"]})

    threads = [threading.Thread(target=client, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    wait_for(lambda: len(answered) >= 2000, timeout=60, step=0.02)
    srv.kill(signal.SIGKILL)
    stop.set()
    for t in threads:
        t.join(30)

    srv.start()
    store = srv.store()
    try:
        jobs = store.list_jobs("A")
        by_client: dict[str, list[str]] = {}
        for j in jobs:
            by_client.setdefault(j["clientId"], []).append(j["id"])
        assert all(len(ids) == 1 for ids in by_client.values())
        for cid, job_id in answered.items():
            assert by_client.get(cid) == [job_id], cid
        for cids in batches:                    # all or nothing per submission
            present = [c in by_client for c in cids]
            assert all(present) or not any(present), cids
        events = store.all_events()
        per_job: dict[str, list[str]] = {}
        for e in events:
            per_job.setdefault(e["jobId"], []).append(e["kind"])
        assert all(kinds[:2] == ["submitted", "queued"] for kinds in per_job.values())
        assert set(per_job) == {j["id"] for j in jobs}
        before = len(jobs)
    finally:
        store.close()

    # Resubmitting everything with the same clientIds creates nothing new.
    with srv.http("alice") as http:
        for n in range(6):
            mine = [c for c in by_client if c.startswith(f"w{n}-")]
            for start in range(0, len(mine), 200):
                r = http.post("/v1/submit", json={"queue": "A", "jobSetId": f"burst-{n}",
                                                  "jobs": [job(c, cpu="100m") for c in mine[start:start + 200]]})
                assert r.status_code == 200
                assert all(j["existing"] and j["id"] == by_client[j["clientId"]][0] for j in r.json()["jobs"])
    store = srv.store()
    try:
        assert store.count_jobs() == before
    finally:
        store.close()


def test_a_stopped_cluster_loses_no_job(server, tmp_path):
    srv = server()
    with srv.http("alice") as http:
        r = http.post("/v1/submit", json={"queue": "A", "jobSetId": "s", "jobs":
                                          [job(f"j{i}", cpu="4", duration="2s") for i in range(8)]})
        ids = [j["id"] for j in r.json()["jobs"]]
        jobs = wait_for(lambda: (lambda js: js if all(j["state"] == "running" for j in js) else None)(
            http.get("/v1/queues/A/jobsets/s/jobs").json()["jobs"]))
        on_c1 = {j["id"] for j in jobs if j["cluster"] == "c1"}
        assert len(on_c1) == 4
    with srv.http("root") as admin:
        assert admin.post("/v1/admin/clusters/c1/stop").status_code == 200
    with srv.http("alice") as http:
        wait_for(lambda: all(j["state"] == "succeeded"
                             for j in http.get("/v1/queues/A/jobsets/s/jobs").json()["jobs"]), timeout=40)
        final = {j["id"]: j for j in http.get("/v1/queues/A/jobsets/s/jobs").json()["jobs"]}
        events = [json.loads(line) for line in
                  http.get("/v1/queues/A/jobsets/s/events?follow=false").text.splitlines() if line]
    for job_id in ids:
        kinds = [e["kind"] for e in events if e["jobId"] == job_id]
        if job_id in on_c1:
            assert kinds == ["submitted", "queued", "leased", "pending", "running", "lease-expired", "queued",
                             "leased", "pending", "running", "succeeded"], kinds
            assert final[job_id]["cluster"] == "c2" and final[job_id]["retries"] == 1
        else:
            assert kinds == ORDER
    store = srv.store()
    try:
        assert rebuild_states(store.all_events()) == store.job_states()
    finally:
        store.close()


def test_sigterm_exits_cleanly_and_a_restart_picks_up_where_the_store_says(server, tmp_path):
    srv = server()
    with srv.http("bob") as http:
        r = http.post("/v1/submit", json={"queue": "B", "jobSetId": "s", "jobs":
                                          [job(f"j{i}", cpu="4", duration="1s") for i in range(12)]})
        assert r.status_code == 200
        wait_for(lambda: any(j["state"] == "running" for j in http.get("/v1/queues/B/jobsets/s/jobs").json()["jobs"]))
    started = time.monotonic()
    assert srv.kill(signal.SIGTERM) == 0
    assert time.monotonic() - started < 10
    assert "stopped after" in srv.log.read_text()
    srv.start()
    with srv.http("bob") as http:
        wait_for(lambda: all(j["state"] == "succeeded"
                             for j in http.get("/v1/queues/B/jobsets/s/jobs").json()["jobs"]), timeout=40)
