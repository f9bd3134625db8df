"""Two source trees' ``--armada-shapes`` figures, paired by hash seed and alternated in one sitting.

A benchmark, not a test: it prints figures and asserts nothing about time.

    python3 bench/compare_trees.py BASE [--tree TREE] [--seeds 1-5] [--repeat 2] [--clock cpu] [--node-pods N]
        [--shapes 1x1,100x1]

For each seed, ``bench/cycle.py --armada-shapes`` (this file's sibling, the
same harness for both trees) runs once in each tree, with
``PYTHONHASHSEED`` set to the seed and ``PYTHONPATH`` to the tree, under
``nice``; the order within a pair alternates from seed to seed (base first
for odd seeds). The seed matters on small shapes: string hashing sets how
dicts and sets of job ids lay out, so a pair compares equal layouts.

It prints each run's table, then per shape and case the speed ratio
TREE / BASE (above 1: TREE is faster; for the *full* case, milliseconds,
the ratio is BASE's time over TREE's): of the best figure of each tree over
the seeds, and the median of the per-seed ratios. On a shared machine
compare CPU time (``--clock cpu``, the default here) and read the load
averages printed before and after.

``BASE`` and ``TREE`` are directories holding a ``flotilla`` package (a
``git worktree add /tmp/base COMMIT`` makes one); TREE defaults to this
file's repository.

``--instructions NODES,QUEUES`` counts instructions instead of timing
(valgrind's cachegrind, ``I refs``): for that shape, each case's cycle in
each tree, as the instructions of a process that prepares the case and runs
the cycle less those of one that only prepares it (hash seed 1). The counts
do not depend on the machine's load, so they compare trees on a shared
machine where CPU times cannot; they weigh every instruction alike (a cache
miss costs none), so they complement timings, not replace them. About two
minutes of a quiet core per process at 100 nodes.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASES = ("round one", "full", "evict all", "new queue")
#: A row of cycle.py's --armada-shapes table: the shape, then four figures.
ROW = re.compile(r"^(\d+ nodes?, \d+ queues? x \d+)\s+([\d,.]+)\s+([\d,.]+)\s+([\d,.]+)"
                 r"\s+([\d,.]+)\s*$")


def seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        out.extend(range(int(low), int(high or low) + 1))
    return out


def check_tree(tree: Path) -> None:
    """The tree's own flotilla is the one imported with PYTHONPATH set to it (not an installed copy)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    found = subprocess.run([sys.executable, "-c", "import flotilla; print(flotilla.__file__)"], env=env,
                           capture_output=True, text=True, cwd="/")
    path = found.stdout.strip()
    if found.returncode != 0 or not Path(path).resolve().is_relative_to(tree.resolve()):
        sys.exit(f"compare_trees: {tree}: imports flotilla from {path or found.stderr.strip()!r}, not from the tree")


def run(tree: Path, seed: int, args) -> dict[str, list[float]]:
    """One --armada-shapes run in ``tree``: shape -> its four figures."""
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED=str(seed))
    command = ["nice", sys.executable, str(HERE / "cycle.py"), "--armada-shapes", "--repeat", str(args.repeat),
               "--clock", args.clock]
    if args.node_pods:
        command += ["--node-pods", str(args.node_pods)]
    if args.shapes:
        command += ["--shapes", args.shapes]
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd="/")
    if done.returncode != 0:
        sys.exit(f"compare_trees: {tree} seed {seed}: cycle.py exited {done.returncode}: {done.stderr.strip()[-500:]}")
    figures: dict[str, list[float]] = {}
    for line in done.stdout.splitlines():
        match = ROW.match(line.strip())
        if match:
            figures[match.group(1)] = [float(x.replace(",", "")) for x in match.groups()[1:]]
    if not figures:
        sys.exit(f"compare_trees: {tree} seed {seed}: no table in cycle.py's output:\n{done.stdout}")
    return figures


def speed_ratio(case: int, tree: float, base: float) -> float:
    """TREE's speed over BASE's: placed/s over placed/s, or BASE's milliseconds over TREE's (case ``full``)."""
    if CASES[case] == "full":
        return base / tree if tree else float("nan")
    return tree / base if base else float("nan")


#: The cases of --instructions, as cycle.py's --armada-shapes prepares them.
CASE_NAMES = {"round one": "round", "full": "full", "evict all": "evict", "new queue": "newq"}


