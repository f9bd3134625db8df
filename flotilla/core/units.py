"""A queue's scheduling units, read in order one at a time, and the known misfits allocate passes over in bulk.

A unit is a single job or, for a gang, the members to be placed together.
:class:`QueueUnits` reads them lazily from a queue's order (so a queue of a
million jobs costs only what is reached); :class:`KnownMisfits` lets
allocate pass over a run of jobs whose requirements already failed. Both
read the :class:`~flotilla.core.session.Session` they are given (placed,
evicted, running and set-aside jobs), which imports them, not the reverse.
"""

from __future__ import annotations

from itertools import repeat
from operator import attrgetter, is_, itemgetter, mul, or_, truth
from typing import Iterable

from flotilla.core.cyclestate import QueueState
from flotilla.core.model import Job
from flotilla.core.jobqueue import JobQueue
from flotilla.core.reasons import make
from flotilla.core.whynot import Failure

# Field getters for the C-level passes over runs of jobs.
_ID = attrgetter("id")
_JOB = itemgetter(-1)
_REQUESTS = attrgetter("requests")
_CLASS = attrgetter("priority_class")
_SELECTOR = attrgetter("node_selector")
_TOLERATIONS = attrgetter("tolerations")
_GANG = attrgetter("gang")
_AFFINITY = attrgetter("affinity")


def elastic_core(session, gang) -> list[Job]:
    """The members an elastic gang still needs placed together: its minimum less those running.

    Empty once the gang has started (its minimum runs); evicted members come
    first, since they can go back to their own nodes.
    """
    members = session.gangs[gang.id]
    running = sum(1 for m in members if m.id in session.running and m.id not in session.evicted)
    need = gang.min_available - running
    if need <= 0:
        return []
    pending = [m for m in members if m.id in session.evicted or m.id not in session.running]
    pending.sort(key=lambda m: m.id not in session.evicted)
    return pending[:need]


class QueueUnits:
    """A queue's scheduling units in order, read one at a time: evicted jobs first, then queued jobs.

    A unit is a single job or, for a gang, the list of its members not yet
    running (given once, at its first member's place). An elastic gang gives
    its core (:func:`elastic_core`) as one unit, and its other members one by
    one at their own places. Queued jobs come from the queue's
    :class:`~flotilla.core.jobqueue.JobQueue` through a position, so a queue of a million jobs
    costs only what is reached, and :meth:`skip_known` can pass over a run of
    known misfits in bulk (allocate) where a generator could only step.
    """

    __slots__ = ("session", "queue", "evicted", "epos", "order", "position", "finished", "seen_gangs", "cores")

    def __init__(self, session, queue: QueueState, evicted: Iterable[Job]):
        self.session = session
        self.queue = queue
        self.evicted = session.sorted_by_job_order(evicted) if evicted else []
        self.epos = 0
        self.order: JobQueue | None = None
        self.position = 0
        self.finished = False
        self.seen_gangs: set[str] = set()
        self.cores: dict[str, set[str]] = {}

    def _unit(self, job: Job):
        gang = job.gang
        if gang is None:
            return job
        session = self.session
        if gang.min_available:
            core = self.cores.get(gang.id)
            if core is None:
                members = elastic_core(session, gang)
                self.cores[gang.id] = {m.id for m in members}
                if members:
                    return members
            elif job.id in core:
                return None
            return job
        if gang.id in self.seen_gangs:
            return None
        self.seen_gangs.add(gang.id)
        return [m for m in session.gangs[gang.id]
                if m.id in session.evicted or (m.id not in session.running and m.id not in session.scheduled_ids)]

    def queued_phase(self) -> bool:
        """Whether the evicted jobs are all given and queued jobs come next (the order is open)."""
        if self.order is not None:
            return True
        if self.epos < len(self.evicted) or self.finished:
            return False
        queue, session = self.queue, self.session
        if queue.name in session.cordoned:
            session.unexamined_reason[queue.name] = make("queue_cordoned", queue.name)
            self.finished = True
            return False
        self.order = session.queued_in_order(queue)
        return True

    def next(self):
        """The next unit, or None when the queue has no more."""
        evicted = self.evicted
        while self.epos < len(evicted):
            job = evicted[self.epos]
            self.epos += 1
            found = self._unit(job)
            if found is not None:
                return found
        if self.order is None and not self.queued_phase():
            return None
        order = self.order
        placed = self.session.scheduled_ids  # by an earlier action of this cycle: not offered again
        withheld = self.session.set_aside
        while (entry := order.at(self.position)) is not None:
            self.position += 1
            job = entry[-1]
            if job.id in placed or job.id in withheld:
                continue
            if job.gang is None:
                order.offered.append(self.position - 1)
                return job
            found = self._unit(job)
            if found is not None:
                return found
        return None

    def skip_known(self, misfits: KnownMisfits, limit: int, job_valid) -> list[Job]:
        """Pass over the queued jobs ahead that are known misfits, at most ``limit``; return them.

        The run stops before the first job that is not a plain known misfit:
        another requirements key, a gang member, a job placed by an earlier
        action or set aside (:meth:`next` handles those one by one), or a job
        ``job_valid`` refuses (it is offered and gets its own reason). The
        run is read in chunks that double while they are all misfits, with
        C-level passes over each chunk; the caller records the failures.
        """
        order, session = self.order, self.session
        ahead, withheld = misfits.ahead, session.set_aside
        gangs = bool(session.gangs)
        passed: list[Job] = []
        chunk = 16
        while len(passed) < limit:
            n = min(chunk, limit - len(passed))
            jobs = list(map(_JOB, order.peek(self.position, n)))
            if not jobs:
                break
            run = misfits.run(jobs)
            if run and gangs:
                members = list(map(_GANG, jobs[:run]))
                if members.count(None) != run:
                    run = members.index(next(filter(None, members)))
            if run and (ahead or withheld):
                ids = list(map(_ID, jobs[:run]))
                stops = list(map(or_, map(ahead.__contains__, ids), map(withheld.__contains__, ids)))
                if True in stops:
                    run = stops.index(True)
            if run and job_valid is not None:
                refused = list(map(job_valid, jobs[:run]))
                if any(refused):
                    run = next(k for k, why in enumerate(refused) if why)
            if run:
                self.position += run
                passed += jobs[:run] if run < len(jobs) else jobs
            if run < n or len(jobs) < n:
                break
            chunk *= 4
        return passed


