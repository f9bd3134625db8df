"""``flotilla serve``: the API (uvicorn) and the scheduling loop (a thread) in one process.

Shutdown (SIGTERM or SIGINT): the server stops accepting connections, open
watch streams end, requests in flight finish, the cycle in progress
finishes (no new one starts), the store is closed, exit status 0. Nothing
is kept in memory that the store does not have, so a restart (even after
``kill -9``) picks up where the store says: queued jobs are scheduled,
leased ones are renewed by the clusters that still run them or expire
after ``lease.timeout`` and run again.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from dataclasses import dataclass

import structlog
import uvicorn

from flotilla.service.api import create_app
from flotilla.service.loop import ServiceLoop, service_backends
from flotilla.service.settings import ServiceSettings, from_config
from flotilla.service.store import Store

log = structlog.get_logger("flotilla.service")


@dataclass
class Service:
    settings: ServiceSettings
    store: Store
    loop: ServiceLoop
    app: object
    shutting_down: threading.Event

    def close(self) -> None:
        self.loop.stop()
        for backend in self.loop.backends.values():
            close = getattr(backend, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:  # pragma: no cover - best effort on the way out
                    log.exception("backend.close_failed")
        self.store.close()


def build_service(config, scheduler, *, store_url: str | None = None, admin_endpoints: bool = False,
                  backends: dict | None = None, seed: int | None = None) -> Service:
    """Everything ``serve`` runs, built from a loaded config and a :class:`Scheduler` for it."""
    settings = from_config(config)
    store = Store(store_url or settings.store_url)
    store.sync_queues(settings.queues)
    if backends is None:
        backends = service_backends(config, scheduler.pm)
    loop = ServiceLoop(store, settings, scheduler, backends, seed=seed)
    shutting_down = threading.Event()
    app = create_app(store, settings, loop, admin_endpoints=admin_endpoints, shutting_down=shutting_down)
    return Service(settings, store, loop, app, shutting_down)


class _Server(uvicorn.Server):
    """uvicorn, telling the loop and the watch streams as soon as a signal arrives."""

    def __init__(self, config: uvicorn.Config, service: Service):
        super().__init__(config)
        self.service = service

    def handle_exit(self, sig, frame) -> None:
        self.service.shutting_down.set()
        self.service.loop._stop.set()          # finish the cycle in progress, start no other
        super().handle_exit(sig, frame)


def split_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {listen!r}")
    return host.strip("[]"), int(port)


def run(service: Service, listen: str | None = None, *, access_log: bool = False) -> int:
    host, port = split_listen(listen or service.settings.listen)
    if not service.settings.tokens:
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"auth.tokens is empty: refusing to serve without authentication on {host}; "
                             f"add tokens or listen on 127.0.0.1")
        print("flotilla serve: auth.tokens is empty: every local request acts as an administrator",
              file=sys.stderr, flush=True)
    config = uvicorn.Config(service.app, host=host, port=port, log_level="warning", access_log=access_log,
                            timeout_graceful_shutdown=5, lifespan="off", backlog=2048)
    server = _Server(config, service)

    def on_signal(signum, frame) -> None:
        # uvicorn re-raises the signal it caught once it has shut down; this handler
        # receives it then, so that the loop and the store are closed before exiting.
        service.shutting_down.set()
        service.loop._stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    service.loop.start()
    print(f"flotilla serve: listening on http://{host}:{port} (store {redact(service.store.url)}, "
          f"clusters {', '.join(sorted(service.loop.backends)) or 'none'})", file=sys.stderr, flush=True)
    started = time.monotonic()
    try:
        server.run()
    finally:
        service.shutting_down.set()
        service.close()
        print(f"flotilla serve: stopped after {time.monotonic() - started:.1f}s", file=sys.stderr, flush=True)
    return 0 if server.started else 1


def redact(url: str) -> str:
    """A store URL without its password."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # pragma: no cover
        return url
