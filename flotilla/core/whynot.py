"""Why a job is still queued: the failures actions record, counted when asked.

A mixin of :class:`~flotilla.core.session.Session`. An action records a
job's :data:`Failure`: a :class:`~flotilla.core.reasons.Reason` (or a
plugin's words) or a :class:`Shortfall` (no node had room), whose nodes are
counted only when someone asks (:meth:`WhyNot.why`, data; :meth:`WhyNot.explain`,
its words). Once the session has closed, a count is kept; and before the next
cycle changes the node index, every distinct shortfall not yet asked about is
counted while the index still shows this cycle's room
(:meth:`~flotilla.core.cyclestate.CycleState.before_next_change`). A cycle
whose explanations nobody reads counts none. Jobs of one shape share one
failure object, so a million misfits cost a handful of counts.

A shortfall reads in kube-scheduler's style: every node of the job's
cluster (or of every cluster) counted once, under the first check it
fails, in kube-scheduler's filter order: the predicates' refusal of its
type (unschedulable, an untolerated taint, node affinity or selector), then
the first resource it is short of, then a host port held there, then a
plugin's node filter::

    0/3 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {gpu: yes}, 1 node(s) were unschedulable

Causes are listed by count, largest first (ties by text), so the first one
is the most common, and the counts add up to the nodes. The reason's code
(the metrics' category) is its most common cause's, ties broken in a fixed
order of causes, never by their words (:func:`~flotilla.core.reasons.nodes_available`).
"""

from __future__ import annotations

from itertools import repeat
from operator import attrgetter
from typing import Sequence, Union

from flotilla.core.feasibility import FILTERED, PORTS_TAKEN
from flotilla.core.model import Job
from flotilla.core.reasons import Reason, Why, insufficient, make, nodes_available
from flotilla.core.volumes import BIND_CONFLICT
from flotilla.core.podplacements import pod_checked, pod_refusal
from flotilla.core.resources import Vector

_ID = attrgetter("id")


class Shortfall:
    """No node had room for a job: its vector, the level it was searched at, the node types it may use, and
    the job (with its cluster, when it was bound to one) whose other causes the wording counts.

    Worded on demand as ``"0/10 nodes are available: 7 Insufficient cpu, 3 node(s) were unschedulable"``.
    Jobs of one requirements key share one shortfall: their refusals, ports and filters are the same.
    """

    __slots__ = ("vec", "level", "types", "job", "cluster", "key")

    def __init__(self, vec: Vector, level: int, types: Sequence[int], job: Job | None = None,
                 cluster: str | None = None):
        self.vec = vec
        self.level = level
        self.types = types
        self.job = job
        self.cluster = cluster
        #: What its wording depends on (:meth:`WhyNot._shortfall_key`), once known.
        self.key: tuple | None = None


#: What an action records for a job it could not place: a reason, or a shortfall counted when asked.
Failure = Union[Reason, str, Shortfall]
#: Why a job of a queue no action reached waits.
NOT_REACHED = make("not_reached")


