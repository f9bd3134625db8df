"""/metrics after a known cycle, parsed with prometheus_client's own parser; /healthz and /readyz."""

from __future__ import annotations

from fastapi.testclient import TestClient

from flotilla.scheduler import Scheduler
from flotilla.service.loop import service_backends
from flotilla.service.server import build_service
from tests.support.service import config, headers, job, job_file
from tests.support.metrics import Clock, only, scrape


def make_service(tmp_path):
    cfg = config()
    clock = Clock()
    service = build_service(cfg, Scheduler(cfg), store_url=f"sqlite:///{tmp_path}/m.db",
                            backends=service_backends(cfg, clock=clock), seed=0)
    return service, TestClient(service.app)


def test_metrics_after_a_known_cycle(tmp_path):
    service, client = make_service(tmp_path)
    # 32 cores in all (c1: 2 x 8 with GPUs, c2: 2 x 8). A asks for 6 x 8 cores, B for 1 x 4 and 1 x 16 (fits nowhere).
    assert client.post("/v1/submit", json=job_file("A", "s1", [job(f"a{i}", cpu="8") for i in range(6)]),
                       headers=headers("alice")).status_code == 200
    assert client.post("/v1/submit", json=job_file("B", "s2", [job("b0", cpu="4"), job("b1", cpu="16")]),
                       headers=headers("bob")).status_code == 200
    assert client.get("/v1/jobs/nope", headers=headers("alice")).status_code == 404
    assert service.runner.cycle()
    samples = scrape(client)

    assert only(samples, "flotilla_queue_weight") == {(("queue", "A"),): 1.0, (("queue", "B"),): 1.0}
    assert only(samples, "flotilla_queue_fair_share") == {(("queue", "A"),): 0.5, (("queue", "B"),): 0.5}
    # A: 3 jobs of 8 cores, B: 4 cores; the fourth A job does not fit beside B's. assetfairness prices the pool
    # at cpu 1 + nvidia.com/gpu 1 per unit: 32 cores and 4 GPUs, 36.
    assert only(samples, "flotilla_queue_share") == {(("queue", "A"),): 24 / 36, (("queue", "B"),): 4 / 36}
    assert only(samples, "flotilla_queue_allocated") == {   # resources with nothing allocated are left out
        (("queue", "A"), ("resource", "cpu")): 24.0, (("queue", "B"), ("resource", "cpu")): 4.0}
    assert only(samples, "flotilla_queue_jobs") == {
        (("queue", "A"), ("state", "queued")): 3.0, (("queue", "A"), ("state", "leased")): 0.0,
        (("queue", "A"), ("state", "pending")): 3.0, (("queue", "A"), ("state", "running")): 0.0,
        (("queue", "B"), ("state", "queued")): 1.0, (("queue", "B"), ("state", "leased")): 0.0,
        (("queue", "B"), ("state", "pending")): 1.0, (("queue", "B"), ("state", "running")): 0.0}
    assert only(samples, "flotilla_queue_queued_jobs_by_reason") == {
        (("queue", "A"), ("reason", "insufficient_resources")): 3.0,
        (("queue", "B"), ("reason", "insufficient_resources")): 1.0}
    assert only(samples, "flotilla_cluster_up") == {(("cluster", "c1"),): 1.0, (("cluster", "c2"),): 1.0}
    assert samples[("flotilla_cycles_total",)] == 1.0
    assert samples[("flotilla_cycle_jobs_scheduled_total",)] == 4.0
    assert samples[("flotilla_cycle_jobs_preempted_total",)] == 0.0
    assert samples[("flotilla_cycle_jobs_evicted_total",)] == 0.0
    assert samples[("flotilla_cycle_jobs_considered_total",)] == 8.0
    assert samples[("flotilla_cycle_seconds_count",)] == 1.0
    assert {key[1][1] for key in samples if key[0] == "flotilla_cycle_phase_seconds_count"} == {
        "clusters", "ingest", "stop", "load", "schedule", "record", "lease", "open", "evict", "allocate", "preempt"}
    assert samples[("flotilla_scheduler_leader", ("identity", "all"))] == 1.0
    assert samples[("flotilla_role_info", ("role", "all"))] == 1.0
    # Requests by route template and status code; errors are the 4xx and 5xx.
    assert samples[("flotilla_api_requests_total", ("code", "200"), ("method", "POST"), ("route", "/v1/submit"))] == 2.0
    assert samples[("flotilla_api_requests_total", ("code", "404"), ("method", "GET"),
                    ("route", "/v1/jobs/{job_id}"))] == 1.0
    assert only(samples, "flotilla_api_errors_total") == {
        (("code", "404"), ("method", "GET"), ("route", "/v1/jobs/{job_id}")): 1.0}
    assert samples[("flotilla_api_request_seconds_count", ("method", "POST"), ("route", "/v1/submit"))] == 2.0
    assert samples[("flotilla_store_commit_seconds_count",)] > 0

    # The next cycle: the clusters report the pods running, which renews their leases.
    service.runner.cycle()
    samples = scrape(client)
    assert samples[("flotilla_leases_renewed_total",)] == 4.0
    assert samples[("flotilla_leases_expired_total",)] == 0.0
    service.close()


def test_health_and_readiness(tmp_path):
    service, client = make_service(tmp_path)
    assert client.get("/healthz").json() == {"ok": True, "role": "all"}
    assert client.get("/readyz").json() == {"ready": True, "role": "all"}
    service.store.engine.dispose()
    service.store.engine = __import__("sqlalchemy").create_engine(f"sqlite:///{tmp_path}/missing/dir/x.db")
    response = client.get("/readyz")
    assert (response.status_code, response.json()["reason"]) == (503, "store unreachable: OperationalError")
    service.shutting_down.set()
    assert client.get("/healthz").status_code == 503


def test_reasons_past_the_per_cycle_limit_are_counted_per_queue(monkeypatch):
    from types import SimpleNamespace

    from flotilla.service.roles import status

    monkeypatch.setattr(status, "REASON_LIMIT", 3)
    pods = [SimpleNamespace(id=i, queue=q) for i, q in [("g#0", "A"), ("g#1", "A"), ("b", "B"), ("c", "A"),
                                                        ("d", "B"), ("e", "B")]]
    decisions = SimpleNamespace(queues={}, queued=pods, explain=lambda pod: f"why {pod.id}")
    report = SimpleNamespace(number=1, started=0.0, seconds=0.0, clusters=[], unavailable=[])
    body = status.status_body(report, decisions, "x", 1)
    # The first three pods: job g (two pods, counted once) and b, with their reasons; the rest per pod.
    assert body["reasons"] == {"A": {"why g#0": 1, status.NOT_COUNTED: 1},
                               "B": {"why b": 1, status.NOT_COUNTED: 2}}
    assert body["jobReasons"] == {"g": "why g#0", "b": "why b"}


def test_a_store_that_cannot_be_read_leaves_its_gauges_out_and_the_rest_answers(tmp_path, monkeypatch):
    import sqlalchemy as sa

    service, client = make_service(tmp_path)

    def unreadable():
        raise sa.exc.OperationalError("SELECT", {}, Exception("connection lost"))

    monkeypatch.setattr(service.metrics.status, "get", unreadable)
    samples = scrape(client)
    assert only(samples, "flotilla_role_info") == {(("role", "all"),): 1.0}
    assert only(samples, "flotilla_queue_weight") == {}
