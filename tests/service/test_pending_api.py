"""Why is my job pending: reasons and positions from the API, the client and the CLI, for owners only."""

from __future__ import annotations

import json
import threading

import pytest
import uvicorn
from click.testing import CliRunner
from fastapi.testclient import TestClient

from flotilla.client import Client, NotFound
from flotilla.config import parse_config
from flotilla.scheduler import Scheduler
from flotilla.scheduler_main import main
from flotilla.service.jobspec import prepare
from flotilla.service.pending import head_size
from flotilla.service.server import build_service
from tests.support.serve import free_port
from tests.support.service import CONFIG, headers, job, job_file

FULL = "0/4 nodes are available: 4 Insufficient cpu"
NOWHERE = "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector"


def _service(tmp_path):
    cfg = parse_config(CONFIG, "pending.yaml")
    return build_service(cfg, Scheduler(cfg), store_url=f"sqlite:///{tmp_path}/pending.db")


def _submit(service, client_id, submitted, **spec) -> str:
    """One job of queue A, submitted at ``submitted`` (the order among equal priorities)."""
    new = prepare(job_file("A", "s", [job(client_id, **spec)]), service.settings)[1]
    return service.store.submit("A", "s", "alice", new, now=submitted)[0].id


@pytest.fixture
def waiting(tmp_path):
    """Four 8-core jobs fill the four 8-core nodes; w-1..w-4 wait (w-4 for a zone no node has)."""
    service = _service(tmp_path)
    for k in range(1, 5):
        _submit(service, f"fill-{k}", 1000 + k, cpu="8", duration="1h")
    ids = {name: _submit(service, name, 2000 + k, cpu=cpu, **spec) for k, (name, cpu, spec) in enumerate(
        [("w-1", "8", {}), ("w-2", "2", {}), ("w-3", "8", {}), ("w-4", "1", {"nodeSelector": {"zone": "x"}})])}
    assert service.runner.cycle()
    yield service, ids
    service.close()


def test_a_queued_job_has_its_reason_and_position(waiting):
    service, ids = waiting
    client = TestClient(service.app)
    got = {name: client.get(f"/v1/jobs/{job_id}", headers=headers("alice")).json() for name, job_id in ids.items()}
    assert {name: (record["state"], record["position"], record["reason"]) for name, record in got.items()} == {
        "w-1": ("queued", 1, FULL), "w-2": ("queued", 2, FULL), "w-3": ("queued", 3, FULL),
        "w-4": ("queued", 4, NOWHERE)}
    # Who may not act in queue A does not see its jobs (as before), nor its pending list.
    assert client.get(f"/v1/jobs/{ids['w-1']}", headers=headers("bob")).status_code == 404
    refused = client.get("/v1/queues/A/pending", headers=headers("bob"))
    assert (refused.status_code, refused.json()["error"]["message"]) == (404, "queue 'A' not found")
    assert client.get("/v1/queues/nowhere/pending", headers=headers("root")).status_code == 404


def test_the_pending_list_is_the_queue_head_in_scheduling_order(waiting):
    service, ids = waiting
    client = TestClient(service.app)
    for user in ("alice", "carol", "root"):     # an owner, a member of an owning group, an administrator
        answer = client.get("/v1/queues/A/pending?limit=3", headers=headers(user))
        assert answer.status_code == 200
        body = answer.json()
        assert (body["queue"], body["cycle"], body["queued"]) == ("A", 1, 4)
        assert [(j["position"], j["id"], j["reason"]) for j in body["jobs"]] == [
            (1, ids["w-1"], FULL), (2, ids["w-2"], FULL), (3, ids["w-3"], FULL)]
    assert [j["jobSet"] for j in body["jobs"]] == ["s", "s", "s"]
    for bad in ("0", "1001", "x"):
        assert client.get(f"/v1/queues/A/pending?limit={bad}", headers=headers("alice")).status_code == 422
    # A job that left the queue since the cycle is not listed; the others keep their positions.
    assert client.post("/v1/cancel", json={"queue": "A", "jobIds": [ids["w-2"]]},
                       headers=headers("alice")).status_code == 200
    body = client.get("/v1/queues/A/pending", headers=headers("alice")).json()
    assert [(j["position"], j["id"]) for j in body["jobs"]] == [(1, ids["w-1"]), (3, ids["w-3"]), (4, ids["w-4"])]
    assert body["queued"] == 3


