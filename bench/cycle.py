"""One cycle at scale: 10,000 nodes, 100 queues, 1,000,000 queued jobs.

A benchmark, not a test: it prints figures and asserts nothing about time.

    python bench/cycle.py [--nodes 10000] [--queues 100] [--jobs 1000000] [--profile]

Prints snapshot build time, session open time, time per action, jobs placed,
jobs placed per second of cycle time, and peak memory (max RSS).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import resource
import time

from flotilla.config import load_config
from flotilla.core.cycle import Scheduler
from flotilla.core.logs import configure_logging
from flotilla.core.model import ClusterSnapshot, Job, Node, Queue, Snapshot, Taint, Toleration

GIB = 2**30


def build_snapshot(scheduler: Scheduler, nodes: int, queues: int, jobs: int, seed: int) -> Snapshot:
    rng = random.Random(seed)
    gpu_taint = (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
    cluster_nodes = []
    for i in range(nodes):
        if i % 10 == 0:
            cluster_nodes.append(Node(f"gpu-{i}", "c1", {"cpu": 64000, "memory": 512 * GIB, "nvidia.com/gpu": 8},
                                      {"kind": "gpu"}, gpu_taint))
        else:
            cluster_nodes.append(Node(f"cpu-{i}", "c1", {"cpu": rng.choice([16000, 32000, 64000]),
                                                          "memory": rng.choice([64, 128, 256]) * GIB}, {"kind": "cpu"}))
    # A handful of request shapes, shared by reference as a real job source would intern them.
    shapes = [{"cpu": 1000, "memory": 4 * GIB}, {"cpu": 2000, "memory": 8 * GIB}, {"cpu": 4000, "memory": 16 * GIB},
              {"cpu": 8000, "memory": 32 * GIB}, {"cpu": 500, "memory": 1 * GIB}]
    gpu_shape = {"cpu": 4000, "memory": 32 * GIB, "nvidia.com/gpu": 1}
    gpu_selector = {"kind": "gpu"}
    gpu_toleration = (Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),)
    queue_objs = [Queue(f"q{q:03d}", weight=float(1 + q % 4)) for q in range(queues)]
    queued = []
    for j in range(jobs):
        queue = queue_objs[j % queues].name
        if j % 50 == 0:
            queued.append(Job(f"j{j}", queue, "set", rng.randrange(3), "armada-default", float(j), gpu_shape,
                              gpu_selector, gpu_toleration))
        else:
            queued.append(Job(f"j{j}", queue, "set", rng.randrange(3), "armada-preemptible", float(j),
                              shapes[rng.randrange(len(shapes))]))
    return Snapshot([ClusterSnapshot("c1", cluster_nodes)], queued, queue_objs, scheduler.priority_classes(),
                    "armada-default")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true", help="print the top of a cProfile of the cycle")
    parser.add_argument("--second-cycle", action="store_true",
                        help="then run a second cycle with the first one's placements running (evict and return)")
    args = parser.parse_args()
    configure_logging("warning")
    scheduler = Scheduler(load_config(None))
    started = time.perf_counter()
    snapshot = build_snapshot(scheduler, args.nodes, args.queues, args.jobs, args.seed)
    built = time.perf_counter() - started
    profiler = cProfile.Profile() if args.profile else None
    if profiler:
        profiler.enable()
    started = time.perf_counter()
    decisions = scheduler.run_cycle(snapshot, random.Random(args.seed),
                                    actions=[a for a in scheduler.actions if a.name != "lease"])
    cycle = time.perf_counter() - started
    if profiler:
        profiler.disable()
    placed = len(decisions.scheduled)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"nodes {args.nodes}, queues {args.queues}, queued jobs {args.jobs}")
    print(f"snapshot build      {built:8.2f} s")
    for name in ("open", "evict", "allocate", "preempt"):
        if name in decisions.timings:
            print(f"  {name:<17} {decisions.timings[name]:8.2f} s")
    print(f"cycle total         {cycle:8.2f} s")
    print(f"jobs placed         {placed:8d}")
    print(f"jobs placed / s     {placed / cycle:8.0f}")
    print(f"jobs considered     {decisions.counters.get('considered', 0):8d}")
    print(f"peak memory (RSS)   {peak_mib:8.0f} MiB")
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    if args.second_cycle:
        second_cycle(scheduler, snapshot, decisions, args.seed)


def second_cycle(scheduler: Scheduler, snapshot: Snapshot, decisions, seed: int) -> None:
    """The steady state: the first cycle's placements run, every preemptible one is evicted and returns."""
    from dataclasses import replace

    from flotilla.core.model import JobState

    placed = {p.job.id: p for p in decisions.scheduled}
    running = [replace(p.job, state=JobState.RUNNING, cluster=p.cluster, node=p.node) for p in decisions.scheduled]
    queued = [job for job in snapshot.queued if job.id not in placed]
    cluster = snapshot.clusters[0]
    snapshot = Snapshot([ClusterSnapshot(cluster.name, cluster.nodes, running)], queued, snapshot.queues,
                        snapshot.priority_classes, snapshot.default_priority_class)
    started = time.perf_counter()
    decisions = scheduler.run_cycle(snapshot, random.Random(seed),
                                    actions=[a for a in scheduler.actions if a.name != "lease"])
    cycle = time.perf_counter() - started
    print(f"second cycle, {len(running)} running")
    for name in ("open", "evict", "allocate", "preempt"):
        if name in decisions.timings:
            print(f"  {name:<17} {decisions.timings[name]:8.2f} s")
    print(f"cycle total         {cycle:8.2f} s")
    print(f"evicted             {decisions.counters.get('evicted', 0):8d}")
    print(f"newly placed        {len(decisions.scheduled):8d}")
    print(f"preempted           {len(decisions.preempted):8d}")


if __name__ == "__main__":
    main()
