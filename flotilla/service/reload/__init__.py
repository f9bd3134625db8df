"""Config reload without a restart: on SIGHUP, or when the config file's content changes.

A reload loads the file as ``serve`` would at start (every check, plugins
built with their args). When that fails, the error is logged
(``config.reload_failed``, the same one-line message ``serve`` would print)
and the running config stays. When it works:

* queues (weights, limits, owners) are written to the store, so every
  replica and the next cycle see them;
* a process that schedules runs the next cycle with the new scheduler:
  plugins and their args, actions, priority classes, evict/allocate/preempt
  settings, lease and cycle settings;
* a process that serves the API judges every later request by the new
  ``auth`` (static tokens, ``adminGroups``, ``oidc``): a removed token is
  answered 401 on its next request, and open event streams judge their
  token again at once and end when it no longer authenticates or no longer
  reaches the queue (``config.auth_applied`` is logged).

What cannot change in a running process - ``store``, ``server``,
``clusters``, and adding authentication to a process that started without
any (a loopback service where everyone is an administrator) - is named in a
``config.reload_needs_restart`` warning and left as it was, never silently.
Removing every token and ``oidc`` is applied: every request gets 401 until
a restart.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from pathlib import Path

import structlog

from flotilla.service.roles.periodic import Periodic

log = structlog.get_logger("flotilla.service.reload")


def log_queue_sync(outcome: dict[str, list[str]]) -> None:
    """Say which config queues the config's sync removed, and which retire (see flotilla.service.store.queues)."""
    if outcome.get("removed"):
        log.warning("queue.removed", queues=outcome["removed"], reason="removed from the configuration")
    if outcome.get("retiring"):
        log.warning("queue.retiring", queues=outcome["retiring"],
                    reason="removed from the configuration: takes no new jobs, removed once its unfinished jobs "
                           "finish")

#: Sections that a running process keeps as they were at start.
RESTART_SECTIONS = ("store", "server", "clusters")


def _plain(value):
    """A config section as plain data, to compare two loads of it."""
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value.model_dump() if hasattr(value, "model_dump") else value


def file_digest(path: str | Path) -> str | None:
    """The file's content hash (None: unreadable); a change of it is a change of the config."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


class ConfigReloader:
    """Watches ``path`` (every ``period`` seconds, and on :meth:`request`, which SIGHUP calls)."""

    def __init__(self, path: str, service, config, period: float = 1.0, digest: str | None = None):
        """``digest``: :func:`file_digest` of ``path`` when ``config`` was read from it (default: now), so that a
        change made while the process started (waiting for its store) is seen at the first check."""
        self.path = Path(path)
        self.service = service
        self.config = config
        self.reloads = 0
        self.failures = 0
        self.last_error: str | None = None
        self._digest = digest if digest is not None else file_digest(self.path)
        self._requested = threading.Event()
        self._thread = Periodic("flotilla-reload", period, self.check)

    def request(self) -> None:
        """Reload at the next check, even if the content did not change (SIGHUP)."""
        self._requested.set()

    def check(self) -> bool | None:
        """Reload if asked to or if the file changed; returns the outcome, None when nothing was due."""
        digest = file_digest(self.path)
        if not self._requested.is_set() and digest == self._digest:
            return None
        self._requested.clear()
        self._digest = digest
        return self.reload()

    def reload(self) -> bool:
        from flotilla.scheduler_main import UserError, build_scheduler, load_config_or_fail
        from flotilla.service.loop import lease_missing
        from flotilla.service.settings import from_config

        try:
            config = load_config_or_fail(str(self.path))
            scheduler = build_scheduler(config)
            missing = lease_missing(config, scheduler)
            if missing is not None:
                raise UserError(str(missing))
            settings = from_config(config)
        except UserError as exc:
            self.failures += 1
            self.last_error = str(exc)
            log.error("config.reload_failed", path=str(self.path), error=str(exc), kept="the running config")
            return False
        old = self.config
        kept = [name for name in RESTART_SECTIONS if _plain(getattr(old, name)) != _plain(getattr(config, name))]
        auth_changed = _plain(old.auth) != _plain(config.auth)
        if auth_changed and self._started_open(settings):
            kept.append("auth")   # the loopback-only, everyone-an-administrator mode is left only by a restart
        if kept:
            log.warning("config.reload_needs_restart", path=str(self.path), sections=kept)
        log_queue_sync(self.service.store.sync_queues(settings.queues))
        if auth_changed and "auth" not in kept:
            self._apply_auth(settings)
        loop = self.service.loop
        if loop is not None:
            running = loop.settings
            loop.reconfigure(scheduler, dataclasses.replace(
                settings, store_url=running.store_url, listen=running.listen, clusters=running.clusters))
        self.config = config.model_copy(update={name: getattr(old, name) for name in (*RESTART_SECTIONS, *kept)})
        self.reloads += 1
        log.warning("config.reloaded", path=str(self.path), queues=[q.name for q in settings.queues])
        return True

    def _started_open(self, settings) -> bool:
        """Whether the process started without authentication and ``settings`` has some.

        The other way (every token and ``oidc`` removed) is applied: every
        request is then answered 401 until a restart opens the service.
        """
        started = getattr(self.service, "settings", None)
        return started is not None and started.open_access and not settings.open_access

    def _apply_auth(self, settings) -> None:
        authenticator = getattr(self.service, "authenticator", None)
        if authenticator is None:   # a scheduler-only process serves no requests
            return
        authenticator.apply(settings)
        authenticator.warm()
        log.warning("config.auth_applied", path=str(self.path), tokens=len(settings.tokens),
                    admin_groups=list(settings.admin_groups),
                    oidc=settings.oidc.issuer if settings.oidc is not None else None)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop()
