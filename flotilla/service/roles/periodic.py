"""A daemon thread that calls one function every ``period`` seconds until stopped (election, event polling,
config reload checks all run this way)."""

from __future__ import annotations

import threading
from typing import Callable

import structlog

log = structlog.get_logger("flotilla.service")


class Periodic:
    def __init__(self, name: str, period: float, tick: Callable[[], object]):
        self.name = name
        self.period = period
        self.tick = tick
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:  # a failed tick is logged; the next one tries again
                log.exception("periodic.failed", thread=self.name)
            self._stop.wait(self.period)

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
