"""The simulator's cluster: a :class:`SimulatedCluster` whose upkeep per cycle follows what changed.

The plain :class:`~flotilla.core.backend.SimulatedCluster` finds finished
jobs by looking at every run, at each ``snapshot()`` and ``poll_events()``
(three times a cycle in the simulator), and builds its list of running jobs
from its runs each time. On the large example (about 1,700 jobs running over
5,000 cycles) that was the biggest part of the simulator's own time, and it
grows with what runs, not with what changed.

Here completions wait in a heap (stale entries, left by a preempted run, are
skipped by identity), and the running jobs are kept in a dict beside the runs,
in the same order, so a snapshot copies it in one C call. Everything else is
the plain cluster's: the same checks, the same job objects, the same events
in the same order (``tests/test_simulate.py`` runs both and compares every
cycle's decisions and the report).
"""

from __future__ import annotations

import heapq
from itertools import count
from typing import Callable, Sequence

from flotilla.core.backend import ClusterUnavailable, SimulatedCluster
from flotilla.core.decisions import Placement
from flotilla.core.model import ClusterSnapshot, Job, Node


class SimulatorCluster(SimulatedCluster):
    """A simulated cluster for a clock that jumps: completions from a heap (see the module docstring)."""

    def __init__(self, name: str, nodes: Sequence[Node], clock: Callable[[], float],
                 duration_of: Callable[[Job], float | None] = lambda job: None):
        super().__init__(name, nodes, clock=clock, duration_of=duration_of)
        #: ``(ends, job id, seq, run)``: popped in ``(ends, job id)`` order, as the plain cluster sorts them.
        self._due: list[tuple] = []
        self._seq = count()
        #: job id -> the running job, in the order of ``_runs``.
        self._running: dict[str, Job] = {}

    def snapshot(self) -> ClusterSnapshot:
        if not self.available:
            raise ClusterUnavailable(f"cluster {self.name} is stopped")
        self._finish_due()
        return ClusterSnapshot(self.name, list(self.nodes.values()), list(self._running.values()))

    def next_completion(self) -> float | None:
        due, runs = self._due, self._runs
        while due:
            ends, job_id, _, run = due[0]
            if runs.get(job_id) is run:
                return ends
            heapq.heappop(due)
        return None

    def running_jobs(self) -> list[Job]:
        return list(self._running.values())

    def _start(self, placement: Placement, now: float) -> None:
        super()._start(placement, now)
        run = self._runs[placement.job.id]
        self._running[run.job.id] = run.job
        if run.ends is not None:
            heapq.heappush(self._due, (run.ends, run.job.id, next(self._seq), run))

    def _stop(self, job_id: str, kind: str, now: float, reason: str) -> None:
        self._running.pop(job_id, None)
        super()._stop(job_id, kind, now, reason)

    def _finish_due(self) -> None:
        now = self.clock()
        due, runs = self._due, self._runs
        while due and due[0][0] <= now:
            ends, job_id, _, run = heapq.heappop(due)
            if runs.get(job_id) is run:
                self._stop(job_id, "succeeded", ends, "")


__all__ = ["SimulatorCluster"]
