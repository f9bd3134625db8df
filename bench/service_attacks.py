"""A real ``flotilla serve`` under attack: latency of /v1/health and of a small submit during each attack.

Starts ``flotilla serve`` (SQLite, two simulated clusters, static tokens)
on a free port, then runs each attack ``--repeat`` times while two probes
run beside it: ``GET /v1/health`` every 20 ms (no token) and a one-job
submit by another user every 100 ms. It prints each probe's p50, p99 and
maximum during the attack, and the attack's own answer. A benchmark, not a
test: it asserts nothing (docs/performance.md records its figures).

Attacks:

* ``form``: 16 MiB of ``a=1&`` to ``/ui/jobs/x/reprioritize``, unauthenticated;
* ``string``: a 16 MiB JSON string to ``/v1/submit``, authenticated;
* ``jobs``: a 10,000-job submission, authenticated;
* ``streams``: 1,000 idle watch streams opened by one user (those over the per-user cap are refused), and
  meanwhile another user's small requests (``GET /v1/queues/B``) as the probe. Its figures are printed for
  the whole attack, then apart for the 1,000 requests arriving (``opening``) and for the open streams held
  idle (``held``).

Each attack runs ``--repeat`` times and for at least ``--seconds`` (again and
again until then), so that a quick refusal still has probes around it. The
last lines are the table rows of docs/performance.md, with the load average.

    python bench/service_attacks.py [--repeat 1] [--seconds 3] [--attacks form,string,jobs,streams]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import httpx  # noqa: E402

from serve_process import Server  # noqa: E402
from service_fixtures import CONFIG, job, job_file  # noqa: E402

MIB16 = 16 * 1024 * 1024
#: Phases of the last attack that has some, by name: (start, end) on ``time.perf_counter``.
PHASES: dict[str, tuple[float, float]] = {}


class Probe(threading.Thread):
    """Sends one request every ``every`` seconds and records each one's latency (seconds)."""

    def __init__(self, url: str, every: float, request):
        super().__init__(daemon=True)
        self.client = httpx.Client(base_url=url, timeout=30)
        self.every = every
        self.request = request
        self.samples: list[tuple[float, float]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            started = time.perf_counter()
            try:
                self.request(self.client)
            except httpx.HTTPError:
                pass
            took = time.perf_counter() - started
            self.samples.append((started, took))
            self.stopping.wait(max(0.0, self.every - took))

    def between(self, start: float, end: float, begun_within: bool = False) -> list[float]:
        """The latencies of the requests in flight at some time between ``start`` and ``end`` (``begun_within``:
        of those sent between them)."""
        if begun_within:
            return [took for at, took in self.samples if start <= at <= end]
        return [took for at, took in self.samples if at <= end and at + took >= start]


def percentiles(samples: list[float]) -> tuple[float, float, float]:
    """(p50, p99, max) in milliseconds."""
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return 1000 * statistics.median(ordered), 1000 * p99, 1000 * ordered[-1]


def figures(samples: list[float]) -> str:
    if not samples:
        return "no samples"
    p50, p99, most = percentiles(samples)
    return f"p50 {p50:6.1f} ms  p99 {p99:6.1f} ms  max {most:6.1f} ms  (n={len(samples)})"


def cell(samples: list[float]) -> str:
    """``p50 / p99 ms`` as the table of docs/performance.md writes it."""
    if not samples:
        return "no samples"
    p50, p99, _ = percentiles(samples)
    return f"{p50:,.0f} / {p99:,.0f} ms"


TITLES = {"form": "16 MiB form, no login", "string": "16 MiB JSON string, logged in",
          "jobs": "10,000-job submission", "streams": "1,000 idle streams of one user"}


def raw_post(port: int, path: str, headers: dict, body: bytes) -> str:
    """POST over a plain socket (the server may answer and close before the body is sent): its status line."""
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {len(body)}\r\n{head}\r\n"
                     .encode())
        try:
            sock.sendall(body)
        except OSError:
            pass
        answer = b""
        try:
            while b"\r\n" not in answer:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                answer += chunk
        except OSError:
            pass
    return answer.split(b"\r\n", 1)[0].decode(errors="replace") or "(connection closed)"


