"""What a run did, measured: the JSON report of spec section 4 and the terminal table.

:class:`Recorder` is fed events (a job submitted, started, preempted,
finished; a cycle ended) and knows nothing about where they come from, so
the simulator and a wall-clock player over real clusters share it.

How each figure is measured:

* **share** of a queue: its allocation over the pool's, both as Armada's
  asset cost, by the weights the core reports shares with
  (:func:`flotilla.core.shares.share_weights`: the ``resourceWeights`` of
  the config's ``assetfairness`` or ``decayedusage`` plugin when it sets
  them, else cpu and gpu count, memory does not). Every policy is measured
  with the same yardstick, so a comparison compares policies, not measures. Recorded after each cycle (``[time, share]``,
  consecutive equal values dropped).
* **fairShare**: the queue's weight over the weights of the queues active
  after that cycle (jobs queued or running); reported as its time-weighted
  mean over the time the queue was active, like **meanShare**. In a queue
  tree, over its active siblings' weights, times its parent's fair share;
  a parent's figures are the sums over the queues below it, and each child
  names its ``parent``.
* **waitMean**, **waitP95**: submission to *first* start, over the jobs that
  started (p95 by nearest rank); a preempted job's restart is counted under
  **preemptions**, not as a second wait.
* **utilisation**: asset cost of running jobs integrated exactly over job
  run intervals (preempted runs included: they held the resources), over
  the pool's cost times the simulated time. **goodput**: the same for the
  runs that finished only, so ``utilisation - goodput`` is work thrown away
  by preemption.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from flotilla.core.model import Job, Queue
from flotilla.core.queuetree import fair_shares
from flotilla.core.shares import DEFAULT_SHARE_WEIGHTS, unit_weight


@dataclass(slots=True)
class _QueueStats:
    weight: float
    parent: str | None = None
    submitted: int = 0
    queued: int = 0
    running: int = 0
    finished: int = 0
    preemptions: int = 0
    cost: float = 0.0                      # asset cost of running jobs now
    waits: list[float] = field(default_factory=list)
    turnaround_sum: float = 0.0
    share: list[tuple[float, float]] = field(default_factory=list)
    fair: list[tuple[float, float]] = field(default_factory=list)
    # time-weighted means over active time
    last_t: float = 0.0
    last_share: float = 0.0
    last_fair: float = 0.0
    last_active: bool = False
    active_time: float = 0.0
    share_area: float = 0.0
    fair_area: float = 0.0
    # the values last given to the share and fair series (None: none yet)
    shown_share: float | None = None
    shown_fair: float | None = None


def _num(x: float) -> float | int:
    """Times and shares for JSON: 6 decimals, whole numbers as ints."""
    x = round(x, 6)
    return int(x) if x == int(x) else x


class Recorder:
    """Collects one run's figures; see the module docstring for what each means."""

    def __init__(self, queues: Sequence[Queue], pool: Mapping[str, int], weights: Mapping[str, float] | None = None):
        self.weights = dict(DEFAULT_SHARE_WEIGHTS if weights is None else weights)
        self.pool_cost = sum(unit_weight(self.weights, name) * amount for name, amount in pool.items()) or 1.0
        ordered = sorted(queues, key=lambda q: q.name)
        self.queues: dict[str, _QueueStats] = {q.name: _QueueStats(q.weight, q.parent) for q in ordered}
        self.weights_by_queue = {q.name: q.weight for q in ordered}
        self.parents = {q.name: q.parent for q in ordered}
        #: Per queue, its stats and its ancestors': every event counts at every level of the tree.
        self.chains: dict[str, tuple[_QueueStats, ...]] = {name: self._chain(name) for name in self.queues}
        self._cost_cache: dict[int, tuple[Mapping, float]] = {}
        self._started: dict[str, tuple[float, float]] = {}   # job id -> (start, cost), runs in progress
        self._first_start: set[str] = set()
        self.busy = 0.0                                        # cost x seconds
        self.useful = 0.0                                      # cost x seconds of runs that finished
        self.cycles = 0
        self.utilisation_series: list[tuple[float, float]] = []
        self.last_time = 0.0
        self._active: list[str] | None = None   # the active queues at the last cycle, and their fair shares
        self._fair: dict[str, float] = {}

    def _chain(self, name: str) -> tuple[_QueueStats, ...]:
        chain = []
        while name is not None:
            chain.append(self.queues[name])
            name = self.parents[name]
        return tuple(chain)

    # -- events ---------------------------------------------------------------
    def cost(self, job: Job) -> float:
        key = id(job.requests)
        hit = self._cost_cache.get(key)
        if hit is not None and hit[0] is job.requests:
            return hit[1]
        value = sum(unit_weight(self.weights, name) * amount for name, amount in job.requests.items())
        self._cost_cache[key] = (job.requests, value)
        return value

    def submitted(self, job: Job, t: float) -> None:
        for stats in self.chains[job.queue]:
            stats.submitted += 1
            stats.queued += 1

    def started(self, job: Job, t: float) -> None:
        cost = self.cost(job)
        self._started[job.id] = (t, cost)
        first = job.id not in self._first_start
        if first:
            self._first_start.add(job.id)
        for stats in self.chains[job.queue]:
            stats.queued -= 1
            stats.running += 1
            stats.cost += cost
            if first:
                stats.waits.append(t - job.submitted)

    def stopped(self, job: Job, t: float, preempted: bool) -> None:
        """A run ended: preempted (the job is queued again) or finished."""
        start, cost = self._started.pop(job.id)
        self.busy += cost * (t - start)
        if not preempted:
            self.useful += cost * (t - start)
            self._first_start.discard(job.id)
        for stats in self.chains[job.queue]:
            stats.running -= 1
            stats.cost -= cost
            if preempted:
                stats.preemptions += 1
                stats.queued += 1
            else:
                stats.finished += 1
                stats.turnaround_sum += t - job.submitted
            if stats.running == 0:
                stats.cost = 0.0  # no float residue once a queue is empty

    def cycle(self, t: float) -> None:
        """A cycle ended at ``t``: record every queue's share and fair share from now on.

        Called once a cycle with every queue: the means' areas up to ``t``
        (:meth:`_advance`), then the new values. Fair
        shares are computed again only when the set of active queues changed,
        and a series is only touched when its value did (:func:`_append`
        would drop an equal value anyway: the last point of a series always
        holds the last value given, rounded).
        """
        self.cycles += 1
        queues = self.queues
        active = [name for name, s in queues.items() if s.queued or s.running]
        if active != self._active:
            self._active = active
            self._fair = fair_shares(self.weights_by_queue, self.parents, active)
        fair_by_queue = self._fair
        pool_cost = self.pool_cost
        self._advance(t)
        total = 0.0
        for name, stats in queues.items():
            share = stats.cost / pool_cost
            if stats.parent is None:
                total += share
            fair = fair_by_queue[name]
            stats.last_share, stats.last_fair, stats.last_active = share, fair, bool(stats.queued or stats.running)
            if stats.submitted:
                if share != stats.shown_share:
                    _append(stats.share, t, share)
                    stats.shown_share = share
                if fair != stats.shown_fair:
                    _append(stats.fair, t, fair)
                    stats.shown_fair = fair
        _append(self.utilisation_series, t, total)

    def _advance(self, t: float) -> None:
        for stats in self.queues.values():
            dt = t - stats.last_t
            if stats.last_active and dt > 0:
                stats.active_time += dt
                stats.share_area += stats.last_share * dt
                stats.fair_area += stats.last_fair * dt
            stats.last_t = t
        self.last_time = max(self.last_time, t)

    # -- the report -------------------------------------------------------------
    def finish(self, end: float) -> None:
        """Close the books at ``end``: runs still going count as busy up to it."""
        self._advance(end)
        for start, cost in self._started.values():
            self.busy += cost * max(0.0, end - start)
        self._started = {job_id: (end, cost) for job_id, (_, cost) in self._started.items()}

    def report(self, simulated: float, wall: float, extra: Mapping | None = None) -> dict:
        queues = {}
        for name, stats in self.queues.items():
            if not stats.submitted:
                continue
            waits = sorted(stats.waits)
            active = stats.active_time
            queues[name] = {
                "weight": _num(stats.weight),
                "fairShare": _num(stats.fair_area / active) if active else 0,
                "meanShare": _num(stats.share_area / active) if active else 0,
                "finished": stats.finished,
                "preemptions": stats.preemptions,
                "waitMean": _num(sum(waits) / len(waits)) if waits else 0,
                "waitP95": _num(percentile(waits, 95)) if waits else 0,
                "share": _series(stats.share, simulated),
                "submitted": stats.submitted,
                "unfinished": stats.submitted - stats.finished,
                "turnaroundMean": _num(stats.turnaround_sum / stats.finished) if stats.finished else 0,
                "fairShareSeries": _series(stats.fair, simulated),
            }
            if stats.parent is not None:
                queues[name]["parent"] = stats.parent
        out = {
            "queues": queues,
            "utilisation": _num(self.busy / (self.pool_cost * simulated)) if simulated > 0 else 0,
            "goodput": _num(self.useful / (self.pool_cost * simulated)) if simulated > 0 else 0,
            "cycles": self.cycles,
            "simulatedSeconds": _num(simulated),
            "wallSeconds": round(wall, 3),
            "utilisationSeries": _series(self.utilisation_series, simulated),
            "shareMeasure": {name: _num(w) for name, w in sorted(self.weights.items())},
        }
        if extra:
            out.update(extra)
        return out


