"""The database under every part of the store: engine, transactions, the write lock, the fence, the event log's append.

One method of the store is one transaction. Writers are serialised
(SQLite's ``BEGIN IMMEDIATE``; a transaction-scoped advisory lock on
PostgreSQL, taken before anything is written and released only once the
commit is visible), which keeps event ids in commit order: on PostgreSQL two
writers would otherwise draw ids from the sequence in one order and commit in
the other, and a reader that saw the larger id first would never read the
smaller one. So a watcher that has seen event N never misses an event < N
committed later; events are written only inside :meth:`Database.write`
(:func:`insert_events` checks). Readers never wait for writers (WAL on
SQLite, MVCC on PostgreSQL).

The statements here are the ones every part shares: appending events,
the last event id, which jobs changed since an event, grouped updates.
"""

from __future__ import annotations

import json
import os
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping, Sequence

import sqlalchemy as sa
from sqlalchemy import event as sa_event

from flotilla.service import schema
from flotilla.service.schema import events

_CHUNK = 500
_PG_LOCK = 0x466C6F74  # "Flot"


def chunks(items: Sequence, size: int = _CHUNK) -> Iterator[Sequence]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def dump(value: Any) -> str:
    """JSON as stored: compact, keys sorted (identical values give identical texts, which the JSON cache shares)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


class JsonCache:
    """Parse identical JSON texts once: a million identical jobs share one requests mapping.

    Bounded by entries and by bytes (the texts' lengths; the parsed values
    are of the same order): 60 jobs with 4 MB annotations must not pin
    240 MB after they are gone. Texts over ``max_text`` are never kept.
    Full, it starts over rather than tracking recency in the hot path.
    """

    def __init__(self, limit: int = 10000, max_bytes: int = 16 * 1024 * 1024, max_text: int = 64 * 1024):
        self._cache: dict[str, Any] = {}
        self._limit = limit
        self._max_bytes = max_bytes
        self._max_text = max_text
        self.bytes = 0

    def __call__(self, text: str) -> Any:
        hit = self._cache.get(text)
        if hit is None:
            hit = json.loads(text)
            if len(text) <= self._max_text:
                if len(self._cache) >= self._limit or self.bytes + len(text) > self._max_bytes:
                    self._cache = {}
                    self.bytes = 0
                self._cache[text] = hit
                self.bytes += len(text)
        return hit


class Database:
    """The store's database on ``url`` (``sqlite:///path.db`` or ``postgresql+psycopg://...``)."""

    def __init__(self, url: str, *, migrate: bool = True, pool_size: int = 10):
        self.url = url
        self.sqlite = url.startswith("sqlite")
        if self.sqlite:
            path = sa.engine.make_url(url).database
            if path and path != ":memory:":
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self.engine = sa.create_engine(url, connect_args={"check_same_thread": False, "timeout": 60},
                                           pool_size=pool_size, max_overflow=20, hide_parameters=True)
            sa_event.listen(self.engine, "connect", _sqlite_connect)
            sa_event.listen(self.engine, "begin", _sqlite_begin)
        else:
            self.engine = sa.create_engine(url, pool_size=pool_size, max_overflow=20, pool_pre_ping=True,
                                           hide_parameters=True)
        self.writes = 0            # bumped after every commit: watchers poll it before asking the database
        #: Called with each write transaction's commit time in seconds (the metrics' commit-latency histogram).
        self.on_commit: Callable[[float], None] | None = None
        self._local = threading.local()   # .fence: checked by every write of this thread (see fenced)
        self._json = JsonCache()
        self._json_lock = threading.Lock()
        if migrate:
            self.migrate()

    def migrate(self, migrations=None) -> list[int]:
        return schema.migrate(self.engine, self._lock, migrations)

    def schema_version(self) -> int:
        with self.read() as conn:
            return schema.current_version(conn)

    def _lock(self, conn: sa.Connection) -> None:
        if not self.sqlite:
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK})

    def end_stalled_writers(self, conn: sa.Connection, older_than: float) -> int:
        """End the sessions that have held the write lock in a transaction open for over ``older_than`` seconds.

        PostgreSQL ends a session idle in its transaction by itself (see
        :func:`flotilla.service.roles.idle_session_timeout`), but not one
        stopped while the server still works for it, such as a process paused
        (SIGSTOP, a frozen VM) while a statement's rows were being sent to it:
        that session keeps the write lock for as long as the pause lasts, and
        no other replica writes meanwhile. Only an election round calls this,
        once the leader's lease has run out. Returns how many sessions it ended;
        0 on SQLite, which has one process.
        """
        if self.sqlite:
            return 0
        ended = conn.execute(sa.text(
            "SELECT pg_terminate_backend(a.pid) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = :high AND l.objid = :low "
            "AND l.objsubid = 1 AND a.pid <> pg_backend_pid() "
            "AND a.xact_start < clock_timestamp() - make_interval(secs => :age)"),
            {"high": _PG_LOCK >> 32, "low": _PG_LOCK & 0xFFFFFFFF, "age": float(older_than)}).scalars().all()
        return sum(1 for done in ended if done)

    @contextmanager
    def write(self, lock_timeout: float | None = None) -> Iterator[sa.Connection]:
        """One serialised write transaction: all of it commits, or none of it.

        Inside :meth:`fenced`, the transaction first checks the fence under
        the write lock, so a scheduler that lost the lead writes nothing.
        """
        fence = getattr(self._local, "fence", None)
        with self.engine.connect().execution_options(flotilla_write=True) as conn:
            with conn.begin() as transaction:
                if lock_timeout is not None and not self.sqlite:   # waiting longer for the write lock fails
                    conn.execute(sa.text(f"SET LOCAL lock_timeout = {max(1, int(lock_timeout * 1000))}"))
                self._lock(conn)
                if fence is not None:
                    fence.check(conn)
                yield conn
                started = time.perf_counter()
                transaction.commit()
                if self.on_commit is not None:
                    self.on_commit(time.perf_counter() - started)
        self.writes += 1

    @contextmanager
    def fenced(self, fence) -> Iterator[None]:
        """Every write of this thread, inside the block, calls ``fence.check(conn)`` first (raising ``Fenced``)."""
        previous = getattr(self._local, "fence", None)
        self._local.fence = fence
        try:
            yield
        finally:
            self._local.fence = previous

    def now(self, conn: sa.Connection) -> float:
        """The database's clock on PostgreSQL (one clock for every replica), this machine's on SQLite."""
        if self.sqlite:
            return time.time()
        return float(conn.execute(sa.text("SELECT extract(epoch from clock_timestamp())")).scalar_one())

    @contextmanager
    def read(self) -> Iterator[sa.Connection]:
        with self.engine.connect() as conn:
            with conn.begin():
                yield conn

    def close(self) -> None:
        self.engine.dispose()

    def loads(self, text: str) -> Any:
        """Parse a stored JSON text through the shared cache (identical texts give one object; do not mutate it)."""
        with self._json_lock:
            return self._json(text)


