"""Reservation churn: backfill jobs preempted for other backfill jobs, on two code trees, in one run.

A benchmark, not a test: it prints figures and asserts nothing.

    python bench/reserve_churn.py --base /path/to/a/worktree/of/main [--until 3h] [--backfill 8]

Runs ``examples/policies/reservation.yaml`` on its workload (a stream of
1-core jobs, preemptible 1-hour backfill jobs, a 64-core gang at 30 minutes)
with ``--backfill`` backfill jobs every 10 minutes instead of 4 (so that
their queue's head waits past ``reservation.after``),
for ``--until`` simulated time, once with this tree's code and once with
the tree given by ``--base`` (``git worktree add --detach /tmp/base main``),
each in a subprocess whose ``PYTHONPATH`` is that tree. Every committed
statement is watched: a preemptible job stopped in a statement that also
places a preemptible job is a backfill job preempted for another backfill
job. Printed per tree: those preemptions, all preemptions, how many of the
units the reserve action placed were backfill, and when the gang started.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "examples" / "policies" / "reservation.yaml"
WORKLOAD = ROOT / "examples" / "policies" / "reservation-workload.yaml"

# Runs inside each tree: the statement watcher, then the simulation.
HARNESS = r"""
import json, sys
from flotilla.config import load_config
from flotilla.core.quantities import parse_duration
from flotilla.core.statement import Statement
from flotilla.simulate import Simulation, load_workload

config = load_config(sys.argv[1])
workload = load_workload(sys.argv[2], config)
counts = {"backfillForBackfill": 0, "preempted": 0, "gangStart": None}
commit = Statement.commit

def watched(stmt):
    session = stmt.session
    placed = [job for op, job, _, _ in stmt.ops if op == "allocate"]
    stopped = [job for op, job, _, _ in stmt.ops if op == "preempt"]
    commit(stmt)
    backfill = lambda job: session.priority_class(job).preemptible
    if any(map(backfill, placed)):
        counts["backfillForBackfill"] += sum(map(backfill, stopped))
    counts["preempted"] += len(stopped)
    if counts["gangStart"] is None and any(job.queue == "big" for job in placed):
        counts["gangStart"] = session.now

Statement.commit = watched
report = Simulation(config, workload, until=parse_duration(sys.argv[3])).run()
counts["fillPreemptions"] = report["queues"]["fill"]["preemptions"]
print(json.dumps(counts))
"""


def run_tree(tree: Path, config: str, workload: str, until: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", HARNESS, config, workload, until], env=env, cwd=tree,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="a checkout of the code to compare with (e.g. main)")
    parser.add_argument("--config", default=str(CONFIG))
    parser.add_argument("--workload", default=str(WORKLOAD))
    parser.add_argument("--until", default="3h")
    parser.add_argument("--backfill", type=int, default=8, help="backfill jobs submitted every 10 minutes")
    args = parser.parse_args()
    text = Path(args.workload).read_text()
    if "queue: fill, count: 4," in text:
        text = text.replace("queue: fill, count: 4,", f"queue: fill, count: {args.backfill},")
    workload = Path(tempfile.mkdtemp()) / "workload.yaml"
    workload.write_text(text)
    rows = [("base", Path(args.base).resolve()), ("this tree", ROOT)]
    print(f"{args.config} on {args.workload} ({args.backfill} backfill jobs every 10 minutes), {args.until} simulated")
    print(f"{'code':<10} {'backfill for backfill':>22} {'all preemptions':>16} {'fill preempted':>15} "
          f"{'gang starts at':>15}")
    for name, tree in rows:
        c = run_tree(tree, str(Path(args.config).resolve()), str(workload), args.until)
        start = "never" if c["gangStart"] is None else f"{c['gangStart'] / 60:.0f} min"
        print(f"{name:<10} {c['backfillForBackfill']:>22} {c['preempted']:>16} {c['fillPreemptions']:>15} "
              f"{start:>15}")


if __name__ == "__main__":
    main()
