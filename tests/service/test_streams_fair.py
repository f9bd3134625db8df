"""Issue 30, fair streams: idle streams cost nothing, and every stream ends when its token stops authenticating.

* the stream hub judges a token once for all the streams that carry it, and
  reads the store once for all of them (counted here, exactly);
* a watch stream and a followed log each end after their token is revoked
  (a config reload), the watch stream saying why in its last line;
* a followed log with no output ends after ``followIdleTimeout``;
* a followed log that ends, however it ends, logs no ``api.internal_error``;
* one user's 101st watch stream is answered 429 naming the cap.

The followed logs are real urllib3 answers from a stand-in for the API
server's ``pods/log`` (a loopback HTTP server streaming chunks), served by a
real uvicorn in a thread, so the client's reads have real timeouts.
"""

from __future__ import annotations

import asyncio
import json
import queue
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
import structlog
import uvicorn
from kubernetes.client import Configuration

from flotilla.kubernetes.client import KubeClient
from flotilla.service.auth import Authenticator, Identity
from flotilla.service.logs import PodRef
from flotilla.service.streams import StreamHub
from tests.support.serve import Server, free_port
from tests.support.service import CONFIG, headers, job, job_file
from tests.support.auth import ALICE, _service

#: Generous: a stream that should end has this long to do so (it ends within about 0.2 s).
ENDS_WITHIN = 5.0


# -- the hub, counted --------------------------------------------------------------------------
class CountingStore:
    def __init__(self):
        self.writes = 0
        self.reads: list[tuple] = []
        self.queued: list[dict] = []

    def last_event_id(self) -> int:
        return 7

    def all_events(self, after: int, limit: int) -> list[dict]:
        self.reads.append(("events", after))
        out, self.queued = [e for e in self.queued if e["id"] > after], []
        return out

    def get_queue(self, name: str):
        from flotilla.service.settings import QueueSpec

        self.reads.append(("queue", name))
        return QueueSpec(name, 1.0, {}, ("alice",), (), ())


class CountingAuth(Authenticator):
    def __init__(self):
        super().__init__()
        self.verified: list[str | None] = []
        self.revoked = False

    def verify(self, authorization):
        from flotilla.service.auth import Unauthenticated

        self.verified.append(authorization)
        if self.revoked:
            raise Unauthenticated("unknown bearer token")
        return Identity("alice", frozenset())


def test_the_hub_judges_a_token_once_for_all_its_streams_and_reads_the_store_once_for_all():
    store, auth = CountingStore(), CountingAuth()
    hub = StreamHub(store, auth, open_access=False, stopping=lambda: False)

    async def scenario():
        alice = Identity("alice", frozenset())
        subs = [await hub.subscribe("Bearer alice-token", alice, ("A", "w")) for _ in range(50)]
        await asyncio.sleep(0.5)   # idle: no write, no reload, no expiry
        idle = (list(auth.verified), list(store.reads), hub.trips)
        store.queued = [{"id": 8, "queue": "A", "jobSet": "w", "kind": "submitted"},
                        {"id": 9, "queue": "A", "jobSet": "other", "kind": "submitted"}]
        store.writes += 1
        await asyncio.wait_for(subs[-1].wait(), ENDS_WITHIN)
        got = [sub.take() for sub in subs]
        reads = list(store.reads)
        auth.revoked = True
        auth.configure((), (), None)   # a reload: the generation moves
        await asyncio.wait_for(subs[0].wait(), ENDS_WITHIN)
        await asyncio.sleep(0.2)
        return idle, got, reads, subs

    idle, got, reads, subs = asyncio.run(scenario())
    assert idle == ([], [], 0)
    assert got == [([{"id": 8, "queue": "A", "jobSet": "w", "kind": "submitted"}], False)] * 50
    assert reads == [("events", 7), ("queue", "A")]
    assert auth.verified == ["Bearer alice-token"]   # once, for the 50 streams that carry it
    assert {sub.ended for sub in subs} == {"the bearer token no longer authenticates (unknown bearer token)"}


# -- a real server in a thread, a stand-in API server for pods/log -----------------------------
class KubeletLog:
    """``pods/log?follow=true`` of one pod: what is put in ``chunks`` is sent (None ends the log)."""

    def __init__(self):
        self.chunks: queue.Queue = queue.Queue()
        self.stop = threading.Event()
        source = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    while not source.stop.is_set():
                        try:
                            chunk = source.chunks.get(timeout=0.05)
                        except queue.Empty:
                            continue
                        if chunk is None:
                            break
                        self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except OSError:
                    pass
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.client = KubeClient(Configuration(host=f"http://127.0.0.1:{self.server.server_address[1]}"))

    def close(self):
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()
        self.client.close()


@pytest.fixture
def served(tmp_path):
    """A service (static tokens, reloadable config) on a real uvicorn; its logs come from a KubeletLog."""
    text = CONFIG.replace("cycle: {period: 0.2s}",
                          "cycle: {period: 0.2s}\nserver: {streams: {followIdleTimeout: 1s}}")
    service, path = _service(tmp_path, text)
    kubelet = KubeletLog()
    service.app.state.pod_logs.locate = lambda job, pod, container=None: (kubelet.client, PodRef("c", "ns", "p", "main"))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(service.app, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=ENDS_WITHIN)
    answer = client.post("/v1/submit", json=job_file("A", "w", [job("x")]), headers=headers("alice"))
    job_id = answer.json()["jobs"][0]["id"]
    try:
        yield client, job_id, kubelet, service, path, text
    finally:
        client.close()
        server.should_exit = True
        thread.join(10)
        kubelet.close()
        service.close()


