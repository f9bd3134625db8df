"""The durable job store: every transaction the service runs, on SQLite or PostgreSQL.

One method is one transaction. Writers are serialised (SQLite's
``BEGIN IMMEDIATE``; a transaction-scoped advisory lock on PostgreSQL, taken
before anything is written and released only once the commit is visible),
which keeps event ids in commit order: on PostgreSQL two writers would
otherwise draw ids from the sequence in one order and commit in the other,
and a reader that saw the larger id first would never read the smaller one.
So a watcher that has seen event N never misses an event < N committed
later; events are written only inside :meth:`Store.write` (checked). Ids are
never reused either (see :mod:`flotilla.service.schema`). Readers never
wait for writers (WAL on SQLite, MVCC on PostgreSQL).

Jobs move through these states; every move appends an event to the job
set's log, in the same transaction::

    queued -> leased -> pending -> running -> succeeded | failed
       ^        |          |          |
       +--------+----------+----------+  lease-expired (retries left) / lost, run-failed (a retry policy)
    any active state -> cancelled | preempted | failed
"""

from __future__ import annotations

import heapq
import itertools
import json
import os
import secrets
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import sqlalchemy as sa
from sqlalchemy import event as sa_event

from flotilla.core.model import OWNER_ANNOTATION
from flotilla.service import schema
from flotilla.service.leases import pod_ids
from flotilla.service.retry import Policies, dump_policy
from flotilla.service.schema import cluster_reports, cordons, events, job_sets, jobs, leases, queues
from flotilla.service.settings import QueueSpec

QUEUED, LEASED, PENDING, RUNNING = "queued", "leased", "pending", "running"
SUCCEEDED, FAILED, PREEMPTED, CANCELLED = "succeeded", "failed", "preempted", "cancelled"
STATES = (QUEUED, LEASED, PENDING, RUNNING, SUCCEEDED, FAILED, PREEMPTED, CANCELLED)
ACTIVE = (LEASED, PENDING, RUNNING)
TERMINAL = (SUCCEEDED, FAILED, PREEMPTED, CANCELLED)
NONTERMINAL = (QUEUED, *ACTIVE)

EVENT_KINDS = ("submitted", "queued", "leased", "pending", "running", "succeeded", "failed", "preempted",
               "cancelled", "lease-expired", "reprioritized", "cancelling", "deleted",
               "pod-running", "pod-succeeded",   # one pod of a multi-pod job, with its podNumber
               "run-failed",                     # a failed run that its retry policy runs again
               "returned")                       # not bound, or refused by the kubelet: queued again, no retry used
#: The state an event puts its job in; events not listed leave the state as it is.
EVENT_STATE = {"queued": QUEUED, "leased": LEASED, "pending": PENDING, "running": RUNNING,
               "succeeded": SUCCEEDED, "failed": FAILED, "preempted": PREEMPTED, "cancelled": CANCELLED}

STOP_NONE, STOP_CANCEL, STOP_DEADLINE = 0, 1, 2

_CHUNK = 500
_PG_LOCK = 0x466C6F74  # "Flot"


def chunks(items: Sequence, size: int = _CHUNK) -> Iterator[Sequence]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"


def new_job_id(now: float | None = None) -> str:
    """A ULID-like id (26 characters): time-ordered, unique without coordination."""
    millis = int((time.time() if now is None else now) * 1000)
    value = (millis << 80) | int.from_bytes(secrets.token_bytes(10), "big")
    out = []
    for _ in range(26):
        out.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(out))


class StoreError(Exception):
    """Base of the store's refusals; ``status`` is the HTTP status the API answers with."""

    status = 400


class NotFound(StoreError):
    status = 404


class Conflict(StoreError):
    status = 409


class Fenced(StoreError):
    """A scheduler wrote after losing the lead (its term is over): nothing of that transaction was stored."""

    status = 409


@dataclass(frozen=True, slots=True)
class Rejection:
    """One reason a submission is refused, naming the job (index, clientId) and the field."""

    index: int | None
    client_id: str | None
    field: str
    message: str

    def text(self) -> str:
        if self.index is None:
            who = "submission"
        else:
            who = f"job {self.index}" + (f" (clientId {self.client_id!r})" if self.client_id is not None else "")
        return f"{who}: {self.field}: {self.message}" if self.field else f"{who}: {self.message}"

    def to_dict(self) -> dict:
        return {"index": self.index, "clientId": self.client_id, "field": self.field, "message": self.message,
                "text": self.text()}


class SubmissionRejected(StoreError):
    """The submission is refused as a whole; nothing was stored."""

    status = 422

    def __init__(self, rejections: Sequence[Rejection]):
        self.rejections = list(rejections)
        super().__init__("; ".join(r.text() for r in self.rejections[:20])
                         + (f"; and {len(self.rejections) - 20} more" if len(self.rejections) > 20 else ""))


@dataclass(slots=True)
class Pod:
    requests: dict[str, int]
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict] = field(default_factory=list)
    #: ``[protocol, port]`` pairs the pod binds on its node (no two pods on one node share one).
    host_ports: list[list] = field(default_factory=list)
    #: The podSpec's ``affinity.nodeAffinity`` (API field names), checked at submission; None: none.
    node_affinity: dict | None = None
    #: The pod's labels (the job's), which other pods' affinity and spread select by.
    labels: dict[str, str] = field(default_factory=dict)
    #: The podSpec's pod affinity, anti-affinity and spread constraints (``{affinity: {podAffinity,
    #: podAntiAffinity}, topologySpreadConstraints}``, API field names), checked at submission; None: none.
    pod_rules: dict | None = None
    #: The PersistentVolumeClaims the pod mounts (``namespace/name``, or ``name`` for the cluster's namespace).
    claims: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"requests": self.requests}
        if self.node_selector:
            out["nodeSelector"] = self.node_selector
        if self.tolerations:
            out["tolerations"] = self.tolerations
        if self.host_ports:
            out["hostPorts"] = self.host_ports
        if self.node_affinity:
            out["nodeAffinity"] = self.node_affinity
        if self.labels:
            out["labels"] = self.labels
        if self.pod_rules:
            out["podRules"] = self.pod_rules
        if self.claims:
            out["claims"] = self.claims
        return out


@dataclass(slots=True)
class NewJob:
    """A validated job, ready to store (see :mod:`flotilla.service.jobspec`)."""

    index: int
    client_id: str | None
    priority: int
    priority_class: str
    pods: list[Pod]
    grace_period: float
    deadline: float
    annotations: dict[str, str] = field(default_factory=dict)
    spec: dict = field(default_factory=dict)
    gang_id: str | None = None
    gang_cardinality: int | None = None
    gang_pods: int | None = None
    #: The job's own retry rules (dicts as the job spec gives them), tried before its queue's.
    retry_policy: list[dict] = field(default_factory=list)


@dataclass(slots=True)
class Submitted:
    index: int
    id: str
    client_id: str | None
    existing: bool


@dataclass(slots=True)
class QueuedJob:
    """A job as the scheduling loop reads it: what scheduling needs of the row (no spec, no history)."""

    id: str
    queue: str
    job_set: str
    priority: int
    priority_class: str
    submitted: float
    pods: list[dict]
    npods: int
    gang_id: str | None
    gang_pods: int | None
    annotations: dict
    grace_period: float
    deadline: float


