"""The node wishlist at scale, timed: what computing it after a cycle costs the service.

A benchmark, not a test: it prints figures and asserts nothing about time.

    python bench/wishlist.py [--nodes 10000] [--queues 100] [--jobs 200000] [--repeat 3]

The cluster and jobs are ``bench/cycle.py``'s mixed cluster (10,000 nodes,
a tenth of them tainted gpu nodes; five job shapes and gpu jobs). One cycle
runs (its placements then hold room), and the wishlist of the jobs left
waiting is computed over three node templates (a 16-core, a 64-core and an
8-gpu one), ``--repeat`` times; the best is printed with the cycle's time
beside it, and the wishlist itself. Times are the process's CPU time.
"""

from __future__ import annotations

import argparse
import inspect
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cycle import GIB, build_snapshot  # noqa: E402

from flotilla.config import load_config  # noqa: E402
from flotilla.core.logs import configure_logging  # noqa: E402
from flotilla.core.model import Node, Taint  # noqa: E402
from flotilla.core.wishlist import compute_wishlist  # noqa: E402
from flotilla.scheduler import Scheduler  # noqa: E402

TEMPLATES = [
    Node("cpu-16", "c1", {"cpu": 16000, "memory": 64 * GIB}, {"kind": "cpu"}),
    Node("cpu-64", "c1", {"cpu": 64000, "memory": 256 * GIB}, {"kind": "cpu"}),
    Node("gpu-8", "c1", {"cpu": 64000, "memory": 512 * GIB, "nvidia.com/gpu": 8}, {"kind": "gpu"},
         (Taint("nvidia.com/gpu", "present", "NoSchedule"),)),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=200_000, help="queued jobs")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    configure_logging("warning")
    scheduler = Scheduler(load_config(None))
    snapshot = build_snapshot(scheduler, args.nodes, args.queues, args.jobs, 0)
    started = time.process_time()
    decisions = scheduler.run_cycle(snapshot, random.Random(0),
                                    actions=[a for a in scheduler.actions if a.name != "lease"])
    cycle = time.process_time() - started
    # The decisions' placements and preemptions, where this version of compute_wishlist takes them.
    extra = ((decisions.scheduled, decisions.preempted)
             if "scheduled" in inspect.signature(compute_wishlist).parameters else ())
    best = float("inf")
    for _ in range(args.repeat):
        started = time.process_time()
        wishlist = compute_wishlist(scheduler, snapshot, decisions.queued, TEMPLATES, *extra)
        best = min(best, time.process_time() - started)
    print(f"nodes {args.nodes}, queued {args.jobs}: cycle {cycle:.2f} s CPU, {len(decisions.scheduled)} placed, "
          f"{len(decisions.queued)} waiting")
    print(f"wishlist            {best:8.2f} s CPU (best of {args.repeat})")
    print(json.dumps(wishlist.to_dict()["templates"]))


if __name__ == "__main__":
    main()
