"""Leases: the active jobs (a job with a lease), the loop's copy of them, and the lease transactions.

The model lives here: :class:`ActiveJob`, :class:`Beat` (a cluster's last
report, which renews every lease it listed), :class:`ActiveCopy` (the
active jobs kept between cycles, with their indexes) and :class:`Changes`
(what a cycle's rules decided, to write). The rules themselves, what a
cluster's report does to its jobs, are :mod:`flotilla.service.leases`';
:meth:`Leases.update_active` runs them inside the one write transaction
that brings the copy up to date and writes what they decided, so nothing
interleaves. Pods: a job of one pod is known to clusters by its id; a job
of several pods (``podSpecs``) by ``ID#0``, ``ID#1``, ...
"""

from __future__ import annotations

import heapq
import itertools
import json
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

import sqlalchemy as sa

from flotilla.core.model import min_available_of
from flotilla.service.retry import Policies
from flotilla.service.schema import cluster_reports, jobs, leases, queues
from flotilla.service.store.engine import (Database, changed_since, chunks, dump, event_row, insert_events,
                                           last_event_id, update_many)
from flotilla.service.store.records import ACTIVE, LEASED, PENDING, PREEMPTED, QUEUED, QUEUED_COLUMNS, SUCCEEDED, QueuedJob


def pod_ids(job_id: str, npods: int) -> list[str]:
    return [job_id] if npods == 1 else [f"{job_id}#{i}" for i in range(npods)]


def job_of(pod_id: str) -> str:
    return pod_id.split("#", 1)[0]


def runs_all_together(job: QueuedJob) -> bool:
    """Whether ``job``'s gang (it has a ``gang_id``) runs all together: every gang but an elastic one, whose
    minimum is below its cardinality (read as :mod:`flotilla.service.snapshot` reads it)."""
    return not min_available_of(job.annotations, job.gang_pods or job.npods)


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
    walking them all (renewals, expiry, stops) 0.35 s more.
    :meth:`Leases.update_active` brings the copy up to date from the jobs with
    an event since ``cursor`` (every change to an active job that the rules
    read writes one: leased, pending, running, cancelling, reprioritized,
    ...), then applies the cycle's reports to it and to the store in the
    same transaction. The indexes let the rules touch only what changed: per
    cluster, its jobs, their pod ids and those its last report did not list;
    the jobs asked to stop; a heap of active deadlines; per gang that runs all
    together, its active members. Every change of a
    job goes through :meth:`put` and :meth:`drop`, which also note the job
    id in ``changed`` for the loop's snapshot (:meth:`take_changes`); the
    rules change the indexes only through the methods below. A failed
    transaction resets the copy; the next cycle reads all.
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
        self.gangs: dict[tuple[str, str], set[str]] = {}   # (queue, gang id) -> active members (not elastic gangs)
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
        if job.gang_id and runs_all_together(job):
            self.gangs.setdefault((job.queue, job.gang_id), set()).add(job.id)
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
        if job.gang_id:
            key = (job.queue, job.gang_id)
            members = self.gangs.get(key)
            if members is not None:
                members.discard(job.id)
                if not members:
                    del self.gangs[key]

    def gang_mates(self, job: ActiveJob) -> list[ActiveJob]:
        """The other active members of ``job``'s gang, by id, if it runs all together (:func:`runs_all_together`)."""
        if not job.gang_id:
            return []
        members = self.gangs.get((job.queue, job.gang_id), ())
        return [self.jobs[i] for i in sorted(members) if i != job.id]

    def track_deadline(self, job: ActiveJob) -> None:
        """Note when a running job passes its active deadline (entries are checked, and may be stale, when due)."""
        if job.deadline and job.state == "running" and job.started is not None and not job.stop_requested:
            heap = self.deadlines
            if len(heap) > 2 * len(self.jobs) + 1024:   # mostly entries of jobs gone or changed: start over
                heap[:] = [(j.started + j.deadline, j.id) for j in self.jobs.values()
                           if j.deadline and j.state == "running" and j.started is not None and not j.stop_requested]
                heapq.heapify(heap)
            heapq.heappush(heap, (job.started + job.deadline, job.id))

    def report_difference(self, cluster: str, running: set[str]) -> tuple[set[str], set[str]]:
        """``(missing, foreign)``: the pods of ``cluster``'s jobs that ``running`` does not list, and the pods it
        lists that are no job's there. The same report object against the same jobs is not compared again."""
        version = self.versions.get(cluster, 0)
        cached = self.report_cache.get(cluster)
        if cached is not None and cached[0] is running and cached[1] == version:
            return cached[2], cached[3]
        expected = self.pods.get(cluster, set())
        missing, foreign = expected - running, running - expected
        self.report_cache[cluster] = (running, version, missing, foreign)
        return missing, foreign

    def set_unseen(self, cluster: str, missing: set[str]) -> None:
        """``missing``: the jobs of ``cluster`` its last report did not list (their ``seen`` already set so)."""
        if cluster in self.unseen:
            self.unseen[cluster] = missing

    def stop(self, job: ActiveJob, how: int) -> None:
        """Ask for ``job`` to be stopped (``how``: a ``STOP_*`` value)."""
        job.stop_requested = how
        self.stopping.add(job.id)

    def due_deadlines(self, now: float) -> list[tuple[float, str]]:
        """Take the deadline entries due by ``now`` (earliest first); :meth:`defer` puts back those not acted on."""
        heap = self.deadlines
        due = []
        while heap and heap[0][0] <= now:
            due.append(heapq.heappop(heap))
        return due

    def defer(self, entries: Sequence[tuple[float, str]]) -> None:
        for entry in entries:
            heapq.heappush(self.deadlines, entry)

    def take_changes(self) -> tuple[int, set[str]]:
        """``(generation, ids)``: the jobs put or dropped since the last call; a new generation means all of them."""
        changed, self.changed = self.changed, set()
        return self.generation, changed


