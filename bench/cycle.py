"""Scheduling cycles at scale, timed: jobs placed per second for a given cluster and queue shape.

A benchmark, not a test: it prints figures and asserts nothing about time.

    python bench/cycle.py [--nodes 10000] [--queues 100] [--jobs 1000000] [--profile] [--second-cycle]
    python bench/cycle.py --uniform --nodes 100 --node-cpu 32 --node-memory 256 --queues 10 \\
        --jobs-per-queue 32000 --job-cpu 1 --job-memory 4 [--running 0.5]
    python bench/cycle.py --armada-shapes [--repeat 3] [--clock cpu] [--node-pods 110] [--shapes 1x1,100x10]
    python bench/cycle.py --idle-cycle
    python bench/cycle.py --tree 10 [--repeat 2]

The default is the mixed cluster: 10,000 nodes (1,000 of them tainted GPU
nodes), 100 queues of weights 1 to 4, 1,000,000 queued jobs of five shapes.
It prints snapshot build time, session open time, time per action, jobs
placed, jobs placed per second of cycle time, and peak memory (max RSS).

``--uniform`` takes a shape instead: identical nodes, equal-weight queues of
identical preemptible jobs, and ``--running`` the fraction of the cluster
already running (spread over the queues) when the cycle starts.

``--armada-shapes`` runs the shapes of Armada's
``BenchmarkPreemptingQueueScheduler`` (32-core/256Gi nodes, 1-core/4Gi
preemptible jobs, equal-weight queues, ten times the cluster's room queued per
queue) and prints, per shape:

* ``round one``: everything queued, one first cycle (no kept state); jobs placed per second;
* ``full``: the cluster full of the first cycle's jobs, the rest still
  queued, no eviction (nothing new fits): the cycle's time in milliseconds;
* ``evict all``: the same with ``evict.probability: 1``: every job evicted
  and put back; jobs returned per second;
* ``new queue``: the full cluster with every job evictable and one more queue
  arriving with as many jobs: preemption to its fair share; jobs placed per
  second (returned and new).

Each case is timed ``--repeat`` times and the best run is kept. With
``--node-pods N`` (``--uniform`` too) the nodes declare ``N`` pod slots, as
every Kubernetes node does: the resource vectors then count slots
(:mod:`flotilla.core.resources`), which measures what that dimension costs.

``--tree N`` puts the mixed cluster's queues under ``N`` parent queues (10
parents of 10 leaves at the default size) and times the same snapshot with
flat and with hierarchical queues, alternating (flat, tree, tree, flat, ...)
``--repeat`` times each, best kept, then prints the ratio of jobs placed
per second.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import resource
import time
from dataclasses import dataclass, replace

from flotilla.config import load_config
from flotilla.scheduler import Scheduler
from flotilla.core.logs import configure_logging
from flotilla.core.model import ClusterSnapshot, Job, JobState, Node, Queue, Snapshot, Taint, Toleration

GIB = 2**30


def build_snapshot(scheduler: Scheduler, nodes: int, queues: int, jobs: int, seed: int) -> Snapshot:
    """The mixed cluster of the default run (see the module docstring)."""
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


@dataclass(frozen=True)
class Shape:
    """A uniform cluster and workload: what ``--uniform`` and ``--armada-shapes`` take."""

    nodes: int
    queues: int
    jobs_per_queue: int
    node_cpu: int = 32          # cores
    node_memory: int = 256      # GiB
    job_cpu: float = 1.0        # cores
    job_memory: float = 4.0     # GiB
    running: float = 0.0        # fraction of the cluster already running
    node_pods: int = 0          # the nodes' allocatable pods (their pod slots); 0: none declared, no limit

    def label(self) -> str:
        return f"{self.nodes} node{'s' * (self.nodes != 1)}, {self.queues} queue{'s' * (self.queues != 1)} " \
               f"x {self.jobs_per_queue}"


def uniform_snapshot(scheduler: Scheduler, shape: Shape, extra_queues: int = 0) -> Snapshot:
    """Identical nodes, equal-weight queues of identical preemptible jobs (``extra_queues`` more of them empty)."""
    resources = {"cpu": shape.node_cpu * 1000, "memory": shape.node_memory * GIB}
    if shape.node_pods:
        resources["pods"] = shape.node_pods
    nodes = [Node(f"node-{i:05d}", "c1", resources) for i in range(shape.nodes)]
    requests = {"cpu": int(shape.job_cpu * 1000), "memory": int(shape.job_memory * GIB)}
    per_node = min(shape.node_cpu * 1000 // requests["cpu"], shape.node_memory * GIB // requests["memory"])
    to_run = int(shape.nodes * per_node * shape.running)
    queues = [Queue(f"q{q:03d}") for q in range(shape.queues + extra_queues)]
    running, queued = [], []
    for j in range(shape.jobs_per_queue):
        for q in range(shape.queues):
            n = j * shape.queues + q
            job = Job(f"q{q:03d}-{j}", queues[q].name, "set", 0, "armada-preemptible", float(n), requests)
            if n < to_run:
                running.append(replace(job, state=JobState.RUNNING, cluster="c1", node=nodes[n // per_node].name))
            else:
                queued.append(job)
    return Snapshot([ClusterSnapshot("c1", nodes, running)], queued, queues, scheduler.priority_classes(),
                    "armada-default")


def after(snapshot: Snapshot, decisions, new_jobs: list[Job] = ()) -> Snapshot:
    """The next cycle's snapshot: ``decisions``' placements running, preempted jobs queued again."""
    placed = {p.job.id for p in decisions.scheduled}
    preempted = {job.id for job in decisions.preempted}
    clusters = []
    for cluster in snapshot.clusters:
        running = [job for job in cluster.running if job.id not in preempted]
        running += [replace(p.job, state=JobState.RUNNING, cluster=p.cluster, node=p.node)
                    for p in decisions.scheduled if p.cluster == cluster.name]
        clusters.append(ClusterSnapshot(cluster.name, cluster.nodes, running, cluster.foreign))
    requeued = [replace(job, state=JobState.QUEUED, cluster=None, node=None) for job in decisions.preempted]
    queued = [job for job in snapshot.queued if job.id not in placed] + requeued + list(new_jobs)
    return replace(snapshot, clusters=clusters, queued=queued)


#: What cycles are timed with: wall time, or the process's CPU time (steadier on a shared machine).
CLOCK = {"wall": time.perf_counter, "cpu": time.process_time}
clock = time.perf_counter


def timed_cycle(scheduler: Scheduler, snapshot: Snapshot, evict_probability: float, seed: int = 0):
    scheduler.settings.evict_probability = evict_probability
    started = clock()
    decisions = scheduler.run_cycle(snapshot, random.Random(seed),
                                    actions=[a for a in scheduler.actions if a.name != "lease"])
    return decisions, clock() - started


def tree_queues(queues: list[Queue], parents: int) -> list[Queue]:
    """``queues`` spread round-robin under ``parents`` parent queues of weight 1 (leaves keep their weights)."""
    tops = [Queue(f"org{p:02d}") for p in range(parents)]
    return tops + [replace(q, parent=tops[i % parents].name) for i, q in enumerate(queues)]


def compare_tree(scheduler: Scheduler, snapshot: Snapshot, parents: int, repeat: int, seed: int) -> None:
    nested = replace(snapshot, queues=tree_queues(snapshot.queues, parents))
    best = {"flat": 0.0, "tree": 0.0}
    placed = {}
    order = [("flat", snapshot), ("tree", nested)]
    for r in range(repeat):
        for name, snap in order if r % 2 == 0 else order[::-1]:
            decisions, seconds = timed_cycle(scheduler, snap, scheduler.settings.evict_probability, seed)
            placed[name] = len(decisions.scheduled)
            rate = placed[name] / seconds
            best[name] = max(best[name], rate)
            print(f"  {name:<5} {seconds:6.2f} s  allocate {decisions.timings['allocate']:6.2f} s  "
                  f"{placed[name]:7d} placed  {rate:8.0f} placed/s", flush=True)
    print(f"best placed/s: flat {best['flat']:.0f}, tree ({parents} parents) {best['tree']:.0f}, "
          f"tree/flat {best['tree'] / best['flat']:.3f}")


def armada_shapes(repeat: int, node_pods: int = 0, only: str | None = None) -> None:
    shapes = [Shape(1, 1, 320), Shape(1, 10, 320), Shape(10, 1, 3200), Shape(10, 10, 3200),
              Shape(100, 1, 32000), Shape(100, 10, 32000), Shape(1000, 1, 320000)]
    if only:
        wanted = set(only.split(","))
        shapes = [shape for shape in shapes if f"{shape.nodes}x{shape.queues}" in wanted]
    shapes = [replace(shape, node_pods=node_pods) for shape in shapes]
    print("32-core/256Gi nodes" + (f" of {node_pods} pods" if node_pods else ""),
          "1-core/4Gi preemptible jobs, equal-weight queues; best of", repeat,
          "by", "CPU time" if clock is time.process_time else "wall time")
    print(f"{'shape':<28} {'round one':>14} {'full':>10} {'evict all':>14} {'new queue':>14}")
    print(f"{'':<28} {'placed/s':>14} {'ms':>10} {'returned/s':>14} {'placed/s':>14}")
    for shape in shapes:
        scheduler = Scheduler(load_config(None))
        best = {"round one": 0.0, "full": float("inf"), "evict all": 0.0, "new queue": 0.0}
        for _ in range(repeat):
            first = uniform_snapshot(scheduler, shape, extra_queues=1)
            # Round one is a first cycle: no state kept from the last repeat's other workload (a kept state
            # tries to bring itself up to date before it rebuilds, which a first cycle never pays).
            scheduler.state = None
            decisions, seconds = timed_cycle(scheduler, first, 0.0)
            best["round one"] = max(best["round one"], len(decisions.scheduled) / seconds)
            full = after(first, decisions)
            _, seconds = timed_cycle(scheduler, full, 0.0)
            best["full"] = min(best["full"], seconds * 1000)
            back, seconds = timed_cycle(scheduler, full, 1.0)
            returned = len(full.running()) - len(back.preempted)
            best["evict all"] = max(best["evict all"], returned / seconds)
            newcomer = first.queues[-1].name
            arriving = [Job(f"{newcomer}-{j}", newcomer, "set", 0, "armada-preemptible", float(10**9 + j),
                            first.queued[0].requests) for j in range(shape.jobs_per_queue)]
            moved, seconds = timed_cycle(scheduler, after(first, decisions, arriving), 1.0)
            kept = len(full.running()) - len(moved.preempted)
            best["new queue"] = max(best["new queue"], (kept + len(moved.scheduled)) / seconds)
        print(f"{shape.label():<28} {best['round one']:>14,.0f} {best['full']:>10,.2f} "
              f"{best['evict all']:>14,.0f} {best['new queue']:>14,.0f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=1_000_000, help="queued jobs of the mixed cluster")
    parser.add_argument("--uniform", action="store_true", help="a uniform shape (the options below) instead")
    parser.add_argument("--jobs-per-queue", type=int, default=10_000)
    parser.add_argument("--node-cpu", type=int, default=32, help="cores per node (--uniform)")
    parser.add_argument("--node-memory", type=int, default=256, help="GiB per node (--uniform)")
    parser.add_argument("--job-cpu", type=float, default=1.0, help="cores per job (--uniform)")
    parser.add_argument("--job-memory", type=float, default=4.0, help="GiB per job (--uniform)")
    parser.add_argument("--node-pods", type=int, default=0,
                        help="the nodes' allocatable pods (--uniform, --armada-shapes); 0: none declared")
    parser.add_argument("--running", type=float, default=0.0,
                        help="fraction of the cluster already running when the cycle starts (--uniform)")
    parser.add_argument("--armada-shapes", action="store_true", help="run the preset comparison shapes")
    parser.add_argument("--repeat", type=int, default=3, help="runs per --armada-shapes case (best kept)")
    parser.add_argument("--shapes", help="--armada-shapes: only these, as NODESxQUEUES,... (1x1,100x10)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clock", choices=sorted(CLOCK), default="wall",
                        help="time cycles by wall time or by this process's CPU time")
    parser.add_argument("--profile", action="store_true", help="print the top of a cProfile of the cycle")
    parser.add_argument("--tree", type=int, default=0, metavar="PARENTS",
                        help="time flat against hierarchical queues (the queues under PARENTS parents)")
    parser.add_argument("--second-cycle", action="store_true",
                        help="then run a second cycle with the first one's placements running (evict and return)")
    parser.add_argument("--idle-cycle", action="store_true",
                        help="then run cycles with the first one's placements running and nothing evicted: the "
                             "first brings the kept state up to date, the next has nothing new at all")
    args = parser.parse_args()
    configure_logging("warning")
    global clock
    clock = CLOCK[args.clock]
    if args.armada_shapes:
        armada_shapes(args.repeat, args.node_pods, args.shapes)
        return
    scheduler = Scheduler(load_config(None))
    started = time.perf_counter()
    if args.uniform:
        shape = Shape(args.nodes, args.queues, args.jobs_per_queue, args.node_cpu, args.node_memory,
                      args.job_cpu, args.job_memory, args.running, args.node_pods)
        snapshot = uniform_snapshot(scheduler, shape)
        print(shape.label())
    else:
        snapshot = build_snapshot(scheduler, args.nodes, args.queues, args.jobs, args.seed)
        print(f"nodes {args.nodes}, queues {args.queues}, queued jobs {args.jobs}")
    built = time.perf_counter() - started
    if args.tree:
        compare_tree(scheduler, snapshot, args.tree, args.repeat, args.seed)
        return
    profiler = cProfile.Profile() if args.profile else None
    if profiler:
        profiler.enable()
    decisions, cycle = timed_cycle(scheduler, snapshot, scheduler.settings.evict_probability, args.seed)
    if profiler:
        profiler.disable()
    print_cycle(decisions, cycle, built)
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    if args.idle_cycle:
        idle = after(snapshot, decisions)
        for label in ("next cycle (placements now running)", "idle cycle (nothing changed)"):
            idle_decisions, cycle = timed_cycle(scheduler, idle, 0.0, args.seed)
            print(f"{label}: {cycle * 1000:.0f} ms, {len(idle_decisions.scheduled)} placed, "
                  f"{idle_decisions.counters.get('considered', 0)} considered, "
                  f"open {idle_decisions.timings['open'] * 1000:.0f} ms, "
                  f"allocate {idle_decisions.timings['allocate'] * 1000:.0f} ms")
    if args.second_cycle:
        second = after(snapshot, decisions)
        decisions, cycle = timed_cycle(scheduler, second, scheduler.settings.evict_probability, args.seed)
        print(f"second cycle, {len(second.running())} running")
        print_cycle(decisions, cycle)
        print(f"evicted             {decisions.counters.get('evicted', 0):8d}")
        print(f"preempted           {len(decisions.preempted):8d}")


def print_cycle(decisions, cycle: float, built: float | None = None) -> None:
    placed = len(decisions.scheduled)
    if built is not None:
        print(f"snapshot build      {built:8.2f} s")
    for name in ("open", "evict", "allocate", "preempt"):
        if name in decisions.timings:
            print(f"  {name:<17} {decisions.timings[name]:8.2f} s")
    print(f"cycle total         {cycle:8.2f} s ({'CPU' if clock is time.process_time else 'wall'})")
    print(f"jobs placed         {placed:8d}")
    print(f"jobs placed / s     {placed / cycle:8.0f}")
    print(f"jobs considered     {decisions.counters.get('considered', 0):8d}")
    print(f"peak memory (RSS)   {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:8.0f} MiB")


if __name__ == "__main__":
    main()
