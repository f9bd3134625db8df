"""A real ``flotilla serve`` against oversized bodies, revoked watchers and secrets that must not reach its log."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from flotilla.service.schema import queues
from flotilla.service.store import JsonCache, Store
from tests.support.serve import Server, cli
from tests.support.service import job, job_file
from tests.support.e2e import CONFIG

LIMITS = 'server: {listen: "127.0.0.1:PORT", maxBodySize: 1Mi, maxJobsPerSubmission: 50}'
SECRET = "s3cret-annotation-value"


@pytest.fixture
def srv(tmp_path):
    server = Server(tmp_path, CONFIG.replace('server: {listen: "127.0.0.1:PORT"}', LIMITS)).start()
    yield server
    if server.proc and server.proc.poll() is None:
        server.kill()


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def padded(body: dict, size: int) -> bytes:
    """``body`` as JSON of exactly ``size`` bytes (trailing whitespace is valid JSON)."""
    text = json.dumps(body).encode()
    assert len(text) <= size
    return text + b" " * (size - len(text))


def test_bodies_past_the_limit_are_refused_with_413_before_they_are_read(srv):
    limit = 1024 * 1024
    json_type = {"Content-Type": "application/json"}
    with srv.http("alice") as alice, httpx.Client(base_url=srv.url, timeout=30) as anonymous:
        at_limit = alice.post("/v1/submit", content=padded(job_file("A", "s", [job("at-limit")]), limit),
                              headers=json_type)
        assert at_limit.status_code == 200, at_limit.text
        over = padded(job_file("A", "s", [job("over")]), limit + 1)
        alice.post("/v1/submit", content=over, headers=json_type)   # warm: the first 413 allocates what it needs
        before = rss_kib(srv.proc.pid)
        for _ in range(4):
            r = alice.post("/v1/submit", content=over, headers=json_type)
            assert r.status_code == 413 and r.json()["error"] == {
                "code": "too_large", "field": None, "errors": [],
                "message": f"body of {limit + 1} bytes; at most {limit} bytes (server.maxBodySize)"}
        # Streamed without a length: read up to the limit, then refused.
        r = alice.post("/v1/submit", content=iter([over[:600_000], over[600_000:]]), headers=json_type)
        assert r.status_code == 413 and r.json()["error"]["message"] == \
            f"body of more; at most {limit} bytes (server.maxBodySize)"
        # A wrong token: 401 before a byte of a 50 MB body is read.
        for _ in range(4):
            r = anonymous.post("/v1/submit", content=b" " * (50 * 1024 * 1024),
                               headers={**json_type, "Authorization": "Bearer wrong"})
            assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"
        growth = rss_kib(srv.proc.pid) - before
        assert growth < 8 * 1024, f"RSS grew by {growth} KiB"
        many = alice.post("/v1/submit", json=job_file("A", "s", [job(f"j{i}") for i in range(51)]))
        assert many.status_code == 413 and many.json()["error"] == {
            "code": "too_large", "field": "jobs", "errors": [],
            "message": "51 jobs in one submission; at most 50 (server.maxJobsPerSubmission)"}
    store = srv.store()
    assert [j["clientId"] for j in store.list_jobs()] == ["at-limit"]
    store.close()


def test_an_open_event_stream_ends_when_access_is_revoked(srv):
    with srv.http("alice") as alice, srv.http("root") as root:
        assert alice.post("/v1/submit", json=job_file("A", "w", [job("x")])).status_code == 200
        lines = []
        with alice.stream("GET", "/v1/queues/A/jobsets/w/events", params={"follow": "true"},
                          timeout=httpx.Timeout(30.0)) as stream:
            for line in stream.iter_lines():
                if not line.strip():
                    continue
                lines.append(json.loads(line))
                if len(lines) == 2:   # submitted, queued: now the admin takes queue A away from alice
                    r = root.put("/v1/queues/A", json={"name": "A", "weight": 1, "owners": ["bob"]})
                    assert r.status_code == 200
        assert [e["kind"] for e in lines[:2]] == ["submitted", "queued"]
        end = lines[-1]
        assert {k: end[k] for k in ("kind", "queue", "jobSet", "reason")} == {
            "kind": "end", "queue": "A", "jobSet": "w", "reason": "user 'alice' may no longer watch queue 'A'"}
        r = alice.get("/v1/queues/A/jobsets/w/events", params={"follow": "false"})
        assert r.status_code == 403


def test_the_log_carries_no_annotation_values_tokens_or_sql_parameters(srv):
    with srv.http("alice") as alice:
        secret_job = job("secret", duration="1s")
        secret_job["annotations"]["team/secret"] = SECRET
        assert alice.post("/v1/submit", json=job_file("A", "s", [secret_job])).status_code == 200
        bad = job("bad", cpu="1e99999")
        bad["annotations"]["team/secret"] = SECRET
        assert alice.post("/v1/submit", json=job_file("A", "s", [bad])).status_code == 422
        assert alice.post("/v1/submit", content=b'{"queue": "A", "jobSetId": "' + SECRET.encode() + b'"',
                          headers={"Content-Type": "application/json"}).status_code == 422
    srv.kill()
    log = srv.log.read_text()
    assert SECRET not in log and "alice-token" not in log


def test_sql_errors_do_not_carry_their_parameters(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/s.db")
    row = {"name": "Q", "owners": json.dumps([SECRET]), "created": 0.0, "updated": 0.0}
    with pytest.raises(sa.exc.IntegrityError) as exc:
        with store.write() as conn:
            conn.execute(queues.insert().values(**row))
            conn.execute(queues.insert().values(**row))
    assert SECRET not in str(exc.value) and "[SQL parameters hidden due to hide_parameters=True]" in str(exc.value)
    assert store.list_queues() == []
    store.close()


def test_queue_delete_from_the_cli_is_refused_with_unfinished_jobs_and_forced_with_force(srv):
    with srv.http("bob") as bob:   # a job no node can hold stays queued
        assert bob.post("/v1/submit", json=job_file("B", "s", [job("huge", cpu="1000")])).status_code == 200
    refused = cli(srv, "admin", "queue", "delete", "B")
    assert (refused.returncode, refused.stderr.strip()) == (
        1, "error: 409: queue 'B' has 1 active jobs; cancel them first, or delete with force=true")
    forced = cli(srv, "admin", "queue", "delete", "B", "--force")
    assert (forced.returncode, forced.stdout.strip()) == (0, "deleted queue B and its 1 jobs")
    store = srv.store()
    assert store.get_queue("B") is None and store.count_jobs() == 0
    store.close()


def test_the_json_parse_cache_is_bounded_by_bytes():
    cache = JsonCache(limit=10_000, max_bytes=10_000, max_text=1_000)
    big = json.dumps({"a": "x" * 5_000})
    assert cache(big) == {"a": "x" * 5_000} and cache.bytes == 0   # too big to keep
    texts = [json.dumps({"k": i, "pad": "y" * 200}) for i in range(100)]
    for text in texts:
        cache(text)
        assert cache.bytes <= 10_000
    assert cache(texts[-1]) is cache(texts[-1])   # what it keeps, it shares
