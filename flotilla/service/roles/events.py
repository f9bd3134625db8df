"""Events on any replica: the watch streams of an API replica learn of other processes' writes.

A watch stream asks the database again when ``store.writes`` changes (its
own process committed something) and at least every 2 s otherwise. An API
replica commits no cycle's events: the leader, another process, does. This
poller reads the last event id every ``period`` (one primary-key lookup)
and bumps ``store.writes`` when it moved, so every stream of this replica
wakes within ``period`` of a commit anywhere. The loop tells API replicas
nothing directly: the event log is the only channel.
"""

from __future__ import annotations

from flotilla.service.roles.periodic import Periodic
from flotilla.service.store import Store


class EventPoller:
    def __init__(self, store: Store, period: float = 0.2):
        self.store = store
        self._last: int | None = None
        self._thread = Periodic("flotilla-events", period, self.poll)

    def poll(self) -> None:
        current = self.store.last_event_id()
        if current != self._last:
            self._last = current
            self.store.writes += 1

    def start(self) -> None:
        self.poll()          # the current position, so that only later commits wake the streams
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop()