def test_a_job_past_the_published_head_is_placed_from_the_store_order(tmp_path, monkeypatch):
    # Heads of two jobs: w-3 and w-4 lie beyond, their positions counted from the store, their reasons the cycle's.
    monkeypatch.setattr("flotilla.service.loop.head_size", lambda queues: 2)
    service = _service(tmp_path)
    try:
        for k in range(1, 5):
            _submit(service, f"fill-{k}", 1000 + k, cpu="8", duration="1h")
        ids = [_submit(service, f"w-{k}", 2000 + k, cpu="8") for k in range(1, 5)]
        assert service.runner.cycle()
        client = TestClient(service.app)
        got = [client.get(f"/v1/jobs/{job_id}", headers=headers("alice")).json() for job_id in ids]
        assert [(r["position"], r["reason"]) for r in got] == [(1, FULL), (2, FULL), (3, FULL), (4, FULL)]
        body = client.get("/v1/queues/A/pending?limit=10", headers=headers("alice")).json()
        assert [(j["position"], j["id"]) for j in body["jobs"]] == list(zip([1, 2, 3, 4], ids))
    finally:
        service.close()


def test_head_sizes_stay_bounded():
    assert [head_size(n) for n in (1, 2, 20, 21, 200, 10_000)] == [1000, 1000, 1000, 952, 100, 100]


def test_the_client_and_the_cli_give_reason_and_position(waiting):
    service, ids = waiting
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(service.app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        with Client(url, "alice-token") as alice:
            while not server.started:
                thread.join(0.05)
            job = alice.status(ids["w-2"])
            assert (job.state, job.position, job.reason) == ("queued", 2, FULL)
            pending = alice.pending("A", limit=2)
            assert [(j.position, j.id, j.reason) for j in pending.jobs] == [(1, ids["w-1"], FULL),
                                                                           (2, ids["w-2"], FULL)]
        with Client(url, "bob-token") as bob, pytest.raises(NotFound):
            bob.pending("A")

        runner = CliRunner()
        status = runner.invoke(main, ["status", ids["w-4"], "--url", url, "--token", "alice-token", "-o", "json"])
        assert status.exit_code == 0, status.output
        record = json.loads(status.output)
        assert (record["position"], record["reason"]) == (4, NOWHERE)
        table = runner.invoke(main, ["status", ids["w-1"], "--url", url, "--token", "alice-token"])
        header, row = table.output.splitlines()
        assert header.split()[:6] == ["ID", "QUEUE", "JOBSET", "CLIENTID", "STATE", "POSITION"]
        assert row.split()[:6] == [ids["w-1"], "A", "s", "w-1", "queued", "1"] and row.endswith(FULL)

        listed = runner.invoke(main, ["queue", "pending", "A", "--limit", "2", "--url", url, "--token",
                                      "alice-token"])
        assert listed.exit_code == 0, listed.output
        assert listed.output.splitlines() == [
            f"POSITION  ID{' ' * 26}JOBSET  PRIORITY  REASON",
            f"1         {ids['w-1']}  s       0         {FULL}",
            f"2         {ids['w-2']}  s       0         {FULL}"]
        refused = runner.invoke(main, ["queue", "pending", "A", "--url", url, "--token", "bob-token"])
        assert (refused.exit_code, refused.output.strip()) == (1, "error: 404: queue 'A' not found")
    finally:
        server.should_exit = True
        thread.join(10)