def follow(client: httpx.Client, job_id: str):
    return client.stream("GET", f"/v1/jobs/{job_id}/logs", params={"follow": "true"}, headers=headers("alice"))


def internal_errors(logs: list[dict]) -> list[dict]:
    return [entry for entry in logs if entry["event"] == "api.internal_error"]


def test_a_follow_ends_with_its_container_and_logs_no_internal_error(served):
    client, job_id, kubelet, _, _, _ = served
    with structlog.testing.capture_logs() as logs:
        kubelet.chunks.put(b"one\n")
        with follow(client, job_id) as stream:
            assert stream.status_code == 200
            parts = stream.iter_bytes()
            first = next(parts)
            kubelet.chunks.put(b"two\n")
            kubelet.chunks.put(None)   # the container ends
            rest = b"".join(parts)     # within the read timeout, or httpx raises
        time.sleep(0.5)
    assert first + rest == b"one\ntwo\n"
    assert internal_errors(logs) == []
    for _ in range(5):   # followsPerUser is 4: five follows in a row each get a slot (each was given back)
        kubelet.chunks.put(b"again\n")
        kubelet.chunks.put(None)
        with follow(client, job_id) as stream:
            assert (stream.status_code, stream.read()) == (200, b"again\n")


def test_an_idle_follow_ends_after_the_idle_timeout(served):
    client, job_id, kubelet, _, _, _ = served
    with structlog.testing.capture_logs() as logs:
        kubelet.chunks.put(b"only line\n")
        started = time.monotonic()
        with follow(client, job_id) as stream:
            body = stream.read()   # the idle timeout (1 s) ends it, well within the read timeout
        took = time.monotonic() - started
        time.sleep(0.3)
    assert body == b"only line\n"
    assert took >= 1.0   # not before its idle time
    assert internal_errors(logs) == []


def test_a_follow_and_a_watch_stream_end_when_their_token_is_revoked(served):
    client, job_id, kubelet, service, path, text = served
    with structlog.testing.capture_logs() as logs:
        kubelet.chunks.put(b"before\n")
        with follow(client, job_id) as logged, client.stream(
                "GET", "/v1/queues/A/jobsets/w/events", params={"follow": "true"}, headers=headers("alice")) as watched:
            assert (logged.status_code, watched.status_code) == (200, 200)
            log_parts, lines = logged.iter_bytes(), watched.iter_lines()
            assert next(log_parts) == b"before\n"
            assert json.loads(next(lines))["kind"] == "submitted"
            path.write_text(text.replace(ALICE, ""))
            assert service.reloader.check() is True
            rest = b"".join(log_parts)          # both end: httpx raises a ReadTimeout after 5 s otherwise
            watched_rest = [json.loads(line) for line in lines if line.strip()]
        time.sleep(0.3)
    assert rest == b""
    assert [(e["kind"], e.get("reason")) for e in watched_rest][-1] == (
        "end", "the bearer token no longer authenticates (unknown bearer token)")
    assert internal_errors(logs) == []
    assert service.app.state.stream_hubs.open_streams() == 0


def test_the_101st_watch_stream_of_a_user_is_refused_with_the_cap(tmp_path):
    srv = Server(tmp_path, CONFIG.replace("cycle: {period: 0.2s}",
                                          "cycle: {period: 0.2s}\nserver: {listen: 127.0.0.1:PORT}\n"
                                          "store: {url: 'sqlite:///DB'}")).start()
    socks = []
    try:
        request = (f"GET /v1/queues/A/jobsets/idle/events?follow=true HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\n"
                   f"Authorization: Bearer alice-token\r\n\r\n").encode()
        statuses = []
        for _ in range(100):
            sock = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
            sock.sendall(request)
            socks.append(sock)
            statuses.append(sock.recv(64).split(b"\r\n", 1)[0])
        assert set(statuses) == {b"HTTP/1.1 200 OK"}
        with srv.http("alice") as alice, srv.http("bob") as bob:
            r = alice.get("/v1/queues/A/jobsets/idle/events", params={"follow": "true"})
            assert (r.status_code, r.json()["error"]["message"]) == (
                429, "user 'alice' has 100 watch streams open already, the most one user may "
                     "(server.streams.watchPerUser: 100); close one and try again")
            with bob.stream("GET", "/v1/queues/B/jobsets/idle/events", params={"follow": "true"},
                            timeout=httpx.Timeout(30.0)) as his:
                assert his.status_code == 200
    finally:
        for sock in socks:
            sock.close()
        srv.kill()


def test_a_static_token_is_judged_on_the_event_loop_unless_the_table_is_large():
    from flotilla.service.auth import QUICK_TABLE, Unauthenticated
    from flotilla.service.settings import TokenSpec

    small = Authenticator([TokenSpec("alice", ("ml",), token="alice-token")])
    assert small.verify_quickly("Bearer alice-token") == Identity("alice", frozenset({"ml"}))
    with pytest.raises(Unauthenticated, match="^unknown bearer token$"):
        small.verify_quickly("Bearer nobody")
    with pytest.raises(Unauthenticated, match="^missing bearer token$"):
        small.verify_quickly(None)
    large = Authenticator([TokenSpec(f"u{i}", token=f"t{i}") for i in range(QUICK_TABLE + 1)])
    assert large.verify_quickly("Bearer t0") is None   # compared whole, in a thread
    assert large.verify("Bearer t0") == Identity("u0", frozenset())