def event_row(job: Mapping | Any, kind: str, now: float, cluster=None, node=None, reason: str = "") -> dict:
    """An event row about ``job`` (a row mapping or a record with ``queue``, ``job_set`` and ``id``)."""
    get = job.get if isinstance(job, Mapping) else lambda k: getattr(job, k)
    return {"queue": get("queue"), "job_set": get("job_set"), "job_id": get("id"), "kind": kind, "time": now,
            "cluster": cluster, "node": node, "reason": reason}


def insert_events(conn: sa.Connection, rows: list[dict]) -> None:
    """Append ``rows`` to the event log; ``conn`` must be a :meth:`Database.write` transaction (ids in commit order)."""
    if not conn.get_execution_options().get("flotilla_write"):
        raise RuntimeError("events are written only inside Store.write(), which serialises writers")
    if rows:
        # One shape for the whole batch: only events about one pod of a multi-pod job carry "pod".
        conn.execute(events.insert(), [row if "pod" in row else {**row, "pod": None} for row in rows])


def last_event_id(conn) -> int:
    return conn.execute(sa.select(sa.func.max(events.c.id))).scalar_one() or 0


def changed_since(conn, after: int) -> tuple[int, list[str]]:
    """``(cursor, ids)``: the last event id, and the jobs with an event after ``after`` (first event first)."""
    cursor = last_event_id(conn)
    if cursor <= after:
        return after, []
    ids = list(conn.execute(sa.select(events.c.job_id).where(events.c.id > after, events.c.id <= cursor)
                            .group_by(events.c.job_id).order_by(sa.func.min(events.c.id))).scalars())
    return cursor, ids


def update_many(conn, table, key, updates: Mapping[str, dict]) -> None:
    """``UPDATE table SET ... WHERE key = id`` for many rows, grouped by the columns they set."""
    groups: dict[tuple, list[dict]] = {}
    for row_id, values in updates.items():
        groups.setdefault(tuple(sorted(values)), []).append(
            {"k_": row_id, **{f"v_{name}": value for name, value in values.items()}})
    for columns, params in groups.items():
        stmt = table.update().where(key == sa.bindparam("k_")).values({c: sa.bindparam(f"v_{c}") for c in columns})
        conn.execute(stmt, params)


def _sqlite_connect(dbapi_conn, _record) -> None:
    dbapi_conn.isolation_level = None  # we issue BEGIN ourselves (see _sqlite_begin)
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")   # durable against a process crash (kill -9) in WAL mode
    cur.execute("PRAGMA busy_timeout=60000")
    cur.close()


def _sqlite_begin(conn) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("flotilla_write") else "BEGIN")
