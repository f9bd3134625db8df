"""The simulator: the real scheduler, cycle by cycle, on a clock that jumps.

Every cycle builds a :class:`~flotilla.core.model.Snapshot` from the
simulated clusters' own ``snapshot()`` plus the jobs waiting in the
simulator's queue, and calls :meth:`Scheduler.run_cycle` with those
clusters as backends, exactly as the service does with real ones: the
``lease`` action starts and stops jobs on simulated clusters
(:class:`~flotilla.core.backend.SimulatedCluster`) whose clock is the
simulated clock. There is no scheduling logic here, only
bookkeeping: jobs enter the queue when submitted, leave it when a cluster
reports them running, come back when one reports them preempted (to start
again from zero), and are done when one reports them succeeded.

The clock. Cycles happen on the grid ``k * cycle.period``. After a cycle that
started or stopped anything the next one follows one period later (the
state it sees is new). After a cycle that changed nothing, the next cycle
would see the same state and decide the same, so the clock jumps to the
first grid time at or after the next event: a submission, a job's
completion, or a time an action or plugin asked to be woken at
(``Session.wake_at``: a reservation's ``after`` running out) (``--max-skip`` caps the jump, for policies whose decisions drift
with time alone, such as ``decayedusage``, or ``evict.probability`` < 1).
Idle days cost nothing.

No progress. When a cycle changed nothing, nothing runs, nothing is left to
submit and jobs still wait, they can never start: the run stops with
:class:`NoProgress` naming one of them and the scheduler's reason. A run
whose jobs keep being preempted before any finishes is stopped the same way.
"""

from __future__ import annotations

import heapq
import math
import random
import time
from dataclasses import dataclass
from typing import Callable

import structlog

from flotilla.core.backend import OverAllocation, SimulatedCluster
from flotilla.scheduler import Scheduler
from flotilla.core.decisions import Decisions, natural_key
from flotilla.core.model import Job, Snapshot
from flotilla.core.quantities import format_duration
from flotilla.core.shares import share_weights
from flotilla.simulate.report import Recorder
from flotilla.simulate.workload import Workload

log = structlog.get_logger("flotilla.simulate")


class SimulationError(Exception):
    """The run cannot go on; ``report`` holds the figures up to that point."""

    def __init__(self, message: str, report: dict | None = None):
        super().__init__(message)
        self.report = report


class NoProgress(SimulationError):
    """Jobs wait that can never start (or never finish): stopping instead of looping."""


class SchedulerBug(SimulationError):
    """A cluster refused a decision (over-allocation, a partial gang): never a normal outcome."""


@dataclass
class CycleInfo:
    """What ``on_cycle`` callbacks (tests, progress bars) see after each cycle."""

    time: float
    decisions: Decisions
    changed: bool


def config_clusters(config, source_path=("clusters",)):
    """The config's simulated clusters as lists of nodes; a config with none is an error."""
    clusters = config.simulated_clusters()
    if not clusters:
        raise config.source.error(source_path, "simulate needs at least one cluster of kind: simulated "
                                               "(expected e.g. {name: sim, kind: simulated, nodes: [...]})")
    return [(cluster.name, cluster.expand()) for cluster in clusters]