def _append(series: list, t: float, value: float) -> None:
    """Add ``(t, value)`` to a step series: an equal value is dropped, a second value at ``t`` replaces the first.

    Points are tuples, not lists: a week's run holds hundreds of thousands of
    them, and tuples of floats are dropped from the garbage collector's
    tracking, so its full collections no longer walk them all.
    """
    value = round(value, 6)
    if series and series[-1][1] == value:
        return
    if series and series[-1][0] == t:
        series[-1] = (t, value)
        if len(series) > 1 and series[-2][1] == value:
            series.pop()
        return
    series.append((t, value))


def _series(series: list, end: float) -> list:
    return [[_num(t), _num(v)] for t, v in series if t <= end]


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


# -- terminal output -------------------------------------------------------------
def fmt_seconds(seconds: float) -> str:
    """``12.5s``, ``5m12s``, ``2h05m``, ``3d04h``: short and readable in a table."""
    if seconds < 60:
        return f"{seconds:.1f}s" if seconds != int(seconds) else f"{int(seconds)}s"
    s = int(round(seconds))
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def summary_line(report: Mapping) -> str:
    return (f"utilisation {report['utilisation'] * 100:.1f}% (goodput {report.get('goodput', 0) * 100:.1f}%), "
            f"{report['cycles']} cycles, "
            f"{fmt_seconds(report['simulatedSeconds'])} simulated in {report['wallSeconds']:.1f} s")


