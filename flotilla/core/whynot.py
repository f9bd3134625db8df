"""Why a job is still queued: the failures actions record, worded when asked.

A mixin of :class:`~flotilla.core.session.Session`. An action records a
job's :data:`Failure`: a reason (a string, worded at once) or a
:class:`Shortfall` (no node had room), which is worded only when someone
asks (:meth:`WhyNot.explain`) and, for every distinct shortfall, once when
the session closes, while the node index still shows this cycle's room.
Jobs of one shape share one failure object, so a million misfits cost a
handful of wordings.
"""

from __future__ import annotations

from itertools import repeat
from operator import attrgetter
from typing import Sequence, Union

from flotilla.core.model import Job
from flotilla.core.resources import Vector

_ID = attrgetter("id")


class Shortfall:
    """No node had room for a job: its vector, the level it was searched at, and the node types it may use.

    Worded on demand from the node index as ``"3/10 nodes fit: 7 insufficient cpu"``.
    """

    __slots__ = ("vec", "level", "types")

    def __init__(self, vec: Vector, level: int, types: Sequence[int]):
        self.vec = vec
        self.level = level
        self.types = types

    def key(self) -> tuple:
        """Equal shortfalls (same vector, level and node types object) read the same."""
        return self.vec, self.level, id(self.types)


#: What an action records for a job it could not place: a reason, or a shortfall worded when asked.
Failure = Union[str, Shortfall]


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
        self.unexamined_reason: dict[str, str] = {}
        self._shortfalls: dict[tuple, str] = {}

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
        """One short reason why ``job`` is still queued."""
        failure = self.failures.get(job.id)
        # A job passed over as a known misfit reads as its key's failure, unless something was recorded for
        # it since (an action after allocate) or a later action placed it (its failure went then too).
        if failure is None and self.passed_over and job.id not in self.scheduled_ids:
            found = self._passed_over_failures
            if self._passed_over_read != len(self.passed_over):
                found = self._read_passed_over()
            failure = found.get(job.id)
        if failure is None:
            return self.unexamined_reason.get(job.queue, "not reached this cycle")
        if isinstance(failure, str):
            return failure
        text = self._shortfalls.get(failure.key())
        return text if text is not None else self._word(failure)

    def _word(self, shortfall: Shortfall) -> str:
        total, fitting, counts = self.index.shortfall(shortfall.vec, shortfall.level, shortfall.types)
        short = [f"{count} insufficient {name}" for name, count in zip(self.space.names, counts) if count]
        return f"{fitting}/{total} nodes fit: {', '.join(short) or 'room taken by other jobs this cycle'}"

    def _freeze_explanations(self) -> None:
        """Word the node shortfalls now: the index lives on and changes in the next cycle.

        Each distinct failure once: jobs of one shape share their failure object, so they are
        told apart by identity in a C-level pass, not walked one by one.
        """
        values = list(self.failures.values())
        distinct = dict(zip(map(id, values), values))
        for _, misfits in self.passed_over:
            distinct.update((id(failure), failure) for failure in misfits.by_key.values())
        for failure in distinct.values():
            if failure.__class__ is Shortfall:
                key = failure.key()
                if key not in self._shortfalls:
                    self._shortfalls[key] = self._word(failure)