def prepare_and_run(nodes: int, queues: int, case: str, measure: bool) -> None:
    """In the child of --instructions: prepare ``case`` of the shape as cycle.py does, then run its cycle if
    ``measure``."""
    sys.path.insert(0, str(HERE))
    import cycle
    from flotilla.config import load_config
    from flotilla.core.logs import configure_logging
    from flotilla.scheduler import Scheduler

    configure_logging("warning")
    scheduler = Scheduler(load_config(None))
    per_queue = nodes * 320  # ten times the cluster's room per queue, as cycle.py's shapes
    first = cycle.uniform_snapshot(scheduler, cycle.Shape(nodes, queues, per_queue), extra_queues=1)
    scheduler.state = None
    snapshot, probability = first, 0.0
    if case != "round":
        decisions, _ = cycle.timed_cycle(scheduler, first, 0.0)
        full = cycle.after(first, decisions)
        snapshot, probability = (full, 0.0) if case == "full" else (full, 1.0)
        if case == "newq":
            newcomer = first.queues[-1].name
            arriving = [cycle.Job(f"{newcomer}-{j}", newcomer, "set", 0, "armada-preemptible", float(10**9 + j),
                                  first.queued[0].requests) for j in range(per_queue)]
            snapshot = cycle.after(first, decisions, arriving)
    if measure:
        cycle.timed_cycle(scheduler, snapshot, probability)


def instructions(tree: Path, nodes: int, queues: int, case: str, measure: bool) -> int:
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="1")
    command = ["nice", "valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
               sys.executable, str(Path(__file__).resolve()), "--child", f"{nodes},{queues},{case},{int(measure)}"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd="/")
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if done.returncode != 0 or not found:
        sys.exit(f"compare_trees: {tree} {case}: valgrind exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return int(found.group(1).replace(",", ""))


def compare_instructions(trees: dict[str, Path], shape: str) -> None:
    nodes, queues = (int(x) for x in shape.split(","))
    print(f"instructions per cycle (cachegrind I refs), {nodes} nodes x {queues} queues, hash seed 1")
    print(f"{'case':<12} {'base':>16} {'tree':>16} {'tree / base':>12}", flush=True)
    for label, case in CASE_NAMES.items():
        counts = {name: instructions(tree, nodes, queues, case, True) - instructions(tree, nodes, queues, case, False)
                  for name, tree in trees.items()}
        print(f"{label:<12} {counts['base']:>16,} {counts['tree']:>16,} {counts['tree'] / counts['base']:>12.3f}",
              flush=True)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        nodes, queues, case, measure = sys.argv[2].split(",")
        prepare_and_run(int(nodes), int(queues), case, measure == "1")
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path, help="the tree compared against (holds a flotilla package)")
    parser.add_argument("--tree", type=Path, default=HERE.parent, help="the tree measured (default: this repository)")
    parser.add_argument("--seeds", default="1-5", help="hash seeds, as 1-5 or 1,3,7 (default 1-5)")
    parser.add_argument("--repeat", type=int, default=2, help="cycle.py's --repeat (best of, per run)")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    parser.add_argument("--node-pods", type=int, default=0, help="cycle.py's --node-pods")
    parser.add_argument("--shapes", help="cycle.py's --shapes: only these, as NODESxQUEUES,... (default all)")
    parser.add_argument("--instructions", metavar="NODES,QUEUES",
                        help="count instructions per cycle of this shape instead (cachegrind); see above")
    args = parser.parse_args()
    trees = {"base": args.base, "tree": args.tree}
    for tree in trees.values():
        check_tree(tree)
    if args.instructions:
        compare_instructions(trees, args.instructions)
        return
    print(f"base {args.base}, tree {args.tree}; seeds {args.seeds}, --repeat {args.repeat}, --clock {args.clock}; "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    results: dict[str, dict[int, dict[str, list[float]]]] = {"base": {}, "tree": {}}
    for seed in seeds(args.seeds):
        order = ("base", "tree") if seed % 2 else ("tree", "base")
        for name in order:
            results[name][seed] = figures = run(trees[name], seed, args)
            print(f"seed {seed} {name}: " + "; ".join(
                f"{shape}: " + " ".join(f"{x:g}" for x in row) for shape, row in figures.items()), flush=True)
    print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    shapes = list(next(iter(results["base"].values())))
    print()
    print("TREE / BASE speed (above 1: TREE faster); best of the seeds' figures, then the median of the paired "
          "per-seed ratios")
    print(f"{'shape':<22}" + "".join(f"{case:>24}" for case in CASES))
    worst = (float("inf"), "")
    for shape in shapes:
        cells = []
        for case in range(len(CASES)):
            pick = min if CASES[case] == "full" else max
            best = {name: pick(runs[shape][case] for runs in results[name].values()) for name in results}
            best_ratio = speed_ratio(case, best["tree"], best["base"])
            paired = statistics.median(speed_ratio(case, results["tree"][s][shape][case], results["base"][s][shape][case])
                                       for s in results["base"])
            cells.append(f"{best_ratio:.3f} (median {paired:.3f})")
            worst = min(worst, (best_ratio, f"{shape}, {CASES[case]}"))
        print(f"{shape:<22}" + "".join(f"{cell:>24}" for cell in cells))
    print(f"lowest best-of ratio: {worst[0]:.3f} ({worst[1]})")


if __name__ == "__main__":
    main()