def render_table(reports: Mapping[str, Mapping], console) -> None:
    """One rich table for one run (``{None: report}``) or several policies (``{policy: report}``)."""
    from rich.table import Table

    several = len(reports) > 1 or next(iter(reports)) is not None
    table = Table(title="flotilla simulate", title_justify="left", show_lines=False)
    if several:
        table.add_column("Policy", style="bold")
    for name, justify in (("Queue", "left"), ("Weight", "right"), ("Fair share", "right"), ("Mean share", "right"),
                          ("Finished", "right"), ("Wait mean", "right"), ("Wait p95", "right"),
                          ("Preemptions", "right")):
        table.add_column(name, justify=justify)
    captions = []
    for p, (policy, report) in enumerate(reports.items()):
        rows = list(report["queues"].items())
        for i, (queue, q) in enumerate(rows):
            cells = [f"{q['parent']}/{queue}" if "parent" in q else queue, f"{q['weight']:g}", f"{q['fairShare']:.3f}", f"{q['meanShare']:.3f}",
                     f"{q['finished']}/{q['submitted']}", fmt_seconds(q["waitMean"]), fmt_seconds(q["waitP95"]),
                     str(q["preemptions"])]
            if several:
                cells.insert(0, policy if i == 0 else "")
            table.add_row(*cells, end_section=(i == len(rows) - 1 and p < len(reports) - 1))
        captions.append((f"{policy}: " if several else "") + summary_line(report))
    table.caption = "\n".join(captions)
    table.caption_justify = "left"
    console.print(table)


__all__ = ["Recorder", "fmt_seconds", "percentile", "render_table",
           "summary_line"]