class WhyNot:
    """The recorded failures and their wording (a mixin of Session)."""

    def _open_why_not(self) -> None:
        self.failures: dict[str, Failure] = {}
        #: Runs of known misfits allocate passed over: (jobs, their KnownMisfits). Their failures are
        #: looked up when first asked (:meth:`explain`), not stored per job while scheduling.
        self.passed_over: list[tuple[list[Job], object]] = []
        self._passed_over_failures: dict[str, Failure] = {}
        self._passed_over_read = 0
        #: Per queue, why its jobs were not reached (cordoned, lookahead used up).
        self.unexamined_reason: dict[str, Why] = {}
        self._shortfalls: dict[tuple, Reason] = {}
        #: Set when the session closes: the room the wordings count no longer changes in this session.
        self._explanations_final = False

    def pass_over(self, jobs: list[Job], misfits) -> None:
        """Record that allocate passed over ``jobs``, known misfits of one queue, with their keys' failures.

        ``misfits`` is the queue's :class:`~flotilla.core.units.KnownMisfits`.
        """
        self.passed_over.append((jobs, misfits))

    def flush_passed_over(self) -> None:
        """Write the passed-over jobs' failures into ``failures`` now, over what is there."""
        self._read_passed_over()
        if self._passed_over_failures:
            self.failures.update(self._passed_over_failures)
        self.passed_over, self._passed_over_failures, self._passed_over_read = [], {}, 0

    def _read_passed_over(self) -> dict[str, Failure]:
        found = self._passed_over_failures
        for jobs, misfits in self.passed_over[self._passed_over_read:]:
            failures = misfits.failures_of(jobs)
            found.update(zip(map(_ID, jobs), failures if isinstance(failures, list) else repeat(failures)))
        self._passed_over_read = len(self.passed_over)
        return found

    def explain(self, job: Job) -> str:
        """One short reason why ``job`` is still queued, in words (:meth:`why`'s)."""
        return str(self.why(job))

    def why(self, job: Job) -> Why:
        """Why ``job`` is still queued: a :class:`~flotilla.core.reasons.Reason` (or a plugin's words)."""
        if self.failed_queues and job.queue in self.failed_queues:
            return self.failed_queues[job.queue]   # a plugin's failure left its queue out of the cycle
        failure = self.failures.get(job.id)
        # A job passed over as a known misfit reads as its key's failure, unless something was recorded for
        # it since (an action after allocate) or a later action placed it (its failure went then too).
        if failure is None and self.passed_over and job.id not in self.scheduled_ids:
            found = self._passed_over_failures
            if self._passed_over_read != len(self.passed_over):
                found = self._read_passed_over()
            failure = found.get(job.id)
        if failure is None:
            return self.unexamined_reason.get(job.queue, NOT_REACHED)
        if failure.__class__ is not Shortfall:
            return failure
        key = self._shortfall_key(failure)
        reason = self._shortfalls.get(key)
        if reason is None:
            reason = self._count(failure)
            if self._explanations_final:
                self._shortfalls[key] = reason
        return reason

    def _shortfall_key(self, shortfall: Shortfall) -> tuple:
        """What a shortfall's counts depend on: equal keys count the same (kept on the shortfall)."""
        key = shortfall.key
        if key is None:
            job = shortfall.job
            if job is None:
                key = shortfall.vec, shortfall.level, id(shortfall.types)
            else:
                key = (shortfall.vec, shortfall.level, id(shortfall.types),
                       id(self.refused_nodes(job, shortfall.cluster)), job.host_ports, job.claims,
                       job.priority_class if self.node_filter_fns else None)
                if (job.pod_rules is not None or self.state.pods.anti) and pod_checked(self, job):
                    # Pod rules count the pods placed so far: each job is worded on its own.
                    key = (*key, job.id)
            shortfall.key = key
        return key

    def _count(self, shortfall: Shortfall) -> Reason:
        """Every node of the job's clusters counted once, under the first check it fails (module docstring)."""
        job = shortfall.job
        causes: dict[Why, int] = dict(self.refused_nodes(job, shortfall.cluster)) if job is not None else {}
        fitting, short = self.index.shortfall(shortfall.vec, shortfall.level, shortfall.types)
        for name, count in zip(self.space.names, short):
            if count:
                cause = insufficient(name)
                causes[cause] = causes.get(cause, 0) + count
        available = len(fitting)
        if job is not None and self.node_checked(job):
            ports, held = job.host_ports, self.state.ports
            filters = self.node_filter_fns
            rules = job.pod_rules is not None or bool(self.state.pods.anti)
            picks = self.volume_picks if job.claims else None
            available = 0
            for i in fitting:
                refusal = pod_refusal(self, job, i) if rules else None
                if ports and not held.free(i, ports):
                    causes[PORTS_TAKEN] = causes.get(PORTS_TAKEN, 0) + 1
                elif picks is not None and not picks.allowed(job, i):
                    causes[BIND_CONFLICT] = causes.get(BIND_CONFLICT, 0) + 1
                elif refusal is not None:
                    causes[refusal] = causes.get(refusal, 0) + 1
                elif filters and not all(fn(job, i) for fn in filters):
                    causes[FILTERED] = causes.get(FILTERED, 0) + 1
                else:
                    available += 1
        return nodes_available(available, causes)

    def _close_explanations(self) -> None:
        """The session closes: keep counts from now on, and count the rest before the index next changes."""
        self._explanations_final = True
        self.state.before_next_change(self._freeze_explanations)

    def _freeze_explanations(self) -> None:
        """Count the node shortfalls now: the index lives on and changes in the next cycle.

        Each distinct failure once: jobs of one shape share their failure object, so they are
        told apart by identity in a C-level pass, not walked one by one.
        """
        values = list(self.failures.values())
        distinct = dict(zip(map(id, values), values))
        for _, misfits in self.passed_over:
            distinct.update((id(failure), failure) for failure in misfits.by_key.values())
        for failure in distinct.values():
            if failure.__class__ is Shortfall:
                key = self._shortfall_key(failure)
                if key not in self._shortfalls:
                    self._shortfalls[key] = self._count(failure)