@dataclass(slots=True)
class Changes:
    """What a cycle's lease rules decided, written in the cycle's transaction (:meth:`Leases.update_active`)."""

    job_updates: dict[str, dict] = field(default_factory=dict)
    lease_updates: dict[str, dict] = field(default_factory=dict)
    lease_deletes: set[str] = field(default_factory=set)
    beats: dict[str, float] = field(default_factory=dict)   # cluster -> when it answered (renews its seen leases)
    events: list[dict] = field(default_factory=list)


@dataclass(slots=True)
class IngestResult:
    active: dict                       # job id -> ActiveJob, after this cycle's changes
    stops: dict[str, list[tuple[str, object]]]   # cluster -> [(pod id, ActiveJob or None)]
    changes: Changes
    counts: dict[str, int] = field(default_factory=dict)
    #: Binds returned to the queue this cycle, by (cluster, reason label): flotilla_binds_returned_total.
    returned: dict[tuple[str, str], int] = field(default_factory=dict)
    #: Successes of runs given up when their node was lost, for jobs not active now (queued again): (job id,
    #: cluster, node, time, reason). The store finishes those still queued (:meth:`Leases.update_active`).
    late_successes: list[tuple[str, str, str | None, float, str]] = field(default_factory=list)


#: The lease rules: the active jobs (changed in place) and the retry rules' reader, to what to write.
Rules = Callable[[ActiveCopy, Policies], IngestResult]


def _read_beats(conn) -> dict[str, Beat]:
    return {row.cluster: Beat(row.reported_at) for row in conn.execute(sa.select(cluster_reports))}


def _policies(conn) -> Policies:
    """The retry rules of jobs and queues, read in ``conn``'s transaction only when a run fails."""
    def read_job(job_id: str) -> str | None:
        return conn.execute(sa.select(jobs.c.retry_policy).where(jobs.c.id == job_id)).scalar()

    def read_queue(name: str) -> str | None:
        return conn.execute(sa.select(queues.c.retry_policy).where(queues.c.name == name)).scalar()

    return Policies(read_job, read_queue)


