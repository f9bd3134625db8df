"""What "why is my job pending" costs a cycle: the queue heads read after the actions, and their publication.

A benchmark, not a test: it prints figures and asserts nothing about time.

    python bench/pending.py [--nodes 10000] [--queues 100] [--jobs 1000000] [--repeat 3]

On the mixed cluster of ``bench/cycle.py``, times (process CPU time, best
of ``--repeat``) a steady cycle (state kept, the first cycle's placements
running) without heads and with the service's heads (``head_size(queues)``
jobs per queue), then the status's ``pending`` body built from them
(every head job's reason) and its size as JSON.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cycle import after, build_snapshot  # noqa: E402

from flotilla.config import load_config  # noqa: E402
from flotilla.core.logs import configure_logging  # noqa: E402
from flotilla.scheduler import Scheduler  # noqa: E402
from flotilla.service.leases import job_of  # noqa: E402
from flotilla.service.pending import head_size, published_heads  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    configure_logging("warning")
    head = head_size(args.queues)
    best: dict[str, float] = {}
    size = 0
    for _ in range(args.repeat):
        for label, n in (("without heads", 0), (f"with heads of {head}", head)):
            scheduler = Scheduler(load_config(None))
            actions = [a for a in scheduler.actions if a.name != "lease"]
            snapshot = build_snapshot(scheduler, args.nodes, args.queues, args.jobs, 0)
            first = scheduler.run_cycle(snapshot, random.Random(0), actions=actions)
            steady = after(snapshot, first)
            started = time.process_time()
            decisions = scheduler.run_cycle(steady, random.Random(1), actions=actions, head=n, head_key=job_of)
            best[label] = min(best.get(label, float("inf")), time.process_time() - started)
            if n:
                started = time.process_time()
                body = published_heads(decisions)
                best["publish"] = min(best.get("publish", float("inf")), time.process_time() - started)
                size = len(json.dumps(body, separators=(",", ":")))
    print(f"{args.nodes} nodes, {args.queues} queues, {args.jobs} queued jobs; best of {args.repeat} (CPU seconds)")
    for label, seconds in best.items():
        print(f"  {label:<22} {seconds:8.3f} s")
    print(f"  pending body           {size / 1024:8.0f} KiB as JSON")


if __name__ == "__main__":
    main()