class KnownMisfits:
    """One queue's known misfits in allocate: requirements key -> the failure its first job met.

    :meth:`run` finds how many jobs at the front of a list have a known key,
    by C-level passes field by field (request mapping, priority class,
    tolerations, node selector by identity, as :func:`requirements_key`)
    rather than a key tuple per job; when the known keys are not all
    combinations of their fields' values (rare: one queue's shapes would
    have to differ in two fields at once), by key tuples.
    """

    __slots__ = ("by_key", "ahead", "_size", "_requests", "_classes", "_tolerations", "_selectors", "_cross",
                 "_failure", "_single", "affinity")

    def __init__(self, ahead: set[str], affinity: bool = False):
        self.by_key: dict[tuple, Failure] = {}
        #: Jobs placed this cycle that may still lie ahead in a queue (earlier actions, gang members).
        self.ahead = ahead
        #: Whether some job has a node affinity: a run then stops before the first such job. Its key leaves
        #: the affinity out, so it is offered and gets its own reason; without such jobs, no pass looks.
        self.affinity = affinity
        self._size = -1

    def __bool__(self) -> bool:
        return bool(self.by_key)

    def _prepare(self) -> None:
        known = self.by_key
        self._size = len(known)
        self._requests = {key[0] for key in known}
        self._classes = {key[1] for key in known}
        self._selectors = {key[2] for key in known}
        self._tolerations = {key[3] for key in known}
        self._cross = len(known) == len(self._requests) * len(self._classes) * len(self._selectors) * \
            len(self._tolerations)
        #: The one known key's (request mapping id, class, tolerations id) with no selector, else None.
        self._single = None
        if len(known) == 1 and self._selectors == {0}:
            key = next(iter(known))
            self._single = (key[0], key[1], key[3])
        failures = list(known.values())
        #: The failure of every known key when they share one (one shape, or one reason), else None.
        self._failure = failures[0] if all(map(is_, failures, repeat(failures[0]))) else None

    def run(self, jobs: list[Job]) -> int:
        """How many of ``jobs``, from the first, have a known requirements key."""
        if self._size != len(self.by_key):
            self._prepare()
        if self.affinity:
            marks = list(map(_AFFINITY, jobs))
            if any(marks):
                jobs = jobs[:next(k for k, mark in enumerate(marks) if mark is not None)]
        n = len(jobs)
        if not n:
            return 0
        if not self._cross:
            ok = list(map(self.by_key.__contains__, _keys(jobs)))
            return ok.index(False) if False in ok else n
        if self._single is not None:
            # One known key (one shape failed so far, the usual case): every job of it, counted in C.
            requests, class_name, tolerations = self._single
            if list(map(id, map(_REQUESTS, jobs))).count(requests) == n and \
                    list(map(_CLASS, jobs)).count(class_name) == n and \
                    list(map(id, map(_TOLERATIONS, jobs))).count(tolerations) == n and \
                    (self._selectors != {0} or not any(map(_SELECTOR, jobs))):
                return n
        run = n
        # Field by field, each pass over the run the passes before it left: request mapping and tolerations
        # by identity, priority class by name.
        for allowed, field, by_identity in ((self._requests, _REQUESTS, True), (self._classes, _CLASS, False),
                                            (self._tolerations, _TOLERATIONS, True)):
            values = map(id, map(field, jobs)) if by_identity else map(field, jobs)
            ok = list(map(allowed.__contains__, values))
            if False in ok:
                run = ok.index(False)
                if not run:
                    return 0
                jobs = jobs[:run]
        selectors = self._selectors
        if selectors == {0}:
            if any(map(_SELECTOR, jobs)):
                run = list(map(truth, map(_SELECTOR, jobs))).index(True)
        else:
            chosen = list(map(_SELECTOR, jobs))
            ok = list(map(selectors.__contains__, map(mul, map(truth, chosen), map(id, chosen))))
            if False in ok:
                run = ok.index(False)
        return run

    def failures_of(self, jobs: list[Job]):
        """The failure of every job in ``jobs`` (all known misfits): one shared, or one per job."""
        if self._size != len(self.by_key):
            self._prepare()
        if self._failure is not None:
            return self._failure
        return list(map(self.by_key.__getitem__, _keys(jobs)))


def _keys(jobs: list[Job]):
    """:func:`requirements_key` of each job, in C-level passes."""
    selectors = list(map(_SELECTOR, jobs))
    return zip(map(id, map(_REQUESTS, jobs)), map(_CLASS, jobs), map(mul, map(truth, selectors), map(id, selectors)),
               map(id, map(_TOLERATIONS, jobs)))


def iter_units(session, queue: QueueState, evicted: Iterable[Job]):
    """Yield a queue's scheduling units in order (see :class:`QueueUnits`)."""
    units = QueueUnits(session, queue, evicted)
    while (unit := units.next()) is not None:
        yield unit
