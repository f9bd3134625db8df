"""Draining nodes and cordoning queues, through the API, on simulated clusters (and drain on KWOK)."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from flotilla.scheduler import Scheduler
from flotilla.service.loop import service_backends
from flotilla.service.server import build_service
from tests.support.service import config, headers, job, job_file
from tests.support.metrics import Clock


@pytest.fixture
def service(tmp_path):
    cfg = config()
    clock = Clock(time.time())   # the API stamps submissions with the wall clock
    service = build_service(cfg, Scheduler(cfg), store_url=f"sqlite:///{tmp_path}/d.db",
                            backends=service_backends(cfg, clock=clock), seed=0)
    service.clock = clock
    yield service, TestClient(service.app)
    service.close()


def states(service, ids):
    return [service.store.get_job(i)["state"] for i in ids]


def test_a_cordoned_queue_accepts_jobs_and_schedules_nothing_until_uncordoned(service):
    service, client = service
    assert client.post("/v1/queues/A/cordon", headers=headers("alice")).status_code == 403   # administrators only
    assert client.post("/v1/queues/A/cordon", headers=headers("root")).json() == {"queue": "A", "cordoned": True}
    answer = client.post("/v1/submit", json=job_file("A", "s", [job("a0"), job("a1")]), headers=headers("alice"))
    assert answer.status_code == 200
    ids = [j["id"] for j in answer.json()["jobs"]]
    b = client.post("/v1/submit", json=job_file("B", "s", [job("b0")]), headers=headers("bob")).json()["jobs"][0]["id"]
    service.runner.cycle()
    assert states(service, ids) == ["queued", "queued"] and states(service, [b]) == ["pending"]
    listed = {q["name"]: q["cordoned"] for q in client.get("/v1/queues", headers=headers("alice")).json()["queues"]}
    assert listed == {"A": True, "B": False}
    assert client.post("/v1/queues/A/uncordon", headers=headers("root")).status_code == 200
    service.runner.cycle()
    assert states(service, ids) == ["pending", "pending"]
    assert client.post("/v1/queues/nope/cordon", headers=headers("root")).status_code == 404


def test_a_drained_node_takes_no_new_jobs_lets_its_jobs_finish_and_shows_drained(service):
    service, client = service
    # One 8-core job for 10 s; it lands on c2-node-1 (no GPUs: the smallest fit), which is then drained.
    first = client.post("/v1/submit", json=job_file("A", "s", [job("x", cpu="8", duration="10s")]),
                        headers=headers("alice")).json()["jobs"][0]["id"]
    service.runner.cycle()
    assert service.store.get_job(first)["node"] == "c2-node-1"
    assert client.post("/v1/nodes/c2/c2-node-1/drain", headers=headers("root")).json() == \
        {"node": "c2/c2-node-1", "draining": True}
    # Three more 8-core jobs: room for all on the other three nodes, none on the draining one.
    more = [j["id"] for j in client.post("/v1/submit", json=job_file("B", "s", [job(f"y{i}", cpu="8", duration="1h")
                                                                                 for i in range(4)]),
                                         headers=headers("bob")).json()["jobs"]]
    service.clock.now += 1
    service.runner.cycle()
    nodes = [service.store.get_job(i)["node"] for i in more]
    assert sorted(n for n in nodes if n) == ["c1-node-1", "c1-node-2", "c2-node-2"]
    assert client.get("/v1/nodes", headers=headers("alice")).json() == {"nodes": {"c2/c2-node-1": "draining"}}
    for _ in range(12):            # x finishes; the fourth y still may not use the drained node
        service.clock.now += 1     # (a cycle a second renews the leases)
        service.runner.cycle()
    assert service.store.get_job(first)["state"] == "succeeded"
    time.sleep(1.05)               # the published status is read at most once a second
    assert client.get("/v1/nodes", headers=headers("alice")).json() == {"nodes": {"c2/c2-node-1": "drained"}}
    assert sorted(service.store.get_job(i)["node"] or "-" for i in more) == ["-", "c1-node-1", "c1-node-2", "c2-node-2"]
    assert client.post("/v1/nodes/c2/c2-node-1/uncordon", headers=headers("root")).status_code == 200
    service.clock.now += 1
    service.runner.cycle()
    assert sorted(service.store.get_job(i)["node"] for i in more) == ["c1-node-1", "c1-node-2", "c2-node-1", "c2-node-2"]
    time.sleep(1.05)
    assert client.get("/v1/nodes", headers=headers("alice")).json() == {"nodes": {}}
    assert client.post("/v1/nodes/c9/x/drain", headers=headers("root")).status_code == 404
    assert client.post("/v1/nodes/c1/nope/drain", headers=headers("root")).status_code == 404


@pytest.mark.kwok
def test_drain_on_a_kwok_cluster_sets_unschedulable_and_keeps_new_pods_off(kwok, tmp_path):
    from tests.support.kwok import flotilla_pods_by_node
    from tests.support.kwok_backends import close_all, job, scheduler_and_backends, wait_idle, write_config

    from flotilla.kubernetes.runner import Runner

    config, scheduler, backends = scheduler_and_backends(write_config(tmp_path, kwok, names=("a",)))
    backend = backends["kwok-a"]
    try:
        backend.set_unschedulable("node-1", True)
        assert kwok["a"].client.get("/api/v1/nodes/node-1")["spec"]["unschedulable"] is True
        deadline = time.monotonic() + 10
        while not next(n for n in backend.snapshot().nodes if n.name == "node-1").unschedulable:
            assert time.monotonic() < deadline, "the node watch did not bring the drain"
            time.sleep(0.05)
        runner = Runner(scheduler, backends)
        runner.submit(job(f"a-{i}", "A", cpu=1, submitted=i) for i in range(1, 5))
        result = runner.cycle()
        assert {p.node for p in result.decisions.scheduled} == {"node-2"}
        wait_idle(backends, runner)
        pods = kwok["a"].wait_pods(lambda pods: len(pods) == 4 and all(p["spec"].get("nodeName") for p in pods),
                                   what="four bound pods")
        assert flotilla_pods_by_node(pods) == {"node-2": ["a-1", "a-2", "a-3", "a-4"]}
    finally:
        backend.set_unschedulable("node-1", False)   # the session's clusters keep their nodes between tests
        close_all(backends)