class Simulation:
    """One run of one config on one workload. ``run()`` returns the report (spec section 4).

    ``cluster_class`` builds the simulated clusters (a test passes another
    one to compare against it).
    """

    def __init__(self, config, workload: Workload, seed: int = 0, until: float | None = None,
                 max_skip: float | None = None, scheduler: Scheduler | None = None,
                 on_cycle: Callable[["Simulation", CycleInfo], None] | None = None,
                 progress: Callable[[float, float], None] | None = None, max_cycles: int | None = None,
                 cluster_class: type[SimulatedCluster] = SimulatedCluster):
        self.config = config
        self.workload = workload
        self.seed = seed
        self.until = until
        self.max_skip = max_skip
        self.max_cycles = max_cycles
        self.on_cycle = on_cycle
        self.progress = progress
        self.period = float(config.cycle.period)
        if self.period <= 0:
            raise config.source.error(("cycle", "period"), "expected a positive duration, e.g. 1s")
        self.scheduler = scheduler or Scheduler(config)
        if not self.scheduler.hands_over():
            raise config.source.error(("actions",), "simulate needs the lease action (it starts and stops jobs "
                                                    "on the simulated clusters): expected e.g. "
                                                    "[evict, allocate, preempt, lease]")
        self.now = 0.0
        self.durations: dict[str, float] = {}
        self.backends: dict[str, SimulatedCluster] = {}
        pool: dict[str, int] = {}
        for name, nodes in config_clusters(config):
            self.backends[name] = cluster_class(name, nodes, clock=self._clock, duration_of=self._duration_of)
            for node in nodes:
                for resource, amount in node.resources.items():
                    pool[resource] = pool.get(resource, 0) + amount
        self.pool = pool
        self.queues = workload.queues
        self.priority_classes = self.scheduler.priority_classes()
        self.recorder = Recorder(self.queues, pool, share_weights(config.plugins))
        self.queued: dict[str, Job] = {}        # waiting now, in submission order
        self.jobs: dict[str, Job] = {}          # submitted, not finished: the job as queued
        self._ends: list[tuple[float, str]] = []  # completion heap, entries stale once the run is gone
        self._run_end: dict[str, float] = {}
        self.cycles = 0
        self.finished = 0
        self.last_finish = 0.0

    # -- the simulated clusters' view ---------------------------------------------
    def _clock(self) -> float:
        return self.now

    def _duration_of(self, job: Job) -> float:
        return self.durations[job.id]

    # -- running -----------------------------------------------------------------
    def run(self) -> dict:
        started = time.perf_counter()
        rng = random.Random(self.seed)
        pending = iter(self.workload.jobs())
        upcoming = next(pending, None)
        total = self.until if self.until is not None else self.workload.last_submission + self.workload.longest_duration
        longest = self.workload.longest_duration
        last_progress = 0.0
        k = self._grid(upcoming[0]) if upcoming else 0
        error: SimulationError | None = None
        end = 0.0
        while True:
            t = k * self.period
            if self.until is not None and t > self.until:
                end = self.until
                break
            self.now = t
            # Submissions due by now join the queue.
            while upcoming is not None and upcoming[0] <= t:
                _, jobs, duration = upcoming
                for job in jobs:
                    self.queued[job.id] = job
                    self.jobs[job.id] = job
                    self.durations[job.id] = duration
                    self.recorder.submitted(job, job.submitted)
                last_progress = t
                upcoming = next(pending, None)
            if self._poll():  # completions due by now
                last_progress = t
            snapshot = Snapshot([backend.snapshot() for backend in self.backends.values()],
                                list(self.queued.values()), self.queues, self.priority_classes,
                                self.config.default_priority_class, now=t)
            try:
                decisions = self.scheduler.run_cycle(snapshot, rng, backends=self.backends)
            except OverAllocation as exc:
                error = SchedulerBug(f"scheduler bug at t={format_duration(t)}: {exc}")
                end = t
                break
            self._poll()
            self.cycles += 1
            self.recorder.cycle(t)
            changed = bool(decisions.scheduled or decisions.preempted)
            if self.on_cycle is not None:
                self.on_cycle(self, CycleInfo(t, decisions, changed))
            if self.progress is not None:
                self.progress(t, max(total, t))
            if not self.queued and not self._run_end and upcoming is None:
                end = t
                break
            if self.max_cycles is not None and self.cycles >= self.max_cycles:
                end = t
                error = NoProgress(f"stopped after {self.cycles} cycles (--max-cycles) at t={format_duration(t)}")
                break
            if changed:
                if longest and t - last_progress > 10 * longest + 100 * self.period:
                    end = t
                    error = NoProgress(
                        f"no progress at t={format_duration(t)}: no job has finished for "
                        f"{format_duration(t - last_progress)} (10x the longest duration) while jobs keep being "
                        f"started and preempted; {len(self.queued)} jobs queued, {len(self._run_end)} running")
                    break
                k += 1
                continue
            # The next event: a submission, a completion, or a time a timed rule asked for (decisions.wake).
            following = [x for x in (upcoming[0] if upcoming else None, self._next_completion(),
                                     decisions.wake if self.queued else None) if x is not None]
            if not following:
                end = t
                error = NoProgress(self._stuck_message(t, decisions))
                break
            k_next = max(k + 1, self._grid(min(following)))
            if self.max_skip is not None:
                k_next = min(k_next, k + max(1, int(self.max_skip // self.period)))
            k = k_next
        self.recorder.finish(end)
        wall = time.perf_counter() - started
        extra = {"seed": self.seed, "policy": self.policy_name()}
        if self.until is not None and end >= self.until and (self.queued or self._run_end or upcoming is not None):
            extra["stoppedAt"] = "until"
        if error is not None:
            extra["error"] = str(error)
        report = self.recorder.report(end, wall, extra)
        log.info("simulate.done", cycles=self.cycles, simulated_s=end, wall_s=round(wall, 3), finished=self.finished)
        if error is not None:
            error.report = report
            raise error
        return report

    def policy_name(self) -> str:
        from flotilla.simulate.policies import fairness_index
        index = fairness_index(self.config)
        return self.config.plugins[index].name if index is not None else ""

    def _grid(self, t: float) -> int:
        """The first cycle index whose time is at or after ``t``."""
        k = math.ceil(t / self.period)
        while k > 0 and (k - 1) * self.period >= t:
            k -= 1
        while k * self.period < t:
            k += 1
        return k

    def _poll(self) -> bool:
        """Apply the clusters' events to the queue and the figures; True if a job finished."""
        finished = False
        for backend in self.backends.values():
            for event in backend.poll_events():
                job = self.jobs.get(event.job_id)
                if job is None:
                    continue
                if event.kind == "running":
                    self.queued.pop(job.id, None)
                    end = event.time + self.durations[job.id]
                    self._run_end[job.id] = end
                    heapq.heappush(self._ends, (end, job.id))
                    self.recorder.started(job, event.time)
                elif event.kind == "preempted":
                    self._run_end.pop(job.id, None)
                    self.queued[job.id] = job
                    self.recorder.stopped(job, event.time, preempted=True)
                elif event.kind == "succeeded":
                    self._run_end.pop(job.id, None)
                    del self.jobs[job.id]
                    del self.durations[job.id]
                    self.recorder.stopped(job, event.time, preempted=False)
                    self.finished += 1
                    self.last_finish = max(self.last_finish, event.time)
                    finished = True
                else:  # cancelled, failed, lost: not produced by simulated clusters today
                    self._run_end.pop(job.id, None)
                    self.queued[job.id] = job
                    self.recorder.stopped(job, event.time, preempted=True)
        return finished

    def _next_completion(self) -> float | None:
        ends = self._ends
        while ends:
            end, job_id = ends[0]
            if self._run_end.get(job_id) == end:
                return end
            heapq.heappop(ends)
        return None

    def _stuck_message(self, t: float, decisions: Decisions) -> str:
        waiting = sorted(self.queued, key=natural_key)
        first = waiting[0]
        reasons = decisions.reasons
        reason = reasons.get(first, "not placed")
        by_queue: dict[str, int] = {}
        for job_id in waiting:
            queue = self.queued[job_id].queue
            by_queue[queue] = by_queue.get(queue, 0) + 1
        counts = ", ".join(f"{queue}: {n}" for queue, n in sorted(by_queue.items()))
        return (f"no progress at t={format_duration(t)}: {len(waiting)} job(s) can never start "
                f"(nothing is running and nothing is left to submit; {counts}); "
                f"e.g. {first}: {reason}")

    # -- for tests -----------------------------------------------------------------
    def running_jobs(self) -> list[Job]:
        return [job for backend in self.backends.values() for job in backend.running_jobs()]


def check_invariants(sim: Simulation, info: CycleInfo) -> None:
    """No node over its resources, no gang partly running, a topology gang in one domain: assert after a cycle
    (used by the tests)."""
    for backend in sim.backends.values():
        for name, node in backend.nodes.items():
            used = backend.used(name)
            for resource, amount in used.items():
                if resource == "pods" and resource not in node.resources:
                    continue   # a node that declares no pod slots has no limit on them
                assert amount <= node.resources.get(resource, 0), \
                    f"t={info.time}: {backend.name}/{name} uses {amount} {resource} of {node.resources.get(resource, 0)}"
    gangs: dict[str, list[Job]] = {}
    for job in sim.running_jobs():
        if job.gang is not None:
            gangs.setdefault(job.gang.id, []).append(job)
    for gang_id, members in gangs.items():
        assert len(members) == members[0].gang.cardinality, \
            f"t={info.time}: gang {gang_id} runs {len(members)} of {members[0].gang.cardinality} members"
        assert len({job.cluster for job in members}) == 1, f"t={info.time}: gang {gang_id} spans clusters"
        label = members[0].gang.uniformity_label
        if label:
            nodes = sim.backends[members[0].cluster].nodes
            values = {nodes[job.node].labels.get(label) for job in members}
            assert len(values) == 1 and None not in values, \
                f"t={info.time}: topology gang {gang_id} spans {label} values {sorted(map(str, values))}"


__all__ = ["CycleInfo", "NoProgress", "SchedulerBug", "Simulation", "SimulationError", "check_invariants",
           "config_clusters"]
