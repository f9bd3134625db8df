"""``flotilla simulate --real-time``: play a workload against real (or KWOK) clusters on the wall clock.

The same workload file as ``flotilla simulate`` (spec section 4), the same
scheduler, and the same report and plot (``flotilla.simulate.report``), but
the clusters are the config's ``kind: kubernetes`` clusters and time is the
wall clock: submissions happen at their ``at`` (divided by ``--speed``),
every ``cycle.period`` the scheduler runs against snapshots read from the
API servers, pods are created bound to their nodes, and a job runs until
its pod Succeeds (on a KWOK cluster: its ``duration``, written on the pod as
kwok's completion delay). Comparing this report with ``flotilla simulate``
on the same workload shows what the real API server, watch latency and pod
start-up change about the simulator's prediction.

Times in the report are workload seconds (wall seconds times ``speed``).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable

import structlog

from flotilla.core.capabilities import Backends
from flotilla.kubernetes.pods import DURATION

log = structlog.get_logger("flotilla.realtime")


class RealTimeError(Exception):
    """The real-time run cannot start or did not finish; ``report`` holds what was measured."""

    def __init__(self, message: str, report: dict | None = None):
        super().__init__(message)
        self.report = report


def play(config, workload, seed: int = 0, speed: float = 1.0, until: float | None = None,
         backends: dict | None = None, scheduler=None, timeout: float | None = None,
         on_cycle: Callable | None = None, sync_timeout: float = 60.0) -> dict:
    """Play ``workload`` on the config's Kubernetes clusters; return the report (spec section 4 keys).

    ``until``: stop at this workload time even if jobs remain. ``timeout``:
    give up (:class:`RealTimeError`, with the partial report) after this many
    wall seconds without every job finished (default: the workload's last
    submission plus 10x its longest duration, in wall seconds, plus a minute).
    """
    from flotilla.plugin_manager import make_backends
    from flotilla.scheduler import Scheduler
    from flotilla.kubernetes.runner import LEASED, QUEUED, RUNNING, Runner
    from flotilla.core.shares import share_weights
    from flotilla.simulate.report import Recorder

    if speed <= 0:
        raise RealTimeError("--speed must be positive")
    owned = backends is None
    if backends is None:
        scheduler = scheduler or Scheduler(config)
        backends = make_backends(config, scheduler.pm, kinds=("kubernetes",))
    if not backends:
        raise RealTimeError("the config has no kind: kubernetes cluster to play the workload on; start one with "
                            "`flotilla kwok up --name kwok-1 --nodes 100` and add it under clusters")
    try:
        backends = Backends.of(backends)
        for name, syncing in backends.having("sync").items():
            if not syncing.wait_synced(sync_timeout):
                raise RealTimeError(f"cluster {name}: cannot read it ({syncing.sync_error})")
        scheduler = scheduler or Scheduler(config)
        runner = Runner(scheduler, backends, lease_timeout=float(config.lease.timeout), seed=seed,
                        max_retries=config.lease.max_retries)
        pool: dict[str, int] = {}
        for backend in backends.values():
            for node in backend.snapshot().nodes:
                for resource, amount in node.resources.items():
                    pool[resource] = pool.get(resource, 0) + amount
        recorder = Recorder(workload.queues, pool, share_weights(config.plugins))
        period = float(config.cycle.period)
        t0 = time.time()

        def now_w() -> float:  # workload time
            return (time.time() - t0) * speed

        def to_w(wall: float | None) -> float:
            return ((wall if wall is not None else time.time()) - t0) * speed

        started: set[str] = set()

        def on_event(record, state: str) -> None:
            job = record.job
            if state == RUNNING:
                t = to_w(record.running_at)
                if job.id not in started:
                    started.add(job.id)
                    recorder.started(job, t)
            elif state in ("succeeded", "failed"):
                if job.id in started:
                    started.discard(job.id)
                    recorder.stopped(job, to_w(record.finished_at), preempted=False)
            elif state == QUEUED and job.id in started:
                started.discard(job.id)
                recorder.stopped(job, now_w(), preempted=True)

        runner.on_event = on_event
        upcoming_iter = iter(workload.jobs())
        upcoming = next(upcoming_iter, None)
        longest = workload.longest_duration
        if timeout is None:
            timeout = (workload.last_submission + 10 * longest) / speed + 60
        deadline = time.monotonic() + timeout
        error = None
        end = 0.0
        while True:
            cycle_started = time.monotonic()
            t = now_w()
            if until is not None and t > until:
                end = until
                break
            while upcoming is not None and upcoming[0] <= t:
                at, jobs, duration = upcoming
                wall_duration = f"{duration / speed:.3f}s" if duration is not None else None
                batch = []
                for job in jobs:
                    annotations = dict(job.annotations)
                    if wall_duration is not None:
                        annotations[DURATION] = wall_duration
                    batch.append(replace(job, annotations=annotations))
                runner.submit(batch)
                for job in batch:
                    recorder.submitted(job, job.submitted)
                upcoming = next(upcoming_iter, None)
            result = runner.cycle()
            runner.pump_events()
            recorder.cycle(now_w())
            if on_cycle is not None:
                on_cycle(runner, result)
            if upcoming is None and runner.done():
                end = now_w()
                break
            if time.monotonic() > deadline:
                end = now_w()
                counts = runner.counts()
                error = (f"not finished after {timeout:.0f}s of wall time: "
                         + ", ".join(f"{n} {state}" for state, n in sorted(counts.items())))
                break
            time.sleep(max(0.0, period / speed - (time.monotonic() - cycle_started)))
        recorder.finish(end)
        wall = time.time() - t0
        extra = {"seed": seed, "realTime": True, "speed": speed, "clusters": sorted(backends)}
        if error is not None:
            extra["error"] = error
        unfinished = sum(1 for r in runner.jobs.values() if r.state in (QUEUED, LEASED, RUNNING))
        if until is not None and end >= until and (unfinished or upcoming is not None):
            extra["stoppedAt"] = "until"
        report = recorder.report(end, wall, extra)
        if error is not None:
            raise RealTimeError(error, report)
        return report
    finally:
        if owned:
            for backend in backends.having("close").values():
                backend.close()


def run_cli(config, workload, workload_path: str, *, seed, json_path, plot_path, until, quiet, speed) -> None:
    """``flotilla simulate --real-time`` on a loaded config and workload: play, then write the report, table
    and plot as the simulator does (exit 3 when the run did not finish)."""
    import sys

    import click
    from rich.console import Console

    from flotilla.scheduler_main import UserError, build_scheduler
    from flotilla.simulate.cli import write_json
    from flotilla.simulate.report import render_table

    scheduler = build_scheduler(config)
    try:
        report = play(config, workload, seed=seed, speed=speed, until=until, scheduler=scheduler)
        failure = None
    except RealTimeError as exc:
        report, failure = exc.report, str(exc)
    except OSError as exc:
        raise UserError(f"cannot reach the clusters: {exc}") from None
    if report is not None:
        write_json(report, json_path)
    if failure is not None:
        click.echo(f"error: {failure}", err=True)
        sys.exit(3)
    if not quiet:
        render_table({None: report}, Console(stderr=json_path == "-"))
    if plot_path:
        from flotilla.simulate.plot import plot_runs
        plot_runs({None: report}, plot_path, title=f"flotilla simulate --real-time: {workload_path}")


__all__ = ["RealTimeError", "play", "run_cli"]
