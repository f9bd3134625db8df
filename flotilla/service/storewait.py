"""Start-up before the store answers: wait for it, within a bound, answering the probes meanwhile.

In a Kubernetes install the API and scheduler pods often start before
PostgreSQL accepts connections. A process that exited then would be
restarted by the kubelet with a growing back-off, and the install would take
longer and show restarts; so ``serve`` retries the store for ``--store-wait``
(0.5 s doubling to 5 s between attempts) before it builds anything on it.

What is waited for: the driver's connection errors, where no server
answered or one answered that it cannot take us yet - connection refused,
a name that does not resolve (yet), a timeout, a server starting up or
shutting down, too many clients. What is not: a URL that does not parse,
an unknown dialect, or a server that answers and refuses us (authentication
failed, no such role or database, no ``pg_hba.conf`` entry). No wait mends
a configuration error: start-up ends at once with one line.

While waiting (and while the service is built on the store afterwards),
:class:`StartupProbes` listens on the service's address: ``/healthz``
answers 200, so a liveness probe does not restart the process for waiting,
and ``/readyz`` 503 with the reason, as the service's own probes would. It
closes its socket right before the service's server binds the same address.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

import structlog

log = structlog.get_logger("flotilla.service")

#: Seconds between attempts: the first, the factor, the most.
FIRST_DELAY, FACTOR, MAX_DELAY = 0.5, 2.0, 5.0
#: One log line per this many seconds of failing attempts with the same error (or at once when it changes).
LOG_EVERY = 30.0
#: Seconds one attempt may take to connect when the URL does not set ``connect_timeout``.
CONNECT_TIMEOUT = 5

#: What a server that answers says when it cannot take a connection *yet*: waited for like a refused connection.
_BUSY = ("the database system is starting up", "the database system is shutting down",
         "the database system is in recovery mode", "the database system is not yet accepting connections",
         "the database system is not accepting connections", "too many clients already",
         "remaining connection slots are reserved")


class StoreUnavailable(Exception):
    """The store refused us, or did not answer within the wait (``--store-wait``): one line naming it."""


def store_address(url: str) -> str:
    """``host:port`` of a store URL (never its password); PostgreSQL's default port when the URL has none."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    host = parsed.host or parsed.query.get("host") or "localhost"
    if isinstance(host, tuple):
        host = ",".join(host)
    return f"{host}:{parsed.port or 5432}"


def one_line(exc: BaseException) -> str:
    """The driver's message (not SQLAlchemy's wrapper and its link) with its lines joined."""
    text = str(getattr(exc, "orig", None) or exc)
    return " ".join(text.split())


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc``, raised while connecting, is one the store's coming up may mend (see the module doc)."""
    from sqlalchemy.exc import InterfaceError, OperationalError

    if not isinstance(exc, (OperationalError, InterfaceError)):
        return False        # a bad URL, an unknown dialect or driver
    text = one_line(exc)
    if "FATAL:" not in text:
        return True         # no server answered: refused, unresolved, timed out, reset
    return any(busy in text for busy in _BUSY)


def probe(url: str) -> None:
    """Open one connection to ``url`` and close it; raises what the driver raised."""
    import sqlalchemy as sa
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    args = {}
    if parsed.get_backend_name() == "postgresql" and "connect_timeout" not in parsed.query:
        args["connect_timeout"] = CONNECT_TIMEOUT
    engine = sa.create_engine(parsed, poolclass=sa.pool.NullPool, connect_args=args, hide_parameters=True)
    try:
        with engine.connect():
            pass
    finally:
        engine.dispose()


def wait_for_store(url: str, budget: float, *, on_wait: Callable[[str], None] | None = None,
                   connect: Callable[[str], None] = probe, sleep: Callable[[float], None] = time.sleep,
                   clock: Callable[[], float] = time.monotonic) -> int:
    """Return once ``url`` takes a connection; the attempts it took.

    Retries the errors :func:`unreachable` accepts for ``budget`` seconds
    (0: one attempt), then raises :class:`StoreUnavailable`; any other error
    is raised at once (the driver's as :class:`StoreUnavailable`). ``on_wait``
    hears each failed attempt's reason.
    """
    from sqlalchemy.exc import DBAPIError

    address = store_address(url)
    started = clock()
    delay = FIRST_DELAY
    attempts = 0
    logged_error, logged_at, group = None, started, 0
    while True:
        attempts += 1
        group += 1
        try:
            connect(url)
            if attempts > 1:
                log.warning("store.reachable", store=address, attempts=attempts, waited=f"{clock() - started:.1f}s")
            return attempts
        except DBAPIError as exc:
            if not unreachable(exc):
                raise StoreUnavailable(f"store {address}: {one_line(exc)}") from None
            error = one_line(exc)
        waited = clock() - started
        if waited >= budget:
            if budget <= 0:
                raise StoreUnavailable(f"store {address} unreachable: {error}")
            raise StoreUnavailable(f"store {address} unreachable after {waited:.0f}s (--store-wait {budget:g}s), "
                                   f"{attempts} attempts; last: {error}")
        if on_wait is not None:
            on_wait(f"store unreachable: {address}: {error}")
        now = clock()
        if error != logged_error or now - logged_at >= LOG_EVERY:
            log.warning("store.unreachable", store=address, error=error, attempts=group,
                        waited=f"{waited:.1f}s", gives_up_in=f"{max(0.0, budget - waited):.0f}s")
            logged_error, logged_at, group = error, now, 0
        sleep(min(delay, max(0.0, budget - waited)))
        delay = min(delay * FACTOR, MAX_DELAY)


class StartupProbes:
    """``/healthz`` (200) and ``/readyz`` (503, ``reason``) on ``host:port`` until the service's server takes over."""

    def __init__(self, host: str, port: int, role: str):
        self.role = role
        self.reason = "starting"
        probes = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = self.path.split("?", 1)[0]
                if path == "/healthz":
                    status, body = 200, {"ok": True, "role": probes.role}
                elif path == "/readyz":
                    status, body = 503, {"ready": False, "reason": probes.reason, "role": probes.role}
                else:
                    status, body = 503, {"error": {"code": "starting", "message": probes.reason}}
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format, *args) -> None:  # probes every few seconds: not worth a line each
                pass

        class Server(ThreadingHTTPServer):
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
            daemon_threads = True

        try:
            self._server = Server((host, port), Handler)
        except OSError as exc:
            raise ValueError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="startup-probes", daemon=True)
        self._thread.start()

    def set_reason(self, reason: str) -> None:
        self.reason = reason

    def close(self) -> None:
        """Stop answering and free the address (idempotent)."""
        if self._thread is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()
            self._thread = None