def attack_form(srv: Server) -> str:
    return raw_post(srv.port, "/ui/jobs/x/reprioritize", {"Content-Type": "application/x-www-form-urlencoded"},
                    b"a=1&" * (MIB16 // 4))


def attack_string(srv: Server) -> str:
    return raw_post(srv.port, "/v1/submit", {"Content-Type": "application/json",
                                             "Authorization": "Bearer alice-token"},
                    b'"' + b"a" * (MIB16 - 16) + b'"')


def attack_jobs(srv: Server) -> str:
    body = json.dumps(job_file("A", f"big-{time.monotonic_ns()}", [job(f"c{i}", cpu="100") for i in range(10_000)]))
    return raw_post(srv.port, "/v1/submit", {"Content-Type": "application/json",
                                             "Authorization": "Bearer alice-token"}, body.encode())


def attack_streams(srv: Server, count: int = 1000, hold: float = 10.0) -> str:
    """``count`` idle watch streams of alice's, held ``hold`` seconds: how many were refused (429)."""
    socks, refused = [], 0
    opening = time.perf_counter()
    request = (f"GET /v1/queues/A/jobsets/idle/events?follow=true HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\n"
               f"Authorization: Bearer alice-token\r\n\r\n").encode()
    for _ in range(count):
        try:
            sock = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
            sock.sendall(request)
            socks.append(sock)
        except OSError:
            refused += 1
    opened = 0
    for sock in socks:
        try:
            sock.settimeout(30)
            status = sock.recv(64).split(b"\r\n", 1)[0]
            if b" 429 " in status:
                refused += 1
            else:
                opened += 1
        except OSError:
            refused += 1
    held = time.perf_counter()
    time.sleep(hold)
    PHASES["opening"] = (opening, held)
    PHASES["held"] = (held, time.perf_counter())
    for sock in socks:
        sock.close()
    return f"{opened} streams open, {refused} refused"


ATTACKS = {"form": attack_form, "string": attack_string, "jobs": attack_jobs, "streams": attack_streams}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=3.0, help="run each attack at least this long")
    parser.add_argument("--attacks", default=",".join(ATTACKS))
    parser.add_argument("--watch-per-user", type=int, default=None,
                        help="server.streams.watchPerUser (default: the service's, 100); 1000 holds every stream open")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        config = CONFIG.replace("cycle: {period: 0.2s}", "cycle: {period: 1s}") + \
            'server: {listen: "127.0.0.1:PORT"' + \
            (f", streams: {{watchPerUser: {args.watch_per_user}}}" if args.watch_per_user else "") + \
            '}\nstore: {url: "sqlite:///DB"}\n'
        srv = Server(Path(tmp), config).start(timeout=300)
        try:
            health = Probe(srv.url, 0.02, lambda c: c.get("/v1/health"))
            submit = Probe(srv.url, 0.1, lambda c: c.post(
                "/v1/submit", json=job_file("B", "probe", [job(cpu="100")]),
                headers={"Authorization": "Bearer bob-token"}))
            other = Probe(srv.url, 0.05, lambda c: c.get("/v1/queues/B", headers={"Authorization": "Bearer bob-token"}))
            for probe in (health, submit, other):
                probe.start()
            time.sleep(2)
            start = time.perf_counter()
            time.sleep(3)
            end = time.perf_counter()
            print(f"{'quiet':>8}  health {figures(health.between(start, end))}")
            print(f"{'':>8}  submit {figures(submit.between(start, end))}")
            print(f"{'':>8}  other  {figures(other.between(start, end))}")
            rows.append(f"| none ({end - start:.0f} s) | {cell(health.between(start, end))} | "
                        f"{cell(submit.between(start, end))} | {cell(other.between(start, end))} | |")
            for name in args.attacks.split(","):
                answers = []
                PHASES.clear()
                start = time.perf_counter()
                while len(answers) < args.repeat or time.perf_counter() - start < args.seconds:
                    answers.append(ATTACKS[name](srv))
                end = time.perf_counter()
                print(f"{name:>8}  health {figures(health.between(start, end))}")
                print(f"{'':>8}  submit {figures(submit.between(start, end))}")
                print(f"{'':>8}  other  {figures(other.between(start, end))}")
                answered = f"{'; '.join(sorted(set(answers)))} ({len(answers)} in {end - start:.1f} s)"
                print(f"{'':>8}  attack answered: {answered}")
                rows.append(f"| {TITLES[name]} | {cell(health.between(start, end))} | "
                            f"{cell(submit.between(start, end))} | {cell(other.between(start, end))} | "
                            f"{answered.replace('HTTP/1.1 ', '')} |")
                for phase, (begun, ended) in PHASES.items():   # the last repeat's; "held": requests sent then
                    within = phase == "held"
                    print(f"{phase:>8}  health {figures(health.between(begun, ended, within))}")
                    print(f"{'':>8}  other  {figures(other.between(begun, ended, within))}  ({ended - begun:.1f} s)")
            for probe in (health, submit, other):
                probe.stopping.set()
                probe.join()
        finally:
            srv.kill()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nload average (1, 5, 15 min) at the end: {load}")
    print("| attack | health p50 / p99 | small submit p50 / p99 | other user's GET p50 / p99 | attack answered |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
