"""The large simulate example, timed: 1,000 nodes, 100 queues, 200,000 jobs, one simulated week.

A benchmark, not a test: it prints figures and asserts nothing about time.

    python bench/simulate.py [--until 1d] [--evict-probability 1] [--profile] [--json OUT]

Runs ``examples/simulate-large.yaml`` on ``examples/workloads/large.yaml``
(written by ``examples/workloads/make_large.py`` if missing) through the same
:class:`~flotilla.simulate.Simulation` the ``flotilla simulate`` command
uses, and prints wall time, cycles per second, jobs simulated per second of
wall time (jobs finished / wall seconds), simulated seconds per wall second,
time spent inside ``Scheduler.run_cycle`` versus the simulator's own
bookkeeping, and peak memory (max RSS; ``--tracemalloc`` adds Python's peak
allocation, at some cost in speed). Both are split further, in CPU seconds:
``run_cycle`` into session open, each action and the rest (close, commit),
the simulator into what it does each cycle (the clusters' snapshots, their
events, the figures; the rest is submissions, the snapshot's queue, the clock
and Python's garbage collector, which ``run_cycle`` pauses during the cycle),
so a change on either side shows where it landed.
``--evict-probability`` overrides the config's ``evict.probability`` (1: every
running preemptible job is evicted and put back each cycle).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "examples" / "simulate-large.yaml"
WORKLOAD = ROOT / "examples" / "workloads" / "large.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(CONFIG))
    parser.add_argument("--workload", default=str(WORKLOAD))
    parser.add_argument("--until", default=None, help="stop at this simulated time (e.g. 1d)")
    parser.add_argument("--evict-probability", type=float, default=None,
                        help="override the config's evict.probability (e.g. 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="also write the report here")
    parser.add_argument("--profile", action="store_true", help="print the top of a cProfile of the run")
    parser.add_argument("--tracemalloc", action="store_true", help="measure Python's peak allocation too")
    args = parser.parse_args()

    if not Path(args.workload).exists() or not Path(args.config).exists():
        subprocess.run([sys.executable, str(ROOT / "examples" / "workloads" / "make_large.py")], check=True)

    from flotilla.config import load_config
    from flotilla.core.logs import configure_logging
    from flotilla.core.quantities import parse_duration
    from flotilla.simulate import Simulation, load_workload
    from flotilla.simulate.cli import dumps_report
    from flotilla.simulate.report import fmt_seconds

    configure_logging("warning")
    if args.tracemalloc:
        import tracemalloc
        tracemalloc.start()
    started = time.perf_counter()
    config = load_config(args.config)
    if args.evict_probability is not None:
        config.evict = config.evict.model_copy(update={"probability": args.evict_probability})
    workload = load_workload(args.workload, config)
    loaded = time.perf_counter() - started

    in_cycle = cycle_cpu = 0.0
    timings: dict[str, float] = {}
    load = {"queued": 0, "queued_max": 0, "running": 0, "running_max": 0}

    def on_cycle(sim, info):
        queued, running = len(sim.queued), len(sim._run_end)
        load["queued"] += queued
        load["running"] += running
        load["queued_max"] = max(load["queued_max"], queued)
        load["running_max"] = max(load["running_max"], running)

    sim = Simulation(config, workload, seed=args.seed, on_cycle=on_cycle,
                     until=parse_duration(args.until) if args.until else None)
    run_cycle = sim.scheduler.run_cycle

    def timed(*a, **kw):
        nonlocal in_cycle, cycle_cpu
        t0, c0 = time.perf_counter(), time.process_time()
        decisions = run_cycle(*a, **kw)
        in_cycle += time.perf_counter() - t0
        cycle_cpu += time.process_time() - c0
        for name, seconds in decisions.timings.items():
            timings[name] = timings.get(name, 0.0) + seconds
        return decisions

    sim.scheduler.run_cycle = timed

    # Phases in CPU seconds, both sides (wrapping costs about a microsecond per call).
    phases: dict[str, float] = {"snapshots": 0.0, "events": 0.0, "figures": 0.0}
    cycle_phases: dict[str, float] = {"open": 0.0}

    def cpu_timed(phase, function, into=phases):
        into.setdefault(phase, 0.0)

        def wrapper(*a, **kw):
            c0 = time.process_time()
            try:
                return function(*a, **kw)
            finally:
                into[phase] += time.process_time() - c0
        return wrapper

    collecting = [0.0, 0.0, 0]  # started, seconds, collections

    def on_gc(phase, info):
        if phase == "start":
            collecting[0] = time.process_time()
        else:
            collecting[1] += time.process_time() - collecting[0]
            collecting[2] += 1

    gc.callbacks.append(on_gc)
    sim.scheduler._open = cpu_timed("open", sim.scheduler._open, cycle_phases)
    for action in sim.scheduler.actions:
        action.execute = cpu_timed(action.name, action.execute, cycle_phases)
    for backend in sim.backends.values():
        backend.snapshot = cpu_timed("snapshots", backend.snapshot)
    sim._poll = cpu_timed("events", sim._poll)
    sim.recorder.cycle = cpu_timed("figures", sim.recorder.cycle)
    profiler = cProfile.Profile() if args.profile else None
    if profiler:
        profiler.enable()
    t0, c0 = time.perf_counter(), time.process_time()
    report = sim.run()
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    if profiler:
        profiler.disable()
    gc.callbacks.remove(on_gc)
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    finished = sum(q["finished"] for q in report["queues"].values())
    preemptions = sum(q["preemptions"] for q in report["queues"].values())
    print(f"workload            {workload.total_jobs} jobs, {len(workload.queues)} queues, "
          f"{sum(len(n) for n in [b.nodes for b in sim.backends.values()])} nodes")
    print(f"load config+workload {loaded:7.2f} s")
    print(f"simulated           {fmt_seconds(report['simulatedSeconds'])} ({report['simulatedSeconds']} s)")
    print(f"wall                {wall:8.1f} s")
    print(f"  in run_cycle      {in_cycle:8.1f} s  ({', '.join(f'{k} {v:.1f}' for k, v in timings.items() if k != 'total')})")
    print(f"  simulator         {wall - in_cycle:8.1f} s  (snapshots, events, figures)")
    print(f"CPU                 {cpu:8.1f} s  (steadier than wall on a shared machine)")
    print(f"  in run_cycle      {cycle_cpu:8.1f} s  ({', '.join(f'{k} {v:.1f}' for k, v in cycle_phases.items())}, "
          f"close and commit {cycle_cpu - sum(cycle_phases.values()):.1f})")
    own = cpu - cycle_cpu
    print(f"  simulator         {own:8.1f} s  ({', '.join(f'{k} {v:.1f}' for k, v in phases.items())}, "
          f"rest {own - sum(phases.values()):.1f})")
    print(f"  garbage collector {collecting[1]:8.1f} s  ({collecting[2]} collections, counted in the phase they interrupt)")
    print(f"cycles              {report['cycles']:8d}  ({report['cycles'] / wall:.0f} per second)")
    print(f"jobs finished       {finished:8d}  ({finished / wall:.0f} per second of wall time)")
    print(f"preemptions         {preemptions:8d}")
    cycles = max(1, report["cycles"])
    print(f"jobs queued / cycle {load['queued'] / cycles:8.0f}  (max {load['queued_max']})")
    print(f"jobs running / cycle {load['running'] / cycles:7.0f}  (max {load['running_max']})")
    print(f"simulated / wall    {report['simulatedSeconds'] / wall:8.0f} x")
    print(f"utilisation         {report['utilisation'] * 100:7.1f} %")
    print(f"peak memory (RSS)   {peak_rss:8.0f} MiB")
    if args.tracemalloc:
        import tracemalloc
        print(f"peak traced (Python) {tracemalloc.get_traced_memory()[1] / 2**20:7.0f} MiB")
    if args.json:
        Path(args.json).write_text(dumps_report(report) + "\n")
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    main()
