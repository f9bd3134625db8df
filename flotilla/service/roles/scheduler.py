"""The scheduler role's thread: cycles of the loop while this process leads, nothing while it follows.

Each cycle runs inside the leader's fence (:meth:`Store.fenced`), so every
write it makes - ingest, leases, pending marks, the published status -
first checks, under the store's write lock, that this process still leads
with the same term. A leader that was paused past its lease and wakes up
mid-cycle gets :class:`~flotilla.service.store.Fenced` at its next write
and stops there; the successor owns the jobs.

When this process (re)gains the lead, the loop's in-memory copies of the
queue and of the active jobs are dropped and read afresh: another leader
changed the store meanwhile, lease renewals included, which write no event.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable

import structlog

from flotilla.core.extensions import PluginFailed
from flotilla.service.roles.election import LeaderElector
from flotilla.service.roles.status import plugins_failing, publish, status_body
from flotilla.service.store import Fenced

log = structlog.get_logger("flotilla.service.scheduler")


class SchedulerRunner:
    """Runs ``loop`` every ``cycle.period`` while ``elector`` says this process leads (always, without one)."""

    def __init__(self, loop, elector: LeaderElector | None = None,
                 on_cycle: Callable[[object, object], None] | None = None,
                 before_cycle: Callable[[], None] | None = None, on_fenced: Callable[[], None] | None = None,
                 on_plugin_errors: Callable[[dict], None] | None = None):
        self.loop = loop
        #: Told each cycle's plugin failures ((plugin, point, error) -> count), failed closed or not.
        self.on_plugin_errors = on_plugin_errors
        #: Cycles in a row that failed closed (a plugin's failure no action isolates), and the last one's reason.
        self.failed_cycles = 0
        self.failure: str | None = None
        self._last_body: dict | None = None
        self.elector = elector
        self.on_cycle = on_cycle
        self.before_cycle = before_cycle
        self.on_fenced = on_fenced
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._term: int | None = None
        self.fenced_writes = 0

    @property
    def stopping(self) -> threading.Event:
        return self._stop

    def cycle(self) -> bool:
        """One cycle if this process leads; returns whether it ran one to the end."""
        if self.before_cycle is not None:
            self.before_cycle()
        fence = None
        if self.elector is not None:
            fence = self.elector.fence
            if fence is None:
                self._term = None
                return False
            if fence.term != self._term:
                self.loop.forget()
                self._term = fence.term
        identity = self.elector.identity if self.elector else "all"
        try:
            with self.loop.store.fenced(fence) if fence else contextlib.nullcontext():
                try:
                    report = self.loop.run_cycle()
                except PluginFailed as failure:
                    self._failed_closed(failure, identity, fence)
                    return False
                decisions = getattr(self.loop, "last_decisions", None)
                body = status_body(report, decisions, identity, fence.term if fence else None,
                                   getattr(self.loop, "last_wishlist", None), getattr(self.loop, "last_nodes", None))
                publish(self.loop.store, body, fence.term if fence else None)
                self._last_body = body
                self.failed_cycles, self.failure = 0, None
                errors = getattr(decisions, "plugin_errors", None)
                if errors and self.on_plugin_errors is not None:
                    self.on_plugin_errors(errors)
        except Fenced as exc:
            self._fenced(str(exc))
            return False
        except Exception as exc:
            # Paused inside a transaction past the store's idle limit, the session was ended by the database
            # and the transaction rolled back: if the lead has passed meanwhile, that was a deposed leader's write.
            if self.elector is not None and not self.elector.round():
                self._fenced(f"lost the lead during the cycle ({type(exc).__name__}: {str(exc).splitlines()[0]})")
                return False
            raise
        if self.on_cycle is not None:
            self.on_cycle(report, decisions)
        return True

    def _failed_closed(self, failure: PluginFailed, identity: str, fence) -> None:
        """A cycle failed closed: nothing was decided. Counted, published in the status; logged by the scheduler
        (once per distinct error per minute), so no traceback here."""
        self.failed_cycles += 1
        self.failure = failure.reason
        errors = getattr(failure, "errors", None) or {(failure.plugin, failure.point, failure.error): 1}
        if self.on_plugin_errors is not None:
            self.on_plugin_errors(errors)
        body = dict(self._last_body or {"cycle": 0, "time": time.time(), "leader": identity,
                                         "term": fence.term if fence else None})
        body["plugins"] = {**plugins_failing(errors, self.failed_cycles), "cycleFailed": failure.reason}
        publish(self.loop.store, body, fence.term if fence else None)

    def _fenced(self, reason: str) -> None:
        self.fenced_writes += 1
        self._term = None
        log.warning("scheduler.fenced", reason=reason)
        if self.on_fenced is not None:
            self.on_fenced()

    def run_forever(self, period: float | None = None) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.cycle()
            except Exception:
                log.exception("service.cycle_failed")
            wait = self.loop.settings.cycle_period if period is None else period  # a reload may change it
            if self.elector is not None and not self.elector.leading:
                wait = min(wait, self.elector.renew_period)
            self._stop.wait(max(0.0, wait - (time.monotonic() - started)))

    def start(self, period: float | None = None) -> threading.Thread:
        if self.elector is not None:
            self.elector.round()       # know at once whether this process leads
            self.elector.start()
        self._stop.clear()
        self._thread = threading.Thread(target=self.run_forever, args=(period,), name="flotilla-loop", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self, timeout: float | None = None) -> None:
        """Let the cycle in progress finish, start no other, then give up the lead."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if self.elector is not None:
            self.elector.stop()