@dataclass(slots=True)
class Beat:
    """When a cluster last answered (``cluster_reports``), shared by the copy's jobs on that cluster."""

    at: float = 0.0


@dataclass(slots=True)
class ActiveJob(QueuedJob):
    """A job with a lease: the queued job's fields, its state and retries, and the lease.

    ``renewed_at`` is when the lease was last renewed: the cluster's last
    report (``beat``) while that report listed the job (``seen``), else the
    time stored with the lease (``lease_renewed``). A cycle in which nothing
    starts or stops being listed renews every lease of a cluster by moving
    its one ``beat``, in memory and in the store.
    """

    state: str
    retries: int
    stop_requested: int
    started: float | None
    cluster: str
    nodes: list[str]
    leased_at: float
    lease_renewed: float
    pods_running: int
    pods_done: int
    seen: bool = False
    beat: Beat = field(default_factory=Beat)

    @property
    def renewed_at(self) -> float:
        if self.seen and self.beat.at > self.lease_renewed:
            return self.beat.at
        return self.lease_renewed


_GENERATIONS = itertools.count(1)


class ActiveCopy:
    """The active jobs as of event ``cursor``, kept by the scheduling loop between cycles, with their indexes.

    Reading every active job each cycle cost 2.8 s with 100,000 of them, and
    walking them all (renewals, expiry, stops) 0.35 s more. :meth:`Store.ingest`
    brings the copy up to date from the jobs with an event since ``cursor``
    (every change to an active job that the rules read writes one: leased,
    pending, running, cancelling, reprioritized, ...), then applies the
    cycle's reports to it and to the store in the same transaction. The
    indexes let the rules touch only what changed: per cluster, its jobs,
    their pod ids and those its last report did not list; the jobs asked to
    stop; a heap of active deadlines. Every change goes through :meth:`put`
    and :meth:`drop`, which also note the job id in ``changed`` for the
    loop's snapshot (:meth:`take_changes`). A failed transaction resets the
    copy; the next cycle reads all.
    """

    #: Past this many changed jobs, and two thirds of the copy, one full read is cheaper than lookups by id.
    RELOAD_MIN = 1000

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.cursor: int | None = None
        self.jobs: dict[str, ActiveJob] = {}
        self.beats: dict[str, Beat] = {}
        self.on_cluster: dict[str, dict[str, ActiveJob]] = {}
        self.pods: dict[str, set[str]] = {}       # cluster -> pod ids of its active jobs
        self.unseen: dict[str, set[str]] = {}     # cluster -> its jobs that its last report did not list
        self.stopping: set[str] = set()           # jobs with stop_requested set
        self.deadlines: list[tuple[float, str]] = []   # heap of (started + deadline, job id), checked when due
        self.changed: set[str] = set()
        self.versions: dict[str, int] = {}        # cluster -> bumped when its pod ids change
        self.report_cache: dict[str, tuple] = {}  # cluster -> (running set, version, missing pods, foreign pods)
        self.generation = next(_GENERATIONS)      # unique across copies: a reader of take_changes starts over

    def beat(self, cluster: str) -> Beat:
        beat = self.beats.get(cluster)
        if beat is None:
            beat = self.beats[cluster] = Beat()
        return beat

    def load(self, jobs: dict[str, ActiveJob], beats: dict[str, Beat]) -> None:
        """Replace everything with ``jobs`` (a full read), whose ``beat`` objects are those of ``beats``."""
        cursor = self.cursor
        self.reset()
        self.cursor = cursor
        self.beats = beats
        self.jobs = jobs
        for job in jobs.values():
            self._index(job)

    def put(self, job: ActiveJob) -> None:
        old = self.jobs.get(job.id)
        if old is not None:
            self._unindex(old)
        self.jobs[job.id] = job
        self._index(job)
        self.changed.add(job.id)

    def drop(self, job_id: str) -> None:
        job = self.jobs.pop(job_id, None)
        if job is not None:
            self._unindex(job)
            self.changed.add(job_id)

    def _index(self, job: ActiveJob) -> None:
        cluster = job.cluster
        here = self.on_cluster.get(cluster)
        if here is None:
            here = self.on_cluster[cluster] = {}
            self.pods[cluster] = set()
            self.unseen[cluster] = set()
        here[job.id] = job
        if job.npods == 1:
            self.pods[cluster].add(job.id)
        else:
            self.pods[cluster].update(pod_ids(job.id, job.npods))
        self.versions[cluster] = self.versions.get(cluster, 0) + 1
        if not job.seen:
            self.unseen[cluster].add(job.id)
        if job.stop_requested:
            self.stopping.add(job.id)
        self.track_deadline(job)

    def _unindex(self, job: ActiveJob) -> None:
        cluster = job.cluster
        del self.on_cluster[cluster][job.id]
        if job.npods == 1:
            self.pods[cluster].discard(job.id)
        else:
            self.pods[cluster].difference_update(pod_ids(job.id, job.npods))
        self.versions[cluster] += 1
        self.unseen[cluster].discard(job.id)
        self.stopping.discard(job.id)

    def track_deadline(self, job: ActiveJob) -> None:
        """Note when a running job passes its active deadline (entries are checked, and may be stale, when due)."""
        if job.deadline and job.state == "running" and job.started is not None and not job.stop_requested:
            heap = self.deadlines
            if len(heap) > 2 * len(self.jobs) + 1024:   # mostly entries of jobs gone or changed: start over
                heap[:] = [(j.started + j.deadline, j.id) for j in self.jobs.values()
                           if j.deadline and j.state == "running" and j.started is not None and not j.stop_requested]
                heapq.heapify(heap)
            heapq.heappush(heap, (job.started + job.deadline, job.id))

    def take_changes(self) -> tuple[int, set[str]]:
        """``(generation, ids)``: the jobs put or dropped since the last call; a new generation means all of them."""
        changed, self.changed = self.changed, set()
        return self.generation, changed


def _dump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


class _JsonCache:
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


