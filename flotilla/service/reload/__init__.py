"""Config reload without a restart: on SIGHUP, or when the config file's content changes.

A reload loads the file as ``serve`` would at start (every check, plugins
built with their args). When that fails, the error is logged
(``config.reload_failed``, the same one-line message ``serve`` would print)
and the running config stays. When it works:

* queues (weights, limits, owners) are written to the store, so every
  replica and the next cycle see them;
* a process that schedules runs the next cycle with the new scheduler:
  plugins and their args, actions, priority classes, evict/allocate/preempt
  settings, lease and cycle settings.

What cannot change in a running process - ``store``, ``server``, ``auth``,
``clusters`` - is named in a ``config.reload_needs_restart`` warning and
left as it was, never silently.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from pathlib import Path

import structlog

from flotilla.service.roles.periodic import Periodic

log = structlog.get_logger("flotilla.service.reload")

#: Sections that a running process keeps as they were at start.
RESTART_SECTIONS = ("store", "server", "auth", "clusters")


def _plain(value):
    """A config section as plain data, to compare two loads of it."""
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value.model_dump() if hasattr(value, "model_dump") else value


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


class ConfigReloader:
    """Watches ``path`` (every ``period`` seconds, and on :meth:`request`, which SIGHUP calls)."""

    def __init__(self, path: str, service, config, period: float = 1.0):
        self.path = Path(path)
        self.service = service
        self.config = config
        self.reloads = 0
        self.failures = 0
        self.last_error: str | None = None
        self._digest = _digest(self.path)
        self._requested = threading.Event()
        self._thread = Periodic("flotilla-reload", period, self.check)

    def request(self) -> None:
        """Reload at the next check, even if the content did not change (SIGHUP)."""
        self._requested.set()

    def check(self) -> bool | None:
        """Reload if asked to or if the file changed; returns the outcome, None when nothing was due."""
        digest = _digest(self.path)
        if not self._requested.is_set() and digest == self._digest:
            return None
        self._requested.clear()
        self._digest = digest
        return self.reload()

    def reload(self) -> bool:
        from flotilla.scheduler_main import UserError, build_scheduler, load_config_or_fail
        from flotilla.service.settings import from_config

        try:
            config = load_config_or_fail(str(self.path))
            scheduler = build_scheduler(config)
            settings = from_config(config)
        except UserError as exc:
            self.failures += 1
            self.last_error = str(exc)
            log.error("config.reload_failed", path=str(self.path), error=str(exc), kept="the running config")
            return False
        old = self.config
        kept = [name for name in RESTART_SECTIONS if _plain(getattr(old, name)) != _plain(getattr(config, name))]
        if kept:
            log.warning("config.reload_needs_restart", path=str(self.path), sections=kept)
        self.service.store.sync_queues(settings.queues)
        loop = self.service.loop
        if loop is not None:
            running = loop.settings
            loop.reconfigure(scheduler, dataclasses.replace(
                settings, tokens=running.tokens, admin_groups=running.admin_groups, store_url=running.store_url,
                listen=running.listen, clusters=running.clusters))
        self.config = config.model_copy(update={name: getattr(old, name) for name in RESTART_SECTIONS})
        self.reloads += 1
        log.warning("config.reloaded", path=str(self.path), queues=[q.name for q in settings.queues])
        return True

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop()
