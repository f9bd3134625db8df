"""``flotilla serve``: the API (uvicorn) and the scheduling loop (a thread), or one of them (``--role``).

Shutdown (SIGTERM or SIGINT): the server stops accepting connections, open
watch streams end, requests in flight finish, the cycle in progress
finishes (no new one starts), the store is closed, exit status 0. Nothing
is kept in memory that the store does not have, so a restart (even after
``kill -9``) picks up where the store says: queued jobs are scheduled,
leased ones are renewed by the clusters that still run them or expire
after ``lease.timeout`` and run again.
"""

from __future__ import annotations

import gc
import signal
import sys
import threading
import time
from dataclasses import dataclass

import structlog
import uvicorn

from flotilla.service.api import create_app
from flotilla.service.auth import Authenticator
from flotilla.service.headers import protocol_with
from flotilla.service.health import health_router, ops_app
from flotilla.service.loop import ServiceLoop, service_backends
from flotilla.service.metrics import Metrics, instrument
from flotilla.service.reload import ConfigReloader, log_queue_sync
from flotilla.service.roles import bound_idle_transactions, check_role, runs_api, runs_scheduler
from flotilla.service.roles.election import LeaderElector
from flotilla.service.roles.events import EventPoller
from flotilla.service.roles.scheduler import SchedulerRunner
from flotilla.service.settings import ServiceSettings, from_config
from flotilla.service.store import Store
from flotilla.service.ui import mount_ui

log = structlog.get_logger("flotilla.service")


@dataclass
class Service:
    """One ``serve`` process: its role's parts (``loop``/``runner`` only where it schedules)."""

    settings: ServiceSettings
    store: Store
    loop: ServiceLoop | None
    app: object
    shutting_down: threading.Event
    role: str = "all"
    runner: SchedulerRunner | None = None
    elector: LeaderElector | None = None
    metrics: Metrics | None = None
    poller: EventPoller | None = None
    reloader: ConfigReloader | None = None
    #: Judges every request's bearer token; a reload re-configures it in place (API processes only).
    authenticator: Authenticator | None = None

    def start(self) -> None:
        if self.authenticator is not None:
            self.authenticator.warm()
        if self.poller is not None:
            self.poller.start()
        if self.runner is not None:
            self.runner.start()
        if self.reloader is not None:
            self.reloader.start()

    def stop_soon(self) -> None:
        """A signal arrived: finish the cycle in progress, start no other."""
        self.shutting_down.set()
        if self.runner is not None:
            self.runner.stopping.set()

    def close(self) -> None:
        if self.reloader is not None:
            self.reloader.stop()
        if self.runner is not None:
            self.runner.stop()
        if self.poller is not None:
            self.poller.stop()
        if self.loop is not None:
            for backend in self.loop.backends.having("close").values():
                try:
                    backend.close()
                except Exception:  # pragma: no cover - best effort on the way out
                    log.exception("backend.close_failed")
        self.store.close()


def build_service(config, scheduler, *, store_url: str | None = None, admin_endpoints: bool = False,
                  backends: dict | None = None, seed: int | None = None, role: str = "all",
                  identity: str | None = None, config_path: str | None = None,
                  settings: ServiceSettings | None = None, config_digest: str | None = None) -> Service:
    """Everything ``serve --role ROLE`` runs, built from a loaded config and a :class:`Scheduler` for it.

    ``settings``: the config's, when the caller has read them already. ``config_digest``: the config
    file's digest when it was read (see :class:`~flotilla.service.reload.ConfigReloader`).
    Raises :class:`~flotilla.service.roles.RoleError` for ``api``/``scheduler`` on SQLite.
    """
    settings = settings if settings is not None else from_config(config)
    url = store_url or settings.store_url
    check_role(role, url)
    store = Store(url)
    bound_idle_transactions(store, settings.leader_lease * 2 / 3)
    log_queue_sync(store.sync_queues(settings.queues))
    metrics = Metrics(store, role)
    shutting_down = threading.Event()
    loop = runner = elector = None
    if runs_scheduler(role):
        if backends is None:
            backends = service_backends(config, scheduler.pm)
        loop = ServiceLoop(store, settings, scheduler, backends, seed=seed)
        if not store.sqlite:  # one file, one process: SQLite needs no election (and api/scheduler refuse it)
            elector = LeaderElector(store, identity, settings.leader_lease, settings.leader_renew)
            elector.on_change = lambda leading, term: metrics.set_leader(elector.identity, leading, term)
            metrics.set_leader(elector.identity, False, None)
        else:
            metrics.set_leader(identity or "all", True, None)
        runner = SchedulerRunner(loop, elector, on_cycle=metrics.observe_cycle, on_fenced=metrics.fenced.inc,
                                 on_plugin_errors=metrics.observe_plugin_errors)
    router = health_router(store, role, metrics, elector, shutting_down, runner, settings)
    authenticator = None
    if runs_api(role):
        authenticator = Authenticator.from_settings(settings)
        app = create_app(store, settings, loop, admin_endpoints=admin_endpoints, shutting_down=shutting_down,
                         authenticator=authenticator)
        app.include_router(router)
        mount_ui(app, store, settings, metrics.status, authenticator)
    else:
        app = ops_app(router)
    instrument(app, metrics)
    poller = EventPoller(store) if runs_api(role) and not store.sqlite else None
    service = Service(settings, store, loop, app, shutting_down, role, runner, elector, metrics, poller,
                      authenticator=authenticator)
    if config_path is not None:
        service.reloader = ConfigReloader(config_path, service, config, digest=config_digest)
    return service


class _Server(uvicorn.Server):
    """uvicorn, telling the loop and the watch streams as soon as a signal arrives."""

    def __init__(self, config: uvicorn.Config, service: Service):
        super().__init__(config)
        self.service = service

    def handle_exit(self, sig, frame) -> None:
        self.service.stop_soon()
        super().handle_exit(sig, frame)


def split_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {listen!r}")
    return host.strip("[]"), int(port)


def run(service: Service, listen: str | None = None, *, access_log: bool = False) -> int:
    host, port = split_listen(listen or service.settings.listen)
    if service.settings.open_access and runs_api(service.role):
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"auth has neither tokens nor oidc: refusing to serve without authentication on "
                             f"{host}; add auth.tokens or auth.oidc, or listen on 127.0.0.1")
        print("flotilla serve: auth has neither tokens nor oidc: every local request acts as an administrator",
              file=sys.stderr, flush=True)
    config = uvicorn.Config(service.app, host=host, port=port, log_level="warning", access_log=access_log,
                            timeout_graceful_shutdown=5, lifespan="off", backlog=2048,
                            http=protocol_with(service.settings.header_timeout))
    server = _Server(config, service)

    def on_signal(signum, frame) -> None:
        # uvicorn re-raises the signal it caught once it has shut down; this handler
        # receives it then, so that the loop and the store are closed before exiting.
        service.stop_soon()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    if service.reloader is not None:
        signal.signal(signal.SIGHUP, lambda signum, frame: service.reloader.request())
    service.start()
    clusters = ", ".join(sorted(service.loop.backends)) or "none" if service.loop is not None else "none (api role)"
    print(f"flotilla serve: role {service.role}, listening on http://{host}:{port} "
          f"(store {redact(service.store.url)}, clusters {clusters})", file=sys.stderr, flush=True)
    started = time.monotonic()
    # What is loaded by now lives as long as the process: out of the collector's sight, so that a full
    # collection (triggered by a large request's many objects) does not walk it while the event loop waits.
    gc.freeze()
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