class Store:
    """The job store on ``url`` (``sqlite:///path.db`` or ``postgresql+psycopg://...``)."""

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
        self._json = _JsonCache()
        self._json_lock = threading.Lock()
        if migrate:
            self.migrate()

    # -- plumbing -----------------------------------------------------------
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
        """Every write of this thread, inside the block, calls ``fence.check(conn)`` first (raising :class:`Fenced`)."""
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

    def _loads(self, text: str) -> Any:
        with self._json_lock:
            return self._json(text)

    @staticmethod
    def _event(job: Mapping | Any, kind: str, now: float, cluster=None, node=None, reason: str = "") -> dict:
        get = job.get if isinstance(job, Mapping) else lambda k: getattr(job, k)
        return {"queue": get("queue"), "job_set": get("job_set"), "job_id": get("id"), "kind": kind, "time": now,
                "cluster": cluster, "node": node, "reason": reason}

    @staticmethod
    def _insert_events(conn: sa.Connection, rows: list[dict]) -> None:
        """Append ``rows`` to the event log; ``conn`` must be a :meth:`write` transaction (ids in commit order)."""
        if not conn.get_execution_options().get("flotilla_write"):
            raise RuntimeError("events are written only inside Store.write(), which serialises writers")
        if rows:
            # One shape for the whole batch: only events about one pod of a multi-pod job carry "pod".
            conn.execute(events.insert(), [row if "pod" in row else {**row, "pod": None} for row in rows])

    # -- queues -------------------------------------------------------------
    @staticmethod
    def _queue_row(spec: QueueSpec, now: float) -> dict:
        return {"name": spec.name, "weight": float(spec.weight), "limits": _dump(dict(spec.limits)),
                "owners": _dump(list(spec.owners)), "group_owners": _dump(list(spec.group_owners)),
                "retry_policy": dump_policy(spec.retry_policy), "namespaces": _dump(list(spec.namespaces)),
                "updated": now}

    @staticmethod
    def _queue_spec(row) -> QueueSpec:
        return QueueSpec(row.name, row.weight, json.loads(row.limits), tuple(json.loads(row.owners)),
                         tuple(json.loads(row.group_owners)), tuple(json.loads(row.namespaces)),
                         retry_policy=tuple(json.loads(row.retry_policy)) if row.retry_policy else ())

    def sync_queues(self, specs: Iterable[QueueSpec], now: float | None = None) -> None:
        """Make the config's queues exist with the config's values; queues made through the API stay."""
        now = time.time() if now is None else now
        with self.write() as conn:
            existing = {row.name for row in conn.execute(sa.select(queues.c.name))}
            for spec in specs:
                row = self._queue_row(spec, now)
                if spec.name in existing:
                    conn.execute(queues.update().where(queues.c.name == spec.name).values(**row))
                else:
                    conn.execute(queues.insert().values(created=now, **row))

    def create_queue(self, spec: QueueSpec, now: float | None = None) -> QueueSpec:
        now = time.time() if now is None else now
        with self.write() as conn:
            if conn.execute(sa.select(queues.c.name).where(queues.c.name == spec.name)).first():
                raise Conflict(f"queue {spec.name!r} already exists")
            conn.execute(queues.insert().values(created=now, **self._queue_row(spec, now)))
        return spec

    def update_queue(self, spec: QueueSpec, now: float | None = None) -> QueueSpec:
        now = time.time() if now is None else now
        with self.write() as conn:
            result = conn.execute(queues.update().where(queues.c.name == spec.name).values(**self._queue_row(spec, now)))
            if result.rowcount == 0:
                raise NotFound(f"queue {spec.name!r} does not exist")
        return spec

    def delete_queue(self, name: str, *, force: bool = False, by: str = "", now: float | None = None) -> dict:
        """Delete a queue and its whole history: jobs, job sets, events, clientIds, gang ids, its cordon.

        Refused (:class:`Conflict`) while the queue has jobs that are not
        finished; ``force`` cancels them first (queued ones at once; leased
        and running ones are asked to stop, and the deletion is refused until
        their clusters have stopped them, as Armada refuses). Nothing of the
        queue survives, so a queue created later under the same name starts
        empty. One ``deleted`` event per job, outside every job set, tells
        the scheduling loop's copies that the job is gone.
        """
        now = time.time() if now is None else now
        cancelled: dict[str, list[str]] = {"cancelled": [], "cancelling": []}
        if force and self.get_queue(name) is not None:
            cancelled = self.cancel(name, states=NONTERMINAL, by=by, now=now)
        with self.write() as conn:
            if not conn.execute(sa.select(queues.c.name).where(queues.c.name == name)).first():
                raise NotFound(f"queue {name!r} does not exist")
            active = conn.execute(sa.select(sa.func.count()).select_from(jobs)
                                  .where(jobs.c.queue == name, jobs.c.state.in_(NONTERMINAL))).scalar_one()
            if active and force:
                raise Conflict(f"queue {name!r} has {active} jobs still stopping on their clusters; "
                               f"delete it again when they have stopped")
            if active:
                raise Conflict(f"queue {name!r} has {active} active jobs; cancel them first, or delete with force=true")
            ids = list(conn.execute(sa.select(jobs.c.id).where(jobs.c.queue == name)).scalars())
            for part in chunks(ids):
                conn.execute(leases.delete().where(leases.c.job_id.in_(part)))
            conn.execute(events.delete().where(events.c.queue == name))
            conn.execute(jobs.delete().where(jobs.c.queue == name))
            conn.execute(job_sets.delete().where(job_sets.c.queue == name))
            conn.execute(cordons.delete().where(cordons.c.kind == "queue", cordons.c.name == name))
            conn.execute(queues.delete().where(queues.c.name == name))
            self._insert_events(conn, [{"queue": "", "job_set": "", "job_id": job_id, "kind": "deleted", "time": now,
                                        "cluster": None, "node": None, "reason": ""} for job_id in ids])
        return {"deleted": name, "jobs": len(ids), **cancelled}

    def get_queue(self, name: str) -> QueueSpec | None:
        with self.read() as conn:
            row = conn.execute(sa.select(queues).where(queues.c.name == name)).first()
        return self._queue_spec(row) if row else None

    # -- cordons: queues that schedule nothing new, nodes that take no new jobs ----------
    def set_cordon(self, kind: str, name: str, on: bool, now: float | None = None) -> bool:
        """Cordon (``on``) or uncordon ``name`` of ``kind`` (``queue`` or ``node``); True when it changed."""
        with self.write() as conn:
            present = conn.execute(sa.select(cordons.c.name).where(cordons.c.kind == kind,
                                                                   cordons.c.name == name)).first() is not None
            if on and not present:
                conn.execute(cordons.insert().values(kind=kind, name=name, since=time.time() if now is None else now))
            elif present and not on:
                conn.execute(cordons.delete().where(cordons.c.kind == kind, cordons.c.name == name))
            return present != on

    def cordoned(self, kind: str) -> set[str]:
        with self.read() as conn:
            return {name for (name,) in conn.execute(sa.select(cordons.c.name).where(cordons.c.kind == kind))}

    def list_queues(self) -> list[QueueSpec]:
        with self.read() as conn:
            return [self._queue_spec(row) for row in conn.execute(sa.select(queues).order_by(queues.c.name))]

    def queue_counts(self, name: str) -> dict[str, int]:
        return self.job_counts(name)

    def job_counts(self, queue: str | None = None) -> dict[str, int]:
        """Jobs by state, of one queue or of all."""
        query = sa.select(jobs.c.state, sa.func.count()).group_by(jobs.c.state)
        if queue is not None:
            query = query.where(jobs.c.queue == queue)
        with self.read() as conn:
            rows = conn.execute(query).all()
        return {state: 0 for state in STATES} | {state: count for state, count in rows}

    # -- submission ---------------------------------------------------------
    def submit(self, queue: str, job_set: str, owner: str, new_jobs: Sequence[NewJob],
               now: float | None = None) -> list[Submitted]:
        """Store a validated submission in one transaction; jobs whose clientId is known come back as they are.

        Raises :class:`SubmissionRejected` (nothing stored) when the queue is
        gone or a gang id is reused or half known.
        """
        now = time.time() if now is None else now
        with self.write() as conn:
            if not conn.execute(sa.select(queues.c.name).where(queues.c.name == queue)).first():
                raise SubmissionRejected([Rejection(j.index, j.client_id, "queue", f"queue {queue!r} does not exist")
                                          for j in new_jobs[:1]])
            client_ids = sorted({j.client_id for j in new_jobs if j.client_id is not None})
            known: dict[str, str] = {}
            for part in chunks(client_ids):
                for cid, job_id in conn.execute(sa.select(jobs.c.client_id, jobs.c.id)
                                                .where(jobs.c.queue == queue, jobs.c.client_id.in_(part))):
                    known[cid] = job_id
            gang_ids = sorted({j.gang_id for j in new_jobs if j.gang_id is not None})
            if gang_ids:
                stored_gangs: set[str] = set()
                for part in chunks(gang_ids):
                    stored_gangs.update(g for (g,) in conn.execute(
                        sa.select(jobs.c.gang_id).where(jobs.c.queue == queue, jobs.c.gang_id.in_(part)).distinct()))
                problems = []
                for gang in gang_ids:
                    members = [j for j in new_jobs if j.gang_id == gang]
                    seen = [j for j in members if j.client_id in known]
                    if seen and len(seen) != len(members):
                        first = next(j for j in members if j.client_id not in known)
                        problems.append(Rejection(first.index, first.client_id, "annotations.armadaproject.io/gangId",
                                                  f"gang {gang!r} is partly submitted already: resubmit all of its "
                                                  f"members with their clientIds, or none"))
                    elif not seen and gang in stored_gangs:
                        problems.append(Rejection(members[0].index, members[0].client_id,
                                                  "annotations.armadaproject.io/gangId",
                                                  f"gang id {gang!r} is already used in queue {queue!r}; "
                                                  f"gang ids must not be reused"))
                if problems:
                    raise SubmissionRejected(problems)
            out: list[Submitted] = []
            rows: list[dict] = []
            event_rows: list[dict] = []
            fresh: dict[str, str] = {}
            for job in new_jobs:
                if job.client_id is not None and job.client_id in known:
                    out.append(Submitted(job.index, known[job.client_id], job.client_id, True))
                    continue
                if job.client_id is not None and job.client_id in fresh:
                    out.append(Submitted(job.index, fresh[job.client_id], job.client_id, True))
                    continue
                job_id = new_job_id(now)
                if job.client_id is not None:
                    fresh[job.client_id] = job_id
                rows.append({
                    "id": job_id, "queue": queue, "job_set": job_set, "client_id": job.client_id, "owner": owner,
                    "priority": job.priority, "priority_class": job.priority_class, "submitted": now,
                    "state": QUEUED, "cluster": None, "node": None,
                    "pods": _dump([pod.to_dict() for pod in job.pods]), "npods": len(job.pods),
                    "gang_id": job.gang_id, "gang_cardinality": job.gang_cardinality, "gang_pods": job.gang_pods,
                    "grace_period": job.grace_period, "deadline": job.deadline,
                    "annotations": _dump({**job.annotations, OWNER_ANNOTATION: owner}), "spec": _dump(job.spec), "retries": 0,
                    "retry_policy": dump_policy(job.retry_policy),
                    "stop_requested": STOP_NONE, "reason": "", "started": None, "finished": None, "updated": now,
                })
                ev = {"queue": queue, "job_set": job_set, "job_id": job_id, "time": now, "cluster": None,
                      "node": None, "reason": ""}
                event_rows.append({**ev, "kind": "submitted", "reason": f"by {owner}"})
                event_rows.append({**ev, "kind": "queued"})
                out.append(Submitted(job.index, job_id, job.client_id, False))
            if rows:
                if not conn.execute(sa.select(job_sets.c.name)
                                    .where(job_sets.c.queue == queue, job_sets.c.name == job_set)).first():
                    conn.execute(job_sets.insert().values(queue=queue, name=job_set, created=now))
                conn.execute(jobs.insert(), rows)
                self._insert_events(conn, event_rows)
        return out

    # -- in-cluster pods (flotilla.service.intake) -------------------------------
    def known_jobs(self, job_ids: Iterable[str]) -> dict[str, tuple[str | None, str]]:
        """Which of ``job_ids`` exist: id -> (gang id, state)."""
        out: dict[str, tuple[str | None, str]] = {}
        with self.read() as conn:
            for part in chunks(sorted(set(job_ids))):
                for row in conn.execute(sa.select(jobs.c.id, jobs.c.gang_id, jobs.c.state).where(jobs.c.id.in_(part))):
                    out[row.id] = (row.gang_id, row.state)
        return out

    def gang_live(self, queue: str, gang_id: str) -> tuple[int, int, int]:
        """A stored gang's live members: ``(cardinality, queued, started)``; ``(0, 0, 0)`` when none is live.

        ``started`` counts the members leased, pending or running; finished members are not counted (a gang
        whose members all finished is formed anew by pods that come later).
        """
        with self.read() as conn:
            rows = conn.execute(sa.select(jobs.c.gang_cardinality, jobs.c.state, sa.func.count())
                                .where(jobs.c.queue == queue, jobs.c.gang_id == gang_id,
                                       jobs.c.state.in_(NONTERMINAL))
                                .group_by(jobs.c.gang_cardinality, jobs.c.state)).all()
        cardinality = max((row[0] or 0 for row in rows), default=0)
        queued = sum(row[2] for row in rows if row[1] == QUEUED)
        started = sum(row[2] for row in rows if row[1] != QUEUED)
        return cardinality, queued, started

    def queued_from_cluster(self, cluster: str) -> dict[str, str]:
        """The queued in-cluster jobs of ``cluster``: job id -> pod uid (a new leader's reconciliation)."""
        with self.read() as conn:
            return dict(conn.execute(sa.select(jobs.c.id, jobs.c.pod_uid).where(
                jobs.c.state == QUEUED, jobs.c.source == "cluster",
                jobs.c.spec.like(f'%"cluster":{json.dumps(cluster)}%'))).all())

    def cancelled_from_cluster(self, after: int, limit: int = 10_000) -> tuple[int, list[tuple[str, ...]]]:
        """In-cluster jobs cancelled (and still so) by an event after ``after``: ``(cursor, rows)``, each row
        ``(job id, pod namespace, pod name, pod uid, reason)``; ``cursor`` is where the next call starts (the
        last event looked at: new events are read once, not again each call). A job deleted with its queue
        (``deleted`` events; its row is gone) comes as ``(job id, None, None, None, "its queue was deleted")``:
        which pod was its is known only to the cluster (the pod's uid makes its id)."""
        with self.read() as conn:
            top = self._last_event_id(conn)
            found = conn.execute(sa.select(events.c.id, events.c.job_id, events.c.kind)
                                 .where(events.c.id > after, events.c.id <= top,
                                        events.c.kind.in_((CANCELLED, "deleted")))
                                 .order_by(events.c.id).limit(limit)).all()
            cursor = found[-1][0] if len(found) == limit else top
            rows: list[tuple[str, ...]] = [(row[1], None, None, None, "its queue was deleted")
                                           for row in found if row[2] == "deleted"]
            for part in chunks(sorted({row[1] for row in found if row[2] == CANCELLED})):
                rows.extend(tuple(row) for row in conn.execute(
                    sa.select(jobs.c.id, jobs.c.pod_namespace, jobs.c.pod_name, jobs.c.pod_uid, jobs.c.reason)
                    .where(jobs.c.id.in_(part), jobs.c.source == "cluster", jobs.c.state == CANCELLED)))
        return max(cursor, after), rows

    def adopt_bound(self, cluster: str, bound: Mapping[str, tuple[str, bool]], now: float) -> list[str]:
        """Queued in-cluster jobs whose pods a scheduler bound (``bound``: job id -> (node, running)): each
        becomes what the bind made it, leased on ``cluster`` at that node, then pending (or running), as if this
        leader had bound it. Jobs not queued are left as they are. Returns the ids adopted.

        This is how a leader takes over a bind its predecessor made just before it stopped (the job queued
        again meanwhile, or never marked): the pod runs once, on its node, and is never bound a second time.
        """
        adopted: list[str] = []
        if not bound:
            return adopted
        with self.read() as conn:   # mostly binds this leader made and recorded: no write for them
            queued = []
            for part in chunks(sorted(bound)):
                queued.extend(conn.execute(sa.select(jobs.c.id).where(jobs.c.id.in_(part), jobs.c.state == QUEUED,
                                                                      jobs.c.source == "cluster")).scalars())
        if not queued:
            return adopted
        with self.write() as conn:
            rows = []
            for part in chunks(sorted(queued)):
                rows.extend(conn.execute(sa.select(jobs.c.id, jobs.c.queue, jobs.c.job_set, jobs.c.pod_namespace,
                                                   jobs.c.pod_name)
                                         .where(jobs.c.id.in_(part), jobs.c.state == QUEUED,
                                                jobs.c.source == "cluster")))
            event_rows = []
            for r in rows:
                node, running = bound[r.id]
                conn.execute(leases.delete().where(leases.c.job_id == r.id))
                conn.execute(leases.insert().values(job_id=r.id, cluster=cluster, nodes=_dump([node]), leased_at=now,
                                                    renewed_at=now, pods_running=1 if running else 0, pods_done=0))
                conn.execute(jobs.update().where(jobs.c.id == r.id, jobs.c.state == QUEUED).values(
                    state=RUNNING if running else PENDING, cluster=cluster, node=node, updated=now,
                    started=now if running else None))
                said = f"pod {r.pod_namespace}/{r.pod_name} found bound to node {node} by Flotilla"
                event_rows.append(self._event(r._mapping, "leased", now, cluster, node, said))
                event_rows.append(self._event(r._mapping, "pending", now, cluster, node))
                if running:
                    event_rows.append(self._event(r._mapping, "running", now, cluster, node))
                adopted.append(r.id)
            self._insert_events(conn, event_rows)
        return adopted

    def intake(self, rows: Sequence[dict], gone: Mapping[str, str], now: float | None = None) -> list[str]:
        """In-cluster pods in one transaction: ``rows`` (job rows keyed by their pod's uid) stored unless their
        id is known, and the queued jobs of ``gone`` (id -> why) cancelled. Returns the ids stored.

        Idempotent: a pod offered twice (a new leader offers every waiting pod again) is stored once.
        """
        now = time.time() if now is None else now
        stored: list[str] = []
        if not rows and not gone:
            return stored
        with self.write() as conn:
            known: set[str] = set()
            for part in chunks(sorted({row["id"] for row in rows})):
                known.update(conn.execute(sa.select(jobs.c.id).where(jobs.c.id.in_(part))).scalars())
            queue_names = set(conn.execute(sa.select(queues.c.name)).scalars())
            fresh, event_rows, sets = [], [], set()
            for row in rows:
                if row["id"] in known or row["queue"] not in queue_names:
                    continue
                known.add(row["id"])
                fresh.append({"client_id": None, "state": QUEUED, "cluster": None, "node": None, "retries": 0,
                              "stop_requested": STOP_NONE, "reason": "", "started": None, "finished": None,
                              "updated": now, "source": "cluster", **row})
                ev = {"queue": row["queue"], "job_set": row["job_set"], "job_id": row["id"], "time": now,
                      "cluster": None, "node": None, "reason": ""}
                event_rows.append({**ev, "kind": "submitted",
                                   "reason": f"pod {row['pod_namespace']}/{row['pod_name']} (uid {row['pod_uid']})"})
                event_rows.append({**ev, "kind": "queued"})
                sets.add((row["queue"], row["job_set"]))
                stored.append(row["id"])
            for queue, job_set in sorted(sets):
                if not conn.execute(sa.select(job_sets.c.name)
                                    .where(job_sets.c.queue == queue, job_sets.c.name == job_set)).first():
                    conn.execute(job_sets.insert().values(queue=queue, name=job_set, created=now))
            if fresh:
                conn.execute(jobs.insert(), fresh)
            cancelled = []
            for part in chunks(sorted(gone)):
                cancelled.extend(conn.execute(sa.select(jobs.c.id, jobs.c.queue, jobs.c.job_set)
                                              .where(jobs.c.id.in_(part), jobs.c.state == QUEUED)))
            for r in cancelled:
                conn.execute(jobs.update().where(jobs.c.id == r.id, jobs.c.state == QUEUED)
                             .values(state=CANCELLED, reason=gone[r.id], finished=now, updated=now))
                event_rows.append(self._event(r._mapping, "cancelled", now, reason=gone[r.id]))
            self._insert_events(conn, event_rows)
        return stored

    # -- cancel / reprioritize ------------------------------------------------
    def _select_jobs(self, conn, queue: str, job_set: str | None, job_ids: Sequence[str] | None,
                     states: Sequence[str]) -> list:
        cols = [jobs.c.id, jobs.c.queue, jobs.c.job_set, jobs.c.state, jobs.c.cluster, jobs.c.node,
                jobs.c.stop_requested]
        base = sa.select(*cols).where(jobs.c.queue == queue, jobs.c.state.in_(states))
        if job_set is not None:
            base = base.where(jobs.c.job_set == job_set)
        if job_ids is None:
            return list(conn.execute(base.order_by(jobs.c.id)))
        found = []
        for part in chunks(list(job_ids)):
            found.extend(conn.execute(base.where(jobs.c.id.in_(part))))
        return sorted(found, key=lambda r: r.id)

    def missing_jobs(self, queue: str, job_set: str | None, job_ids: Sequence[str]) -> list[str]:
        """Which of ``job_ids`` are not jobs of ``queue`` (and ``job_set``): the API answers 404 for them."""
        with self.read() as conn:
            found = {r.id for r in self._select_jobs(conn, queue, job_set, job_ids, STATES)}
        return [job_id for job_id in job_ids if job_id not in found]

    def cancel(self, queue: str, job_set: str | None = None, job_ids: Sequence[str] | None = None,
               states: Sequence[str] | None = None, by: str = "", now: float | None = None) -> dict[str, list[str]]:
        """Cancel queued jobs now; ask the scheduling loop to stop leased/pending/running ones on their cluster.

        Returns ``{"cancelled": [...], "cancelling": [...]}``.
        """
        now = time.time() if now is None else now
        wanted = tuple(s for s in (states or NONTERMINAL) if s in NONTERMINAL)
        reason = f"cancelled by {by}" if by else "cancelled"
        with self.write() as conn:
            rows = self._select_jobs(conn, queue, job_set, job_ids, wanted)
            queued_ids = [r.id for r in rows if r.state == QUEUED]
            active = [r for r in rows if r.state in ACTIVE and r.stop_requested != STOP_CANCEL]
            for part in chunks(queued_ids):
                conn.execute(jobs.update().where(jobs.c.id.in_(part), jobs.c.state == QUEUED)
                             .values(state=CANCELLED, reason=reason, finished=now, updated=now))
            for part in chunks([r.id for r in active]):
                conn.execute(jobs.update().where(jobs.c.id.in_(part))
                             .values(stop_requested=STOP_CANCEL, reason=reason, updated=now))
            # A queued job is cancelled at once; an active one is "cancelling" until its cluster stops it.
            self._insert_events(conn, [self._event(r._mapping, "cancelled", now, reason=reason)
                                       for r in rows if r.state == QUEUED]
                                + [self._event(r._mapping, "cancelling", now, r.cluster, r.node, reason)
                                   for r in active])
        return {"cancelled": queued_ids, "cancelling": [r.id for r in rows if r.state in ACTIVE]}

    def reprioritize(self, queue: str, priority: int, job_set: str | None = None,
                     job_ids: Sequence[str] | None = None, by: str = "", now: float | None = None) -> list[str]:
        now = time.time() if now is None else now
        with self.write() as conn:
            rows = self._select_jobs(conn, queue, job_set, job_ids, NONTERMINAL)
            for part in chunks([r.id for r in rows]):
                conn.execute(jobs.update().where(jobs.c.id.in_(part)).values(priority=priority, updated=now))
            self._insert_events(conn, [self._event(r._mapping, "reprioritized", now,
                                                   reason=f"priority {priority}" + (f" by {by}" if by else ""))
                                       for r in rows])
        return [r.id for r in rows]

    # -- reading --------------------------------------------------------------
    @staticmethod
    def _job_dict(row) -> dict:
        return {
            "id": row.id, "queue": row.queue, "jobSet": row.job_set, "clientId": row.client_id,
            "state": row.state, "owner": row.owner, "priority": row.priority, "priorityClass": row.priority_class,
            "submitted": row.submitted, "cluster": row.cluster, "node": row.node, "pods": json.loads(row.pods),
            "gang": ({"id": row.gang_id, "cardinality": row.gang_cardinality} if row.gang_id else None),
            "terminationGracePeriodSeconds": row.grace_period, "activeDeadlineSeconds": row.deadline,
            "annotations": json.loads(row.annotations), "retries": row.retries, "reason": row.reason,
            "started": row.started, "finished": row.finished, "updated": row.updated,
            "cancelRequested": row.stop_requested == STOP_CANCEL,
            "source": row.source,
            **({"pod": {"namespace": row.pod_namespace, "name": row.pod_name, "uid": row.pod_uid}}
               if row.source == "cluster" else {}),
        }

    def get_job(self, job_id: str) -> dict | None:
        with self.read() as conn:
            row = conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).first()
        return self._job_dict(row) if row else None

    def job_spec(self, job_id: str) -> dict | None:
        return self.job_specs([job_id]).get(job_id)

    def job_specs(self, job_ids: Iterable[str]) -> dict[str, dict]:
        """The submitted specs of ``job_ids`` (those that exist), by id, read in batches of primary-key lookups.

        The scheduling loop asks at lease time, for the jobs it has just
        leased onto clusters that create real pods: specs stay out of the
        records scheduling reads every cycle (:class:`QueuedJob`,
        :class:`ActiveJob`), so a cycle with 100,000 running jobs reads none.
        """
        out: dict[str, dict] = {}
        with self.read() as conn:
            for part in chunks(sorted(set(job_ids))):
                for job_id, text in conn.execute(sa.select(jobs.c.id, jobs.c.spec).where(jobs.c.id.in_(part))):
                    out[job_id] = json.loads(text)
        return out

    def list_jobs(self, queue: str | None = None, job_set: str | None = None, states: Sequence[str] | None = None,
                  limit: int | None = None) -> list[dict]:
        query = sa.select(jobs)
        if queue is not None:
            query = query.where(jobs.c.queue == queue)
        if job_set is not None:
            query = query.where(jobs.c.job_set == job_set)
        if states:
            query = query.where(jobs.c.state.in_(list(states)))
        query = query.order_by(jobs.c.id)
        if limit:
            query = query.limit(limit)
        with self.read() as conn:
            return [self._job_dict(row) for row in conn.execute(query)]

    def job_states(self) -> dict[str, str]:
        with self.read() as conn:
            return dict(conn.execute(sa.select(jobs.c.id, jobs.c.state)).all())

    def count_jobs(self, states: Sequence[str] | None = None) -> int:
        query = sa.select(sa.func.count()).select_from(jobs)
        if states:
            query = query.where(jobs.c.state.in_(list(states)))
        with self.read() as conn:
            return conn.execute(query).scalar_one()

    def events(self, queue: str, job_set: str, after: int = 0, limit: int = 1000) -> list[dict]:
        """The job set's events with id > ``after``, oldest first."""
        with self.read() as conn:
            rows = conn.execute(sa.select(events).where(events.c.queue == queue, events.c.job_set == job_set,
                                                        events.c.id > after)
                                .order_by(events.c.id).limit(limit)).all()
        return [event_dict(row) for row in rows]

    def all_events(self, after: int = 0, limit: int = 100000) -> list[dict]:
        with self.read() as conn:
            rows = conn.execute(sa.select(events).where(events.c.id > after).order_by(events.c.id).limit(limit)).all()
        return [event_dict(row) for row in rows]

    def last_event_id(self) -> int:
        with self.read() as conn:
            return self._last_event_id(conn)

    @staticmethod
    def _last_event_id(conn) -> int:
        return conn.execute(sa.select(sa.func.max(events.c.id))).scalar_one() or 0

    # -- the scheduling loop ----------------------------------------------------
    _QUEUED_COLUMNS = (jobs.c.id, jobs.c.queue, jobs.c.job_set, jobs.c.priority, jobs.c.priority_class,
                       jobs.c.submitted, jobs.c.pods, jobs.c.npods, jobs.c.gang_id, jobs.c.gang_pods,
                       jobs.c.annotations, jobs.c.grace_period, jobs.c.deadline)

    def _queued(self, rows) -> list[QueuedJob]:
        loads = self._loads
        return [QueuedJob(r[0], r[1], r[2], r[3], r[4], r[5], loads(r[6]), r[7], r[8], r[9], loads(r[10]), r[11], r[12])
                for r in rows]

    def load_queued(self) -> list[QueuedJob]:
        """Every queued job, in one query (no per-job round trips)."""
        with self.read() as conn:
            rows = conn.execute(sa.select(*self._QUEUED_COLUMNS).where(jobs.c.state == QUEUED)).all()
        return self._queued(rows)

    def queued_changes(self, after: int) -> tuple[int, list[str], dict[str, QueuedJob]]:
        """What changed since event ``after``: ``(cursor, ids, queued)``.

        ``ids`` are the jobs with an event after ``after`` (in the order of
        their first such event), ``queued`` those of them that are queued now,
        ``cursor`` the last event id looked at. Every move into or out of
        ``queued``, and every change to a queued job that scheduling reads,
        writes an event, and writes are serialised, so applying this to the
        queued jobs as of ``after`` gives the queued jobs as of ``cursor``
        (a job changed again after ``cursor`` is read as it is now, and
        again next time).
        """
        with self.read() as conn:
            cursor, ids = self._changed_since(conn, after)
            rows = []
            for part in chunks(ids):
                # By id alone (the primary key), the state tested here: with "AND state = 'queued'" SQLite
                # walks the state index, every queued job, once per chunk.
                rows.extend(row[1:] for row in conn.execute(sa.select(jobs.c.state, *self._QUEUED_COLUMNS)
                                                            .where(jobs.c.id.in_(part)))
                            if row[0] == QUEUED)
        return cursor, ids, {job.id: job for job in self._queued(rows)}

    def _load_active(self, conn, ids: Sequence[str] | None = None,
                     beats: dict[str, Beat] | None = None) -> dict[str, ActiveJob]:
        """Every active job (with its lease), or those of ``ids`` that are active.

        ``beats``: the clusters' last reports the jobs share; read from the
        store when not given (and then also when ``ids`` is given).
        """
        if beats is None:
            beats = self._read_beats(conn)
        query = (sa.select(*self._QUEUED_COLUMNS, jobs.c.state, jobs.c.retries, jobs.c.stop_requested,
                           jobs.c.started, leases.c.cluster, leases.c.nodes, leases.c.leased_at, leases.c.renewed_at,
                           leases.c.pods_running, leases.c.pods_done, leases.c.seen)
                 .select_from(leases.join(jobs, jobs.c.id == leases.c.job_id)))
        queries = [query] if ids is None else [query.where(leases.c.job_id.in_(part)) for part in chunks(ids)]
        loads = self._loads
        out = {}
        for q in queries:
            for r in conn.execute(q):
                beat = beats.get(r[17])
                if beat is None:
                    beat = beats[r[17]] = Beat()
                out[r[0]] = ActiveJob(r[0], r[1], r[2], r[3], r[4], r[5], loads(r[6]), r[7], r[8], r[9], loads(r[10]),
                                      r[11], r[12], r[13], r[14], r[15], r[16], r[17], json.loads(r[18]),
                                      r[19], r[20], r[21], r[22], bool(r[23]), beat)
        return out

    @staticmethod
    def _read_beats(conn) -> dict[str, Beat]:
        return {row.cluster: Beat(row.reported_at) for row in conn.execute(sa.select(cluster_reports))}

    def _changed_since(self, conn, after: int) -> tuple[int, list[str]]:
        """``(cursor, ids)``: the last event id, and the jobs with an event after ``after`` (first event first)."""
        cursor = self._last_event_id(conn)
        if cursor <= after:
            return after, []
        ids = list(conn.execute(sa.select(events.c.job_id).where(events.c.id > after, events.c.id <= cursor)
                                .group_by(events.c.job_id).order_by(sa.func.min(events.c.id))).scalars())
        return cursor, ids

    def _refresh_active(self, conn, copy: "ActiveCopy") -> "ActiveCopy":
        """Bring ``copy`` up to date inside a write transaction (no other writer can interleave)."""
        if copy.cursor is None:
            cursor, ids, whole = self._last_event_id(conn), [], True
        else:
            cursor, ids = self._changed_since(conn, copy.cursor)
            # Most of it changed (a burst of leases): one scan is cheaper than as many lookups by id.
            whole = len(ids) > copy.RELOAD_MIN and len(ids) > len(copy.jobs) * 2 // 3
        if whole:
            beats = self._read_beats(conn)
            copy.load(self._load_active(conn, beats=beats), beats)
        elif ids:
            fresh = self._load_active(conn, ids, copy.beats)
            held = copy.jobs
            for job_id in ids:
                job = fresh.get(job_id)
                if job is None:
                    copy.drop(job_id)
                elif held.get(job_id) != job:   # an event that changed nothing here keeps the object
                    copy.put(job)
        copy.cursor = cursor
        return copy

    def load_active(self) -> dict[str, ActiveJob]:
        with self.read() as conn:
            return self._load_active(conn)

    def ingest(self, reports: Mapping[str, "ClusterReport"], now: float, lease_timeout: float,
               max_retries: int, copy: "ActiveCopy | None" = None) -> "IngestResult":
        """One transaction per cycle, before scheduling: what clusters reported, lease renewal and expiry.

        ``reports`` has one entry per cluster that answered this cycle
        (events since the last poll, ids of the pods it runs). Leases of
        jobs a cluster runs are renewed; leases not renewed within
        ``lease_timeout`` expire (the job is queued again, or failed after
        ``max_retries`` expiries). Returns the active jobs after all that and
        what to stop on each cluster.

        ``copy``: the caller's :class:`ActiveCopy`, kept between calls; only
        the jobs with an event since the last call are read (under the
        write lock, so nothing interleaves), instead of every active job.
        A cycle in which every cluster lists what it listed last time writes
        one ``cluster_reports`` row per cluster and no lease.
        """
        from flotilla.service.leases import apply_reports  # the rules live next to the loop

        try:
            with self.write() as conn:
                if copy is None:
                    beats = self._read_beats(conn)
                    active = ActiveCopy()
                    active.load(self._load_active(conn, beats=beats), beats)
                else:
                    active = self._refresh_active(conn, copy)
                result = apply_reports(active, reports, now, lease_timeout, max_retries, self._policies(conn))
                self._write_changes(conn, result.changes, now)
                if result.late_successes:
                    self._finish_late_successes(conn, result.late_successes, now)
        except BaseException:
            if copy is not None:
                copy.reset()  # apply_reports changed the copy; the store did not take it
            raise
        return result

    @staticmethod
    def _policies(conn) -> Policies:
        """The retry rules of jobs and queues, read in ``conn``'s transaction only when a run fails."""
        def read_job(job_id: str) -> str | None:
            return conn.execute(sa.select(jobs.c.retry_policy).where(jobs.c.id == job_id)).scalar()

        def read_queue(name: str) -> str | None:
            return conn.execute(sa.select(queues.c.retry_policy).where(queues.c.name == name)).scalar()

        return Policies(read_job, read_queue)

    @staticmethod
    def _update_many(conn, table, key, updates: Mapping[str, dict]) -> None:
        """``UPDATE table SET ... WHERE key = id`` for many rows, grouped by the columns they set."""
        groups: dict[tuple, list[dict]] = {}
        for row_id, values in updates.items():
            groups.setdefault(tuple(sorted(values)), []).append(
                {"k_": row_id, **{f"v_{name}": value for name, value in values.items()}})
        for columns, params in groups.items():
            stmt = table.update().where(key == sa.bindparam("k_")).values({c: sa.bindparam(f"v_{c}") for c in columns})
            conn.execute(stmt, params)

    def _finish_late_successes(self, conn, late, now: float) -> None:
        """Jobs queued again after their node was lost, whose first run reported success once the node returned
        (``IngestResult.late_successes``): succeeded, if still queued (never leased again since)."""
        rows = []
        for job_id, cluster, node, when, reason in late:
            row = conn.execute(sa.select(jobs.c.id, jobs.c.queue, jobs.c.job_set)
                               .where(jobs.c.id == job_id, jobs.c.state == QUEUED)).first()
            if row is None:
                continue
            conn.execute(jobs.update().where(jobs.c.id == job_id, jobs.c.state == QUEUED)
                         .values(state=SUCCEEDED, reason=reason, finished=when, updated=now))
            rows.append(self._event(row._mapping, "succeeded", when, cluster, node, reason))
        self._insert_events(conn, rows)

    def _write_changes(self, conn, changes: "Changes", now: float) -> None:
        self._update_many(conn, jobs, jobs.c.id, {k: {**v, "updated": now} for k, v in changes.job_updates.items()})
        self._update_many(conn, leases, leases.c.job_id,
                          {k: v for k, v in changes.lease_updates.items() if k not in changes.lease_deletes})
        for part in chunks(sorted(changes.lease_deletes)):
            conn.execute(leases.delete().where(leases.c.job_id.in_(part)))
        for cluster, value in changes.beats.items():
            # Renews every lease of the cluster marked seen (see ActiveJob.renewed_at): one row, not one per job.
            if conn.execute(cluster_reports.update().where(cluster_reports.c.cluster == cluster)
                            .values(reported_at=value)).rowcount == 0:
                conn.execute(cluster_reports.insert().values(cluster=cluster, reported_at=value))
        self._insert_events(conn, changes.events)

    def record_cycle(self, leased: Mapping[str, tuple[str, list[str]]], preempted: Mapping[str, str],
                     now: float) -> tuple[set[str], set[str]]:
        """A cycle's decisions in one transaction: leases for placed jobs, preemptions.

        ``leased`` maps job id -> (cluster, nodes per pod); ``preempted`` maps
        job id -> reason. Jobs cancelled while the cycle ran are left out.
        Returns (ids leased, ids preempted) as recorded.
        """
        done_leased: set[str] = set()
        done_preempted: set[str] = set()
        if not leased and not preempted:   # an idle cycle: no transaction (nothing to fence either)
            return done_leased, done_preempted
        with self.write() as conn:
            ids = sorted(leased)
            rows = []
            for part in chunks(ids):
                rows.extend(conn.execute(sa.select(jobs.c.id, jobs.c.queue, jobs.c.job_set)
                                         .where(jobs.c.id.in_(part), jobs.c.state == QUEUED)))
            lease_rows, event_rows = [], []
            by_cluster_node: dict[tuple[str, str], list[str]] = {}
            for r in rows:
                cluster, nodes = leased[r.id]
                node_text = ",".join(dict.fromkeys(nodes))
                by_cluster_node.setdefault((cluster, node_text), []).append(r.id)
                lease_rows.append({"job_id": r.id, "cluster": cluster, "nodes": _dump(nodes), "leased_at": now,
                                   "renewed_at": now, "pods_running": 0, "pods_done": 0})
                event_rows.append(self._event(r._mapping, "leased", now, cluster, node_text))
                done_leased.add(r.id)
            for (cluster, node_text), job_ids in by_cluster_node.items():
                for part in chunks(job_ids):
                    conn.execute(jobs.update().where(jobs.c.id.in_(part))
                                 .values(state=LEASED, cluster=cluster, node=node_text, updated=now))
            for part in chunks(sorted(done_leased)):
                conn.execute(leases.delete().where(leases.c.job_id.in_(part)))
            if lease_rows:
                conn.execute(leases.insert(), lease_rows)
            prow = []
            for part in chunks(sorted(preempted)):
                prow.extend(conn.execute(sa.select(jobs.c.id, jobs.c.queue, jobs.c.job_set, jobs.c.cluster,
                                                   jobs.c.node).where(jobs.c.id.in_(part),
                                                                      jobs.c.state.in_(ACTIVE))))
            for r in prow:
                conn.execute(jobs.update().where(jobs.c.id == r.id)
                             .values(state=PREEMPTED, reason=preempted[r.id], finished=now, updated=now))
                event_rows.append(self._event(r._mapping, "preempted", now, r.cluster, r.node, preempted[r.id]))
                done_preempted.add(r.id)
            for part in chunks(sorted(done_preempted)):
                conn.execute(leases.delete().where(leases.c.job_id.in_(part)))
            self._insert_events(conn, event_rows)
        return done_leased, done_preempted

    def mark_pending(self, job_ids: Iterable[str], now: float,
                     known: Mapping[str, tuple[str, str, str, str]] | None = None) -> int:
        """Jobs a cluster accepted: leased -> pending.

        ``known`` (job id -> queue, job set, cluster, node), when the caller
        has it, saves reading the rows back: only the scheduling loop moves a
        job out of ``leased``, so the rows it just leased are still leased.
        """
        ids = sorted(job_ids)
        if not ids:
            return 0
        with self.write() as conn:
            if known is None:
                rows = []
                for part in chunks(ids):
                    rows.extend(conn.execute(sa.select(jobs.c.id, jobs.c.queue, jobs.c.job_set, jobs.c.cluster,
                                                       jobs.c.node).where(jobs.c.id.in_(part), jobs.c.state == LEASED)))
                found = [(r.id, r.queue, r.job_set, r.cluster, r.node) for r in rows]
            else:
                found = [(i, *known[i]) for i in ids]
            for part in chunks([f[0] for f in found]):
                conn.execute(jobs.update().where(jobs.c.id.in_(part), jobs.c.state == LEASED)
                             .values(state=PENDING, updated=now))
            self._insert_events(conn, [{"queue": q, "job_set": js, "job_id": i, "kind": "pending", "time": now,
                                        "cluster": c, "node": n, "reason": ""} for i, q, js, c, n in found])
        return len(found)


