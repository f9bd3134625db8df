"""Issue 30, item 1: nobody holds the event loop with a body.

Nothing is read before authentication (the dashboard's forms included),
forms are bounded in bytes and fields, and a large JSON body is parsed and
validated off the event loop in short steps. The latency figures under
attack are a benchmark (bench/service_attacks.py, docs/performance.md), not
timed tests; these assert the exact answers and what was (not) read.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from flotilla.config import parse_config
from flotilla.scheduler import Scheduler
from flotilla.service import bounds
from flotilla.service.bounds import BoundsError, load_json
from flotilla.service.guard import MAX_FORM_BYTES, MAX_FORM_FIELDS
from flotilla.service.jobspec import VALIDATION_STEP, JobFile, job_file_in_steps
from flotilla.service.server import build_service
from tests.support.service import CONFIG, job, job_file

MIB16 = 16 * 1024 * 1024


@pytest.fixture
def service(tmp_path):
    cfg = parse_config(CONFIG, "loop.yaml")
    svc = build_service(cfg, Scheduler(cfg), store_url=f"sqlite:///{tmp_path}/loop.db")
    yield svc
    svc.close()


def asgi_call(app, method: str, path: str, headers: dict, body: bytes) -> tuple[int, dict, bytes, int]:
    """One request straight through the ASGI app: (status, headers, body, how many times it asked for the body)."""
    asked = 0
    sent: list[dict] = []

    async def receive():
        nonlocal asked
        asked += 1
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    raw_headers = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    raw_headers.append((b"content-length", str(len(body)).encode()))
    scope = {"type": "http", "method": method, "path": path, "raw_path": path.encode(), "query_string": b"",
             "headers": raw_headers, "scheme": "http", "server": ("127.0.0.1", 8080),
             "client": ("127.0.0.1", 5000), "http_version": "1.1", "asgi": {"version": "3.0"}, "root_path": ""}
    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    content = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, content, asked


FORM = {"host": "127.0.0.1:8080", "content-type": "application/x-www-form-urlencoded",
        "origin": "http://127.0.0.1:8080"}


def test_an_unauthenticated_16_mib_form_is_refused_before_its_body_is_read(service):
    body = b"a=1&" * (MIB16 // 4)
    status, headers, content, asked = asgi_call(service.app, "POST", "/ui/jobs/x/reprioritize", FORM, body)
    assert (status, asked, headers["connection"]) == (401, 0, "close")
    assert json.loads(content)["error"]["message"] == \
        "log in first (/ui/login): the form's login cookie is missing or no longer valid"
    # A cookie that is no login is the same refusal, the body still unread.
    status, _, _, asked = asgi_call(service.app, "POST", "/ui/jobs/x/cancel",
                                    {**FORM, "cookie": "flotilla_token=not-a-token"}, body)
    assert (status, asked) == (401, 0)


def test_a_logged_in_16_mib_form_is_refused_by_its_length_unread(service):
    body = b"a=1&" * (MIB16 // 4)
    status, _, content, asked = asgi_call(service.app, "POST", "/ui/jobs/x/reprioritize",
                                          {**FORM, "cookie": "flotilla_token=alice-token"}, body)
    assert (status, asked) == (413, 0)
    assert json.loads(content)["error"]["message"] == \
        f"body of {MIB16} bytes; at most {MAX_FORM_BYTES} bytes (a dashboard form)"
    # The login form takes no login, and is bounded alike.
    status, _, _, asked = asgi_call(service.app, "POST", "/ui/login", FORM, body)
    assert (status, asked) == (413, 0)


def test_a_form_over_the_field_count_is_refused(service):
    client = TestClient(service.app, base_url="http://127.0.0.1:8080")
    client.cookies.set("flotilla_token", "alice-token")
    origin = {"Origin": "http://127.0.0.1:8080"}
    fields = "&".join(f"f{i}=1" for i in range(MAX_FORM_FIELDS)) + "&priority=5"
    answer = client.post("/ui/jobs/x/reprioritize", content=fields, follow_redirects=False,
                         headers={**origin, "Content-Type": "application/x-www-form-urlencoded"})
    assert answer.status_code == 413
    assert f"a form of more than {MAX_FORM_FIELDS} fields" in answer.text
    # A form that is not URL-encoded is not parsed either.
    answer = client.post("/ui/jobs/x/reprioritize", content=b"{}", follow_redirects=False,
                         headers={**origin, "Content-Type": "multipart/form-data; boundary=x"})
    assert (answer.status_code, answer.json()["error"]["message"]) == (
        415, "a dashboard form must be sent as application/x-www-form-urlencoded")


def test_a_body_sent_where_no_route_takes_one_is_never_read(service):
    for path in ("/v1/health", "/metrics", "/docs", "/nowhere"):
        status, _, _, asked = asgi_call(service.app, "POST", path, {"host": "127.0.0.1:8080",
                                                                    "content-type": "application/json"}, b"[]" * 1000)
        assert (status, asked) == ({"/nowhere": 404}.get(path, 405), 0), path


def test_an_unauthenticated_json_body_is_not_read(service):
    status, _, _, asked = asgi_call(service.app, "POST", "/v1/submit", {"host": "127.0.0.1:8080",
                                                                         "content-type": "application/json"},
                                    b'"' + b"a" * MIB16 + b'"')
    assert (status, asked) == (401, 0)


# -- parsing and validation in steps ---------------------------------------------------------------------

def test_a_large_body_parses_piecewise_to_what_json_loads_gives():
    body = json.dumps({"queue": "A", "jobSetId": "s", "jobs": [job(f"c{i}") for i in range(3000)],
                       "x": [[1, "a", None, True, {"k": [2.5]}]] * 20000, "s": "é\\\"" * 150000,
                       "t": ["é" * 30000] * 10, "u": "\U0001F600" * 60000}).encode()
    assert len(body) > bounds.PIECEWISE_BYTES
    assert load_json(body) == json.loads(body)


@pytest.mark.parametrize("tail, message", [
    (b"]", "Expecting ',' delimiter at line 1 column 600012"),
    (b"1]}", "Expecting ',' delimiter at line 1 column 600012"),
    (b"}", "Expecting ',' delimiter at line 1 column 600012"),
])
def test_a_large_bodys_error_is_named_at_its_place(tail, message):
    body = b'{"a": [' + b"[1]," * 150000 + b'"x" 2' + tail
    with pytest.raises(BoundsError) as caught:
        load_json(body)
    assert caught.value.message == f"the body is not JSON: {message}"


def test_a_long_string_has_no_structure_and_deep_nesting_is_counted_past_strings():
    longest = bounds.MAX_STRING_BYTES - 2
    assert bounds._structure(b'"' + b"a" * longest + b'"') == (0, 0, 0)
    assert bounds._structure(b'"' + b'\\"[' * (longest // 3) + b'"') == (0, 0, 0)
    assert bounds._structure(b'[[["a]]]]\\"]"]]]') == (3, 3, 0)
    deep = b"[" * 505 + b"]" * 505
    with pytest.raises(BoundsError) as caught:
        load_json(b'"' + b"x" * bounds.WINDOW * 2 + b'", ' + deep)
    assert caught.value.message == "nested 505 levels deep; at most 64"


def test_a_large_job_file_is_validated_in_steps_with_the_same_errors():
    assert VALIDATION_STEP < 250
    jobs = [job(f"c{i}") for i in range(307)]
    good = {"queue": "A", "jobSetId": "s", "jobs": jobs}
    assert job_file_in_steps(good) == JobFile.model_validate(good)
    bad = {**good, "jobs": [*jobs[:250], {**jobs[250], "priority": "7"}, *jobs[251:]], "extra": 1}
    with pytest.raises(ValidationError) as stepped:
        job_file_in_steps(bad)
    with pytest.raises(ValidationError) as whole:
        JobFile.model_validate(bad)
    assert stepped.value.errors(include_url=False) == whole.value.errors(include_url=False)
    assert [e["loc"] for e in stepped.value.errors()] == [("jobs", 250, "priority"), ("extra",)]


def test_a_large_submission_is_refused_with_the_job_named(service):
    client = TestClient(service.app, base_url="http://127.0.0.1:8080")
    jobs = [job(f"c{i}") for i in range(200)]
    jobs[150] = {**jobs[150], "priority": True}
    answer = client.post("/v1/submit", json=job_file("A", "s", jobs), headers={"Authorization": "Bearer alice-token"})
    assert answer.status_code == 422
    assert answer.json()["error"]["message"] == \
        "submission rejected, nothing was submitted: job 150 (clientId 'c150'): priority: Input should be a valid " \
        "integer"
    assert service.store.count_jobs() == 0
    ok = client.post("/v1/submit", json=job_file("A", "s", jobs[:150]), headers={"Authorization": "Bearer alice-token"})
    assert ok.status_code == 200 and len(ok.json()["jobs"]) == 150


def _asgi_json(app, path: str, body: bytes) -> tuple[int, dict, int]:
    headers = {"host": "127.0.0.1:8080", "content-type": "application/json", "authorization": "Bearer alice-token"}
    status, _, content, asked = asgi_call(app, "POST", path, headers, body)
    return status, json.loads(content), asked


def test_a_16_mib_json_string_is_refused_with_its_path_before_the_body_is_decoded(service, monkeypatch):
    def never(body):
        raise AssertionError("the body was decoded")

    monkeypatch.setattr(bounds, "_decoded", never)
    head = b'{"queue": "A", "jobSetId": "s", "jobs": [{"podSpec": {"containers": [{"name": "m", "args": ["x", "'
    body = head + b"a" * (MIB16 - len(head) - 8) + b'"]}]}}]}'
    status, answer, _ = _asgi_json(service.app, "/v1/submit", body)
    assert (status, answer["error"]["field"], answer["error"]["message"]) == (
        413, "jobs[0].podSpec.containers[0].args[1]",
        f"a string of more than {bounds.MAX_STRING_BYTES} bytes; no field takes one (the most a Kubernetes object "
        f"holds)")
    # A body that is one string, and a key that is one: the path is where they stand.
    status, answer, _ = _asgi_json(service.app, "/v1/submit", b'"' + b"a" * (MIB16 - 2) + b'"')
    assert (status, answer["error"]["field"]) == (413, None)
    key = b'{"jobs": [{"labels": {"' + b"k" * (MIB16 - 40) + b'": 1}}]}'
    status, answer, _ = _asgi_json(service.app, "/v1/submit", key)
    assert (status, answer["error"]["field"]) == (413, "jobs[0].labels")
    assert service.store.count_jobs() == 0


def test_a_body_validated_in_one_step_holds_a_bounded_number_of_values(service):
    assert bounds._structure(b'[1, "a,b", {"a": 1, "b": [3, 4]}]') == (3, 3, 4)
    most = service.settings.limits.max_jobs + bounds.VALUES_BEYOND_JOBS
    many_keys = json.dumps({"queue": "A", **{f"k{i}": 1 for i in range(900_000)}}).encode()
    for path in ("/v1/cancel", "/v1/reprioritize"):
        status, answer, _ = _asgi_json(service.app, path, many_keys)
        assert (status, answer["error"]["message"]) == (
            413, f"more than {most} values in one body; this endpoint takes at most {most} "
                 f"(server.maxJobsPerSubmission + {bounds.VALUES_BEYOND_JOBS})")
    # As many job ids as a submission may hold are taken (none of these exists).
    ids = [f"j{i}" for i in range(service.settings.limits.max_jobs)]
    status, answer, _ = _asgi_json(service.app, "/v1/cancel", json.dumps({"queue": "A", "jobIds": ids}).encode())
    assert (status, answer["error"]["message"][:40]) == (404, "no such job in queue 'A': j0, j1, j2, j3")


def test_a_submission_is_validated_in_steps_bounded_by_values(service):
    from flotilla.service.jobspec import VALIDATION_STEP_VALUES, _steps

    assert _steps([1] * 45) == [(0, 20), (20, 40), (40, 45)]
    assert _steps([900, 900, 900, 50_000, 1, 1]) == [(0, 2), (2, 3), (3, 4), (4, 6)]
    assert VALIDATION_STEP_VALUES < bounds.MAX_JOB_VALUES
    # A job alone over MAX_JOB_VALUES, or a file with more than VALUES_BEYOND_JOBS values besides its jobs: 413.
    env = [{"name": f"E{i}", "value": "x"} for i in range(bounds.MAX_JOB_VALUES // 3)]
    big = job_file("A", "s", [job("c0"), job("c1", env=env)])
    status, answer, _ = _asgi_json(service.app, "/v1/submit", json.dumps(big).encode())
    assert (status, answer["error"]["field"], answer["error"]["message"]) == (
        413, "jobs[1]", f"a job of more than {bounds.MAX_JOB_VALUES} values (objects, arrays and their members)")
    extra = {**job_file("A", "s", [job("c0")]), **{f"k{i}": 1 for i in range(900_000)}}
    status, answer, _ = _asgi_json(service.app, "/v1/submit", json.dumps(extra).encode())
    assert (status, answer["error"]["message"]) == (
        413, f"more than {bounds.VALUES_BEYOND_JOBS} values besides the jobs in one submission")
    assert service.store.count_jobs() == 0


def test_an_invalid_job_of_a_large_file_is_validated_again_alone(monkeypatch):
    from flotilla.service import jobspec

    sizes = []
    original = jobspec.JobFile.model_validate.__func__

    def watched(cls, value, *args, **kwargs):
        sizes.append(sum(isinstance(j, dict) for j in value.get("jobs", ())))   # jobs still to be validated
        return original(cls, value, *args, **kwargs)

    monkeypatch.setattr(jobspec.JobFile, "model_validate", classmethod(watched))
    jobs = [job(f"c{i}") for i in range(1000)]
    jobs[999] = {**jobs[999], "priority": "7"}
    with pytest.raises(ValidationError) as caught:
        job_file_in_steps({"queue": "A", "jobSetId": "s", "jobs": jobs})
    assert [e["loc"] for e in caught.value.errors()] == [("jobs", 999, "priority")]
    assert sizes == [1]


def test_a_string_of_the_longest_length_is_parsed():
    value = "é" * (bounds.MAX_STRING_BYTES // 2 - 1)    # two bytes each, the quotes make it the limit
    assert len(json.dumps(value, ensure_ascii=False).encode()) == bounds.MAX_STRING_BYTES
    assert load_json(json.dumps({"a": [value]}, ensure_ascii=False).encode()) == {"a": [value]}
    with pytest.raises(BoundsError) as caught:
        load_json(json.dumps({"a": [value + "x"]}, ensure_ascii=False).encode())
    assert (caught.value.status, caught.value.field) == (413, "a[0]")


@pytest.mark.parametrize("shift", [-2, -1, 0, 1, 2])
@pytest.mark.parametrize("bad", [b"\xff", b"\xc3", b"\xe2\x82", b"\xc3("])
def test_a_large_body_is_decoded_a_window_at_a_time_with_the_byte_named(shift, bad):
    body = b'"' + b"a" * (bounds.WINDOW + shift - 3) + "é".encode() + bad + "é".encode() * 40000 + b'"'
    with pytest.raises(UnicodeDecodeError) as whole:
        body.decode("utf-8")
    with pytest.raises(BoundsError) as caught:
        load_json(body)
    assert caught.value.message == f"the body is not UTF-8 (byte {whole.value.start})"
    good = b'"' + b"a" * (bounds.WINDOW + shift - 3) + "é".encode() * 40000 + b'"'
    assert load_json(good) == good[1:-1].decode()


def test_a_10000_job_submission_is_stored_whole_with_full_collections_deferred_meanwhile(service, monkeypatch):
    import gc

    from flotilla.service import collection, jobspec

    seen = []
    original = jobspec._JOB_ITEMS

    class Watched:
        def validate_python(self, value):
            seen.append((collection.deferring(), gc.get_threshold()[2]))
            return original.validate_python(value)

    monkeypatch.setattr(jobspec, "_JOB_ITEMS", Watched())
    before = gc.get_threshold()
    body = json.dumps(job_file("A", "big", [job(f"c{i}", cpu="100m") for i in range(10_000)])).encode()
    status, answer, _ = _asgi_json(service.app, "/v1/submit", body)
    assert status == 200
    assert [j["clientId"] for j in answer["jobs"]] == [f"c{i}" for i in range(10_000)]
    assert service.store.count_jobs() == 10_000
    assert len(seen) == 10_000 // VALIDATION_STEP
    assert set(seen) == {(True, collection._OUT_OF_REACH)}
    assert (collection.deferring(), gc.get_threshold()) == (False, before)


def test_health_answers_while_a_large_submission_is_held_mid_validation(service, monkeypatch):
    import threading

    import httpx

    from flotilla.service import jobspec

    reached, release = threading.Event(), threading.Event()
    original, calls = jobspec._JOB_ITEMS, []

    class Held:
        def validate_python(self, value):
            calls.append(len(value))
            if len(calls) == 3:   # a third of the way: the worker thread waits here, holding the submission
                reached.set()
                assert release.wait(60)
            return original.validate_python(value)

    monkeypatch.setattr(jobspec, "_JOB_ITEMS", Held())
    jobs = [job(f"c{i}") for i in range(VALIDATION_STEP * 5)]

    async def scenario():
        transport = httpx.ASGITransport(app=service.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8080") as client:
            alice = {"Authorization": "Bearer alice-token"}
            submit = asyncio.ensure_future(client.post("/v1/submit", json=job_file("A", "held", jobs), headers=alice))
            assert await asyncio.to_thread(reached.wait, 60)
            health = await client.get("/v1/health")
            during = (health.status_code, health.json()["ok"], len(calls), submit.done())
            release.set()
            answer = await submit
            return during, answer.status_code, len(answer.json()["jobs"])

    try:
        during, status, stored = asyncio.run(scenario())
    finally:
        release.set()
    assert during == (200, True, 3, False)
    assert (status, stored, calls) == (200, VALIDATION_STEP * 5, [VALIDATION_STEP] * 5)


def test_full_collections_wait_for_the_last_large_body_and_at_most_the_longest_deferral(monkeypatch):
    import gc

    from flotilla.service import collection

    now = [1000.0]
    monkeypatch.setattr(collection.time, "monotonic", lambda: now[0])
    before = gc.get_threshold()
    outer = collection.full_collections_deferred()
    outer.__enter__()
    with collection.full_collections_deferred():
        assert gc.get_threshold() == (*before[:2], collection._OUT_OF_REACH)
    assert collection.deferring()              # the other body is still being handled
    outer.__exit__(None, None, None)
    assert (collection.deferring(), gc.get_threshold()) == (False, before)
    # Bodies that keep overlapping defer full collections for at most MAX_DEFERRAL seconds.
    first = collection.full_collections_deferred()
    first.__enter__()
    now[0] += collection.MAX_DEFERRAL + 1
    with collection.full_collections_deferred():
        pass
    assert (collection.deferring(), gc.get_threshold()) == (False, before)
    with collection.full_collections_deferred():   # not deferred again until every body in flight is done
        assert gc.get_threshold() == before
    first.__exit__(None, None, None)
    with collection.full_collections_deferred():
        assert collection.deferring()
    assert gc.get_threshold() == before


# -- item 2: a request's headers have a deadline ----------------------------------------------------------

def _serve_with_header_timeout(tmp_path, timeout: str):
    from tests.support.serve import Server
    from tests.support.e2e import CONFIG as E2E

    return Server(tmp_path, E2E.replace('server: {listen: "127.0.0.1:PORT"}',
                                        f'server: {{listen: "127.0.0.1:PORT", headerTimeout: {timeout}}}')).start(timeout=180)


def _read_all(sock) -> bytes:
    out = b""
    while True:
        chunk = sock.recv(4096)
        if not chunk:
            return out
        out += chunk


def test_headers_sent_one_byte_a_second_get_408_and_the_connection_closes(tmp_path):
    import http.client
    import select
    import socket
    import time

    srv = _serve_with_header_timeout(tmp_path, "2s")
    try:
        request = b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100
        with socket.create_connection(("127.0.0.1", srv.port), timeout=60) as slow:
            sent = 0
            for byte in request:   # one byte a second: the headers never complete within 2 s
                if select.select([slow], [], [], 0)[0]:   # answered (or closed): stop sending
                    break
                try:
                    slow.sendall(bytes([byte]))
                except OSError:
                    break
                sent += 1
                time.sleep(1)
            try:
                answer = _read_all(slow)
            except ConnectionResetError:   # a byte crossed the close: the kernel resets instead of reading it
                answer = b"(connection reset)"
        assert answer == b"(connection reset)" or (
            answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
            and answer.endswith(b"\r\n\r\nrequest headers not complete within the limit")), answer
        assert 1 <= sent < len(request)
        # A connection that sends nothing at all is closed alike.
        with socket.create_connection(("127.0.0.1", srv.port), timeout=60) as idle:
            assert _read_all(idle).startswith(b"HTTP/1.1 408 Request Timeout\r\n")
        # Requests whose headers arrive at once are served, and so is a second one on the same connection.
        quick = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
        try:
            for _ in range(2):
                quick.request("GET", "/v1/health")
                answer = quick.getresponse()
                assert (answer.status, json.loads(answer.read())["ok"]) == (200, True)
        finally:
            quick.close()
    finally:
        srv.kill()


def test_the_header_timeout_is_a_positive_duration():
    from flotilla.config import ConfigError

    assert parse_config("server: {headerTimeout: 3s}\n" + CONFIG, "t.yaml").server.header_timeout == 3.0
    assert parse_config(CONFIG, "t.yaml").server.header_timeout == 10.0
    with pytest.raises(ConfigError) as caught:
        parse_config("server: {headerTimeout: 0s}\n" + CONFIG, "t.yaml")
    assert "server.headerTimeout" in str(caught.value)