class Leases:
    """The lease transactions on ``db``."""

    def __init__(self, db: Database):
        self.db = db

    def _load_active(self, conn, ids: Sequence[str] | None = None,
                     beats: dict[str, Beat] | None = None) -> dict[str, ActiveJob]:
        """Every active job (with its lease), or those of ``ids`` that are active.

        ``beats``: the clusters' last reports the jobs share; read from the
        store when not given (and then also when ``ids`` is given).
        """
        if beats is None:
            beats = _read_beats(conn)
        query = (sa.select(*QUEUED_COLUMNS, jobs.c.state, jobs.c.retries, jobs.c.stop_requested,
                           jobs.c.started, leases.c.cluster, leases.c.nodes, leases.c.leased_at, leases.c.renewed_at,
                           leases.c.pods_running, leases.c.pods_done, leases.c.seen)
                 .select_from(leases.join(jobs, jobs.c.id == leases.c.job_id)))
        queries = [query] if ids is None else [query.where(leases.c.job_id.in_(part)) for part in chunks(ids)]
        loads = self.db.loads
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

    def _refresh(self, conn, copy: ActiveCopy) -> ActiveCopy:
        """Bring ``copy`` up to date inside a write transaction (no other writer can interleave)."""
        if copy.cursor is None:
            cursor, ids, whole = last_event_id(conn), [], True
        else:
            cursor, ids = changed_since(conn, copy.cursor)
            # Most of it changed (a burst of leases): one scan is cheaper than as many lookups by id.
            whole = len(ids) > copy.RELOAD_MIN and len(ids) > len(copy.jobs) * 2 // 3
        if whole:
            beats = _read_beats(conn)
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
        with self.db.read() as conn:
            return self._load_active(conn)

    def update_active(self, rules: Rules, now: float, copy: ActiveCopy | None = None) -> IngestResult:
        """One transaction: the active jobs brought up to date, ``rules`` run on them, and what they decided written.

        ``copy``: the caller's :class:`ActiveCopy`, kept between calls; only
        the jobs with an event since the last call are read (under the
        write lock, so nothing interleaves), instead of every active job.
        ``rules`` changes the copy in place; if anything fails, the copy is
        reset (the store did not take the changes) and the next call reads all.
        """
        try:
            with self.db.write() as conn:
                if copy is None:
                    beats = _read_beats(conn)
                    active = ActiveCopy()
                    active.load(self._load_active(conn, beats=beats), beats)
                else:
                    active = self._refresh(conn, copy)
                result = rules(active, _policies(conn))
                self._write_changes(conn, result.changes, now)
                if result.late_successes:
                    self._finish_late_successes(conn, result.late_successes, now)
        except BaseException:
            if copy is not None:
                copy.reset()
            raise
        return result

    @staticmethod
    def _finish_late_successes(conn, late, now: float) -> None:
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
            rows.append(event_row(row._mapping, "succeeded", when, cluster, node, reason))
        insert_events(conn, rows)

    @staticmethod
    def _write_changes(conn, changes: Changes, now: float) -> None:
        update_many(conn, jobs, jobs.c.id, {k: {**v, "updated": now} for k, v in changes.job_updates.items()})
        update_many(conn, leases, leases.c.job_id,
                    {k: v for k, v in changes.lease_updates.items() if k not in changes.lease_deletes})
        for part in chunks(sorted(changes.lease_deletes)):
            conn.execute(leases.delete().where(leases.c.job_id.in_(part)))
        for cluster, value in changes.beats.items():
            # Renews every lease of the cluster marked seen (see ActiveJob.renewed_at): one row, not one per job.
            if conn.execute(cluster_reports.update().where(cluster_reports.c.cluster == cluster)
                            .values(reported_at=value)).rowcount == 0:
                conn.execute(cluster_reports.insert().values(cluster=cluster, reported_at=value))
        insert_events(conn, changes.events)

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
        with self.db.write() as conn:
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
                lease_rows.append({"job_id": r.id, "cluster": cluster, "nodes": dump(nodes), "leased_at": now,
                                   "renewed_at": now, "pods_running": 0, "pods_done": 0})
                event_rows.append(event_row(r._mapping, "leased", now, cluster, node_text))
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
                event_rows.append(event_row(r._mapping, "preempted", now, r.cluster, r.node, preempted[r.id]))
                done_preempted.add(r.id)
            for part in chunks(sorted(done_preempted)):
                conn.execute(leases.delete().where(leases.c.job_id.in_(part)))
            insert_events(conn, event_rows)
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
        with self.db.write() as conn:
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
            insert_events(conn, [{"queue": q, "job_set": js, "job_id": i, "kind": "pending", "time": now,
                                  "cluster": c, "node": n, "reason": ""} for i, q, js, c, n in found])
        return len(found)