def event_dict(row) -> dict:
    out = {"id": row.id, "queue": row.queue, "jobSet": row.job_set, "jobId": row.job_id, "kind": row.kind,
           "time": row.time, "cluster": row.cluster, "node": row.node, "reason": row.reason}
    if row.pod is not None:   # about one pod of a multi-pod job
        out["podNumber"] = row.pod
    return out


def rebuild_states(event_list: Iterable[Mapping]) -> dict[str, str]:
    """A job's state from its events alone: the state its last state-changing event put it in."""
    states: dict[str, str] = {}
    for ev in event_list:
        state = EVENT_STATE.get(ev["kind"])
        job_id = ev.get("jobId", ev.get("job_id"))
        if state is not None:
            states[job_id] = state
        elif ev["kind"] == "submitted":
            states.setdefault(job_id, QUEUED)
    return states


def _sqlite_connect(dbapi_conn, _record) -> None:
    dbapi_conn.isolation_level = None  # we issue BEGIN ourselves (see _sqlite_begin)
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")   # durable against a process crash (kill -9) in WAL mode
    cur.execute("PRAGMA busy_timeout=60000")
    cur.close()


def _sqlite_begin(conn) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("flotilla_write") else "BEGIN")


# Imported late for type names only.
from flotilla.service.leases import Changes, ClusterReport, IngestResult  # noqa: E402
