"""Fair shares of the service's long-lived answers: watch streams and followed logs, counted per user.

Why: a stream holds a connection, a task that wakes to look for news and,
for a followed log, a worker thread blocked on the cluster's answer. Shared
slots let one user's idle streams refuse everyone else; slots per user keep
each user's streams from costing the others more than their own share.

* ``server.streams.watchPerUser`` (default 100): open job-set event streams
  per user;
* ``server.streams.followsPerUser`` (default 4) and
  ``server.streams.follows`` (default 16, the whole service): followed logs;
* ``server.streams.followIdleTimeout`` (default 10 minutes): a followed log
  with no output this long ends (the client may follow again).

Past a cap the request is answered 429, and the message names the cap and
its setting. Every stream re-checks its bearer token at least every
:data:`RECHECK_SECONDS` and at once after an auth reload, and ends when the
token no longer authenticates (revoked, or an OIDC token past its expiry).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

#: How often an open stream re-verifies its token: it ends within this long of a revocation or an expiry.
RECHECK_SECONDS = 0.5


@dataclass(frozen=True, slots=True)
class StreamLimits:
    watch_per_user: int = 100
    follows_per_user: int = 4
    follows: int = 16
    follow_idle_timeout: float = 600.0


class Slots:
    """Counted slots per user and in all, taken and given back from any thread."""

    def __init__(self, kind: str, per_user: int, per_user_setting: str, total: int | None = None,
                 total_setting: str | None = None):
        self.kind = kind
        self.per_user = per_user
        self.per_user_setting = per_user_setting
        self.total = total
        self.total_setting = total_setting
        self._held: dict[str, int] = {}
        self._all = 0
        self._lock = threading.Lock()

    def take(self, user: str):
        """A function that gives the slot back (idempotent); :class:`ApiError` 429 past a cap."""
        from flotilla.service.errors import ApiError   # errors imports the store, which imports the settings

        with self._lock:
            if self._held.get(user, 0) >= self.per_user:
                raise ApiError(429, f"user {user!r} has {self.per_user} {self.kind} open already, the most one user "
                                    f"may ({self.per_user_setting}: {self.per_user}); close one and try again")
            if self.total is not None and self._all >= self.total:
                raise ApiError(429, f"{self.total} {self.kind} are open already, the most the service keeps "
                                    f"({self.total_setting}: {self.total}); try again later")
            self._held[user] = self._held.get(user, 0) + 1
            self._all += 1
        given = threading.Event()

        def give_back() -> None:
            with self._lock:
                if given.is_set():
                    return
                given.set()
                left = self._held[user] - 1
                if left:
                    self._held[user] = left
                else:
                    del self._held[user]
                self._all -= 1

        return give_back

    def held(self, user: str | None = None) -> int:
        with self._lock:
            return self._all if user is None else self._held.get(user, 0)


__all__ = ["RECHECK_SECONDS", "Slots", "StreamLimits"]
