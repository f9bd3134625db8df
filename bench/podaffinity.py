"""Pod anti-affinity at scale, timed: the same cycle with 10% of queued jobs carrying required anti-affinity
and with none.

A benchmark, not a test: it prints figures and asserts nothing about time.

    python bench/podaffinity.py [--nodes 10000] [--queues 100] [--jobs 1000000] [--fraction 0.1]
        [--groups 1000] [--repeat 1] [--clock cpu] [--profile]

The cluster and jobs are bench/cycle.py's mixed cluster (``--nodes`` nodes, a
tenth of them tainted GPU nodes; ``--jobs`` queued jobs of five shapes over
``--queues`` queues). Every job's pod is labelled ``app: app-<k>`` (``--groups``
apps, jobs dealt round-robin); in the anti-affinity case every job whose
number is a multiple of ``1/--fraction`` also carries required anti-affinity
against its own app on ``kubernetes.io/hostname`` (one pod of the app per
node), as a chart's "one replica per node" does. The other jobs carry no
rule, but are checked against the anti-affinity of the pods placed before
them (kube-scheduler's existing-pods rule).

One first cycle (no state kept) is timed for each case, alternating
``--repeat`` times, best kept. Printed per case: jobs placed, the cycle
time, jobs placed per second, and for the anti-affinity case the pods found
sharing a node with a pod of their app that excludes them (always 0).
"""

from __future__ import annotations

import argparse
import sys
import cProfile
import pstats
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from flotilla.config import load_config
from flotilla.core.logs import configure_logging
from flotilla.core.model import Snapshot
from flotilla.core.podrules import PodRules, PodTerm, Selector
from flotilla.core.nodeaffinity import Requirement
from flotilla.scheduler import Scheduler

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cycle as mixed  # noqa: E402

HOSTNAME = "kubernetes.io/hostname"


def labelled(snapshot: Snapshot, groups: int, fraction: float, rules: bool) -> Snapshot:
    """``snapshot``'s jobs with their app labels, and (``rules``) a ``fraction`` of them with anti-affinity."""
    labels = [{"app": f"app-{k}"} for k in range(groups)]
    terms = [PodRules(anti_affinity=(PodTerm(Selector((Requirement("app", "In", (f"app-{k}",)),)),
                                             frozenset(("default",)), HOSTNAME),)) for k in range(groups)]
    every = max(1, round(1 / fraction)) if fraction > 0 else 0
    queued = []
    for j, job in enumerate(snapshot.queued):
        k = j % groups
        with_rules = rules and every and j % every == 0
        queued.append(replace(job, labels=labels[k], namespace="default", pod_rules=terms[k] if with_rules else None))
    clusters = []
    for cluster in snapshot.clusters:
        nodes = [replace(node, labels={**node.labels, HOSTNAME: node.name}) for node in cluster.nodes]
        clusters.append(replace(cluster, nodes=nodes))
    return replace(snapshot, clusters=clusters, queued=queued)


def broken(decisions) -> int:
    """Placed pods sharing a node with a placed pod of their app whose anti-affinity excludes it (or theirs)."""
    by_node: dict[tuple[str, str], Counter] = {}
    ruled: dict[tuple[str, str], Counter] = {}
    for placement in decisions.scheduled:
        where = (placement.cluster, placement.node)
        app = placement.job.labels.get("app")
        by_node.setdefault(where, Counter())[app] += 1
        if placement.job.pod_rules is not None:
            ruled.setdefault(where, Counter())[app] += 1
    return sum(by_node[where][app] - 1 for where, apps in ruled.items() for app, n in apps.items()
               if by_node[where][app] > 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--fraction", type=float, default=0.1, help="share of queued jobs with anti-affinity")
    parser.add_argument("--groups", type=int, default=1000, help="distinct apps (label values)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clock", choices=sorted(mixed.CLOCK), default="wall")
    parser.add_argument("--profile", action="store_true", help="print the top of a cProfile of the ruled cycle")
    args = parser.parse_args()
    configure_logging("warning")
    mixed.clock = mixed.CLOCK[args.clock]
    scheduler = Scheduler(load_config(None))
    base = mixed.build_snapshot(scheduler, args.nodes, args.queues, args.jobs, args.seed)
    cases = {"none": labelled(base, args.groups, args.fraction, False),
             "anti-affinity": labelled(base, args.groups, args.fraction, True)}
    ruled = sum(job.pod_rules is not None for job in cases["anti-affinity"].queued)
    print(f"nodes {args.nodes}, queues {args.queues}, queued jobs {args.jobs}, {ruled} with required "
          f"anti-affinity on {HOSTNAME} over {args.groups} apps; best of {args.repeat} by "
          f"{'CPU' if mixed.clock is time.process_time else 'wall'} time")
    best: dict[str, tuple[float, object]] = {}
    for r in range(args.repeat):
        for name in (list(cases) if r % 2 == 0 else list(cases)[::-1]):
            scheduler.state = None
            profiler = cProfile.Profile() if args.profile and name == "anti-affinity" else None
            if profiler:
                profiler.enable()
            decisions, seconds = mixed.timed_cycle(scheduler, cases[name], scheduler.settings.evict_probability,
                                                   args.seed)
            if profiler:
                profiler.disable()
                pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
            if name not in best or seconds < best[name][0]:
                best[name] = (seconds, decisions)
    print(f"{'case':<15} {'placed':>8} {'cycle s':>9} {'placed/s':>10} {'broken':>7}")
    for name in cases:
        seconds, decisions = best[name]
        placed = len(decisions.scheduled)
        print(f"{name:<15} {placed:>8} {seconds:>9.2f} {placed / seconds:>10.0f} {broken(decisions):>7}")
    ratio = best["anti-affinity"][0] / best["none"][0]
    print(f"cycle time with anti-affinity / without: {ratio:.2f}")


if __name__ == "__main__":
    main()
