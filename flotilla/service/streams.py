"""Fair shares of the service's long-lived answers: watch streams and followed logs, counted per user.

Why: a stream holds a connection and, for a followed log, a worker thread
blocked on the cluster's answer. Shared slots let one user's idle streams
refuse everyone else; slots per user keep each user's streams from costing
the others more than their own share.

* ``server.streams.watchPerUser`` (default 100): open job-set event streams
  per user;
* ``server.streams.followsPerUser`` (default 4) and
  ``server.streams.follows`` (default 16, the whole service): followed logs;
* ``server.streams.followIdleTimeout`` (default 10 minutes): a followed log
  with no output this long ends (the client may follow again).

Past a cap the request is answered 429 before the store is asked
anything, and the message names the cap and its setting.

An open stream costs nothing while nothing happens: it sleeps until the
:class:`StreamHub` of its event loop wakes it. The hub's one task judges
each distinct bearer token once for all the streams that carry it (after an
auth reload, at an OIDC token's expiry, and every :data:`REVERIFY_SECONDS`),
reads the store's new events once for all job sets watched, and ends a
stream within :data:`TICK` seconds (plus one trip to a worker thread) of its
token no longer authenticating: revoked by a reload, or an OIDC token past
its expiry. The streams' own work in threads (opening, reading a job set's
past, a followed log's blocked reads) runs in lanes of threads of their own,
so a burst of streams never holds the pool that other requests wait for.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import structlog

log = structlog.get_logger("flotilla.service.streams")

#: How often the hub compares its counters and the clock (on the event loop, without a thread).
TICK = 0.1
#: How often the hub reads the store for new events when its write counter did not move. The counter moves
#: after every commit of this process and, for events other processes commit, when the API role's
#: ``EventPoller`` sees the last event id move (every 0.2 s); this read is a safety net.
POLL_SECONDS = 2.0
#: How often the watched queues are read again when nothing was written (their owners may change elsewhere).
QUEUE_SECONDS = 2.0
#: How often every credential of an open stream is verified again when nothing else asked for it (an OIDC
#: provider may withdraw the key that signed it).
REVERIFY_SECONDS = 10.0
#: Events kept for a stream that has not sent them yet; past it the stream reads them from the store.
MAX_PENDING = 1000
#: Worker threads the streams' own store reads may hold at once (opening a stream, reading a job set's past),
#: beside the pool that ordinary requests use: a burst of streams opened waits in its own lane.
STREAM_THREADS = 4
#: Events read per query, and queries per trip.
BATCH = 1000
MAX_BATCHES = 10


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


class Subscriber:
    """One open stream as the hub sees it: its credential, its job set (None for a followed log), what came.

    The hub (on the event loop) fills :attr:`pending` with the job set's new
    events and sets :attr:`ended` to why the stream must end; either wakes
    the stream, which otherwise sleeps without a timer of the hub's.
    """

    __slots__ = ("hub", "credential", "identity", "topic", "pending", "overflowed", "ended", "_wake")

    def __init__(self, hub: StreamHub, credential: str | None, identity, topic: tuple[str, str] | None):
        self.hub = hub
        self.credential = credential
        self.identity = identity
        self.topic = topic
        self.pending: list[dict] = []
        #: More events came than :data:`MAX_PENDING`: the stream reads them from the store instead.
        self.overflowed = False
        #: Why the stream ends ("" when the service stops: it ends without saying so), or None while it runs.
        self.ended: str | None = None
        self._wake = asyncio.Event()

    def push(self, event: dict) -> None:
        if self.overflowed:
            return
        if len(self.pending) >= MAX_PENDING:
            self.pending.clear()
            self.overflowed = True
        else:
            self.pending.append(event)
        self._wake.set()

    def end(self, reason: str) -> None:
        if self.ended is None:
            self.ended = reason
            self._wake.set()

    def take(self) -> tuple[list[dict], bool]:
        """The events that came since the last call, and whether some were dropped (read them from the store)."""
        events, overflowed = self.pending, self.overflowed
        self.pending, self.overflowed = [], False
        self._wake.clear()
        return events, overflowed

    async def wait(self, timeout: float | None = None) -> bool:
        """Until news (events, or the end) or ``timeout`` seconds; True when there is news."""
        if self._wake.is_set():
            return True
        try:
            await asyncio.wait_for(self._wake.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False


class _Credential:
    """A credential shared by open streams: its last verdict and when to judge it again (its expiry)."""

    __slots__ = ("identity", "subscribers", "due")

    def __init__(self, identity, due: float | None):
        self.identity = identity
        self.subscribers: set[Subscriber] = set()
        self.due = due


class StreamHub:
    """Every open stream of one event loop, watched by one task: idle streams cost nothing.

    Each :data:`TICK` the task compares two counters (the authenticator's
    generation, the store's writes) and the earliest credential expiry with
    the clock, all on the event loop; only when something moved does it
    make one trip to a worker thread for all streams together:

    * each distinct credential of the open streams is verified again (not
      each stream's) after an auth reload, at its expiry (an OIDC token's
      ``exp`` plus the leeway) and every :data:`REVERIFY_SECONDS`; the
      streams of a credential that no longer authenticates end, and the
      others are judged by the identity it now names;
    * the store's new events are read once, from the last event id seen,
      and handed to the streams of their job sets, when the store's write
      counter moved (and every :data:`POLL_SECONDS`);
    * the queues watched are read again after any write or reload (and
      every :data:`QUEUE_SECONDS`): a stream ends when its queue is deleted
      or its user may no longer act in it.
    """

    def __init__(self, store, auth, open_access: bool, stopping: Callable[[], bool]):
        self.store = store
        self.auth = auth
        self.open_access = open_access
        self.stopping = stopping
        self._subscribers: set[Subscriber] = set()
        self._topics: dict[tuple[str, str], set[Subscriber]] = {}
        self._credentials: dict[str, _Credential] = {}
        self._task: asyncio.Task | None = None
        self._ready: asyncio.Event | None = None
        self._cursor = 0
        self._lane: Any = None
        self._follow_lane: Any = None
        #: Trips to a worker thread the hub made (tests read it: an idle hub makes none but its polls).
        self.trips = 0

    # -- streams ----------------------------------------------------------------------------
    async def subscribe(self, credential: str | None, identity, topic: tuple[str, str] | None = None) -> Subscriber:
        """A new stream's place. A job set's stream then reads its past from the store: every event
        committed after that read's start is handed to it here (it skips what it has seen)."""
        self._start()
        sub = Subscriber(self, None if self.open_access else credential, identity, topic)
        self._subscribers.add(sub)
        if topic is not None:
            self._topics.setdefault(topic, set()).add(sub)
        if sub.credential is not None:
            held = self._credentials.get(sub.credential)
            if held is None:
                held = self._credentials[sub.credential] = _Credential(identity, self._due(identity))
            held.subscribers.add(sub)
        await self._ready.wait()   # the hub knows the last event id: nothing after it is missed
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        self._subscribers.discard(sub)
        if sub.topic is not None:
            watching = self._topics.get(sub.topic)
            if watching is not None:
                watching.discard(sub)
                if not watching:
                    del self._topics[sub.topic]
        if sub.credential is not None:
            held = self._credentials.get(sub.credential)
            if held is not None:
                held.subscribers.discard(sub)
                if not held.subscribers:
                    del self._credentials[sub.credential]

    def open_streams(self) -> int:
        return len(self._subscribers)

    async def in_lane(self, fn: Callable, *args) -> Any:
        """``fn(*args)`` in a worker thread of the streams' lane (:data:`STREAM_THREADS`), not the request pool."""
        import anyio

        if self._lane is None:
            self._lane = anyio.CapacityLimiter(STREAM_THREADS)
        return await anyio.to_thread.run_sync(functools.partial(fn, *args), limiter=self._lane)

    async def in_follow_lane(self, fn: Callable, *args, threads: int) -> Any:
        """``fn(*args)`` in a thread of the followed logs' own lane (``threads``: ``server.streams.follows``,
        the most followed logs at once): a read blocked on a quiet log never holds a request's thread."""
        import anyio

        if self._follow_lane is None:
            self._follow_lane = anyio.CapacityLimiter(threads)
        return await anyio.to_thread.run_sync(functools.partial(fn, *args), limiter=self._follow_lane)

    # -- the task ---------------------------------------------------------------------------
    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._ready = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="flotilla-stream-hub")

    def _due(self, identity) -> float | None:
        expires = getattr(identity, "expires", None)
        if expires is None:
            return None
        oidc = self.auth.oidc
        return expires + (oidc.settings.leeway if oidc is not None else 0.0)

    async def _run(self) -> None:
        from fastapi.concurrency import run_in_threadpool

        try:
            self._cursor = await run_in_threadpool(self.store.last_event_id)
        except Exception as exc:   # the store cannot be read: the streams waiting to start end, saying so
            log.warning("streams.store_unreadable", error=type(exc).__name__, detail=str(exc)[:300])
            for sub in list(self._subscribers):
                sub.end("the service could not read its store (see its log); try again")
            self._ready.set()
            return
        self._ready.set()
        seen_auth, seen_writes = self.auth.generation, self.store.writes
        monotonic = time.monotonic
        polled = verified = queues_read = monotonic()
        while self._subscribers or self._credentials:
            await asyncio.sleep(TICK)
            if self.stopping():
                for sub in list(self._subscribers):
                    sub.end("")
                continue
            now = monotonic()
            reload = self.auth.generation != seen_auth
            wrote = self.store.writes != seen_writes
            seen_auth, seen_writes = self.auth.generation, self.store.writes
            verify: list[str] = []
            if reload or now - verified >= REVERIFY_SECONDS:
                verify, verified = list(self._credentials), now
            elif self._credentials:
                clock = self.auth.now()
                verify = [c for c, held in self._credentials.items() if held.due is not None and held.due <= clock]
            poll = bool(self._topics) and (wrote or now - polled >= POLL_SECONDS)
            queues = sorted({q for q, _ in self._topics}) if (
                self._topics and (wrote or reload or now - queues_read >= QUEUE_SECONDS)) else []
            if not (verify or poll or queues):
                continue
            polled = now if poll else polled
            queues_read = now if queues else queues_read
            self.trips += 1
            try:
                verdicts, events, specs = await run_in_threadpool(self._look, verify,
                                                                  self._cursor if poll else None, queues)
            except Exception as exc:   # not the store's (_look keeps those): logged, and the next tick goes on
                log.error("streams.hub_failed", error=type(exc).__name__, detail=str(exc)[:300])
                continue
            self._apply(verdicts, events, specs)
            if len(events) >= MAX_BATCHES * BATCH:
                polled = now - POLL_SECONDS   # more to read: at the next tick

    def _look(self, credentials: list[str], after: int | None, queues: list[str]):
        """In a worker thread: the credentials' verdicts, the events after ``after``, the queues' specs."""
        from flotilla.service.auth import Unauthenticated

        verdicts: dict[str, Any] = {}
        for credential in credentials:
            try:
                verdicts[credential] = self.auth.verify(credential)
            except Unauthenticated as exc:
                verdicts[credential] = exc
        events: list[dict] = []
        specs: dict = {}
        try:   # a store error leaves the cursor where it was: the next read starts from it
            if after is not None:
                for _ in range(MAX_BATCHES):
                    batch = self.store.all_events(after, BATCH)
                    events.extend(batch)
                    if len(batch) < BATCH:
                        break
                    after = batch[-1]["id"]
            specs = {queue: self.store.get_queue(queue) for queue in queues}
        except Exception as exc:
            log.warning("streams.store_unreadable", error=type(exc).__name__, detail=str(exc)[:300])
        return verdicts, events, specs

    def _apply(self, verdicts: dict, events: list[dict], specs: dict) -> None:
        from flotilla.service.auth import may_act

        for credential, verdict in verdicts.items():
            held = self._credentials.get(credential)
            if held is None:
                continue
            if isinstance(verdict, Exception):
                for sub in list(held.subscribers):
                    sub.end(f"the bearer token no longer authenticates ({verdict})")
                held.due = None
                continue
            held.identity, held.due = verdict, self._due(verdict)
            if held.due is not None and held.due <= self.auth.now():
                held.due = self.auth.now() + TICK   # not yet expired by its own clock: look again shortly
            for sub in held.subscribers:
                sub.identity = verdict
        for event in events:
            self._cursor = max(self._cursor, event["id"])
            for sub in self._topics.get((event["queue"], event["jobSet"]), ()):
                sub.push(event)
        if not specs:
            return
        for (queue, _), watching in self._topics.items():
            if queue not in specs:
                continue
            spec = specs[queue]
            for sub in watching:
                if spec is None:
                    sub.end(f"queue {queue!r} was deleted")
                elif not may_act(sub.identity, spec):
                    sub.end(f"user {sub.identity.user!r} may no longer watch queue {queue!r}")



class StreamHubs:
    """One :class:`StreamHub` per event loop (a server has one; a test client may run several)."""

    def __init__(self, store, auth, open_access: bool, stopping: Callable[[], bool]):
        self._make = lambda: StreamHub(store, auth, open_access, stopping)
        self._hubs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def here(self) -> StreamHub:
        loop = asyncio.get_running_loop()
        hub = self._hubs.get(loop)
        if hub is None:
            hub = self._hubs[loop] = self._make()
        return hub

    async def subscribe(self, credential: str | None, identity, topic: tuple[str, str] | None = None) -> Subscriber:
        return await self.here().subscribe(credential, identity, topic)

    async def in_lane(self, fn: Callable, *args) -> Any:
        return await self.here().in_lane(fn, *args)

    async def in_follow_lane(self, fn: Callable, *args, threads: int) -> Any:
        return await self.here().in_follow_lane(fn, *args, threads=threads)

    @staticmethod
    def unsubscribe(sub: Subscriber) -> None:
        sub.hub.unsubscribe(sub)

    def open_streams(self) -> int:
        return sum(hub.open_streams() for hub in list(self._hubs.values()))


__all__ = ["Slots", "StreamHub", "StreamHubs", "StreamLimits", "Subscriber", "TICK"]
