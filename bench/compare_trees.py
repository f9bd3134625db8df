"""Two source trees' per-cycle figures on ``bench/cycle.py``'s ``--armada-shapes``: instructions, and paired CPU time.

A benchmark, not a test: it prints figures and asserts nothing about time.

    python3 bench/compare_trees.py BASE [--tree TREE] --instructions [SHAPES]      # instructions per cycle
    python3 bench/compare_trees.py BASE [--tree TREE] [--pairs 15] [--budget 1.5] [--shapes 1x1,100x1]

``BASE`` and ``TREE`` are directories holding a ``flotilla`` package (a
``git worktree add /tmp/base COMMIT`` makes one); TREE defaults to this
file's repository. Both trees run this file's harness (the cases of
``cycle.py``'s ``--armada-shapes``: round one, full, evict all, new
queue), each with ``PYTHONPATH`` set to the tree, under ``nice``.

``--instructions`` (the primary figure): the instructions of each case's
cycle in each tree, counted by valgrind's callgrind with instrumentation
on for that cycle only (a client request from a small C library built
with ``cc`` on first use), hash seed 1 (``--seed``). The counts do not
depend on the machine's load, so they compare trees on a shared machine
where times cannot, to a fraction of a percent; they weigh every
instruction alike (a cache miss costs none), so the CPU times below
cross-check them. SHAPES: ``all`` (the default) or ``1x1,100x10,...``.

Paired CPU time (the cross-check): per pair, each tree runs each shape in a
process of its own that repeats the shape's four cycles (round one from a
fresh snapshot and no kept state, then full, evict all, new queue, as
``cycle.py`` does) until its round-one and new-queue cycles have taken
``--budget`` CPU seconds each, and reports per case the work done over the
CPU time the case's cycles took (for *full*, milliseconds per cycle). The
two trees of a pair run back to back with the same hash seed (the pair's
number: string hashing sets how dicts and sets of job ids lay out), the
order alternating from pair to pair, so load that changes slowly weighs
on both alike. Per shape and case it prints the median of the pairs'
ratios TREE / BASE (above 1: TREE faster) with a 95% bootstrap interval of
that median; an interval inside 0.95..1.05 says the trees are within 5%
of each other there, one that straddles 0.95 or 1.05 says the
measurement cannot tell.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASES = ("round one", "full", "evict all", "new queue")
#: cycle.py's --armada-shapes shapes, as NODESxQUEUES.
SHAPES = ("1x1", "1x10", "10x1", "10x10", "100x1", "100x10", "1000x1")
#: The small C library whose functions turn callgrind's instrumentation on and off (a client request).
MARKS_C = """#include <valgrind/callgrind.h>
void marks_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void marks_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS_AT("cycle"); }
"""


def check_tree(tree: Path) -> None:
    """The tree's own flotilla is the one imported with PYTHONPATH set to it (not an installed copy)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    found = subprocess.run([sys.executable, "-c", "import flotilla; print(flotilla.__file__)"], env=env,
                           capture_output=True, text=True, cwd="/")
    path = found.stdout.strip()
    if found.returncode != 0 or not Path(path).resolve().is_relative_to(tree.resolve()):
        sys.exit(f"compare_trees: {tree}: imports flotilla from {path or found.stderr.strip()!r}, not from the tree")


def parse_shapes(text: str) -> list[tuple[int, int]]:
    names = SHAPES if text == "all" else text.split(",")
    out = []
    for name in names:
        nodes, _, queues = name.partition("x")
        if not (nodes.isdigit() and queues.isdigit()):
            sys.exit(f"compare_trees: shape {name!r}: expected NODESxQUEUES, as 100x10")
        out.append((int(nodes), int(queues)))
    return out


# -- the cases, as cycle.py's --armada-shapes makes them (run in a child, with the tree on PYTHONPATH) -----------
class Cases:
    """One shape's four cases in one process: :meth:`sequence` prepares and runs them in cycle.py's order, calling
    ``around(case, run)`` for each case's cycle (``run()`` runs it and returns its decisions)."""

    def __init__(self, nodes: int, queues: int):
        sys.path.insert(0, str(HERE))
        import cycle
        from flotilla.config import load_config
        from flotilla.core.logs import configure_logging
        from flotilla.scheduler import Scheduler

        configure_logging("warning")
        self.cycle = cycle
        self.scheduler = Scheduler(load_config(None))
        self.shape = cycle.Shape(nodes, queues, nodes * 320)  # ten times the cluster's room per queue

    def sequence(self, around, last: str = "new queue") -> None:
        cycle, scheduler, shape = self.cycle, self.scheduler, self.shape
        first = cycle.uniform_snapshot(scheduler, shape, extra_queues=1)
        scheduler.state = None   # round one is a first cycle: no kept state
        decisions = around("round one", lambda: cycle.timed_cycle(scheduler, first, 0.0)[0], first)
        if last == "round one":
            return
        full = cycle.after(first, decisions)
        around("full", lambda: cycle.timed_cycle(scheduler, full, 0.0)[0], full)
        if last == "full":
            return
        around("evict all", lambda: cycle.timed_cycle(scheduler, full, 1.0)[0], full)
        if last == "evict all":
            return
        newcomer = first.queues[-1].name
        arriving = [cycle.Job(f"{newcomer}-{j}", newcomer, "set", 0, "armada-preemptible", float(10**9 + j),
                              first.queued[0].requests) for j in range(shape.jobs_per_queue)]
        moved = cycle.after(first, decisions, arriving)
        around("new queue", lambda: cycle.timed_cycle(scheduler, moved, 1.0)[0], full)


def work(case: str, decisions, snapshot) -> int:
    """What a case's cycle did, as cycle.py counts it: jobs placed, or returned (running less preempted)."""
    if case == "round one":
        return len(decisions.scheduled)
    if case == "full":
        return 1
    returned = len(snapshot.running()) - len(decisions.preempted)
    return returned + (len(decisions.scheduled) if case == "new queue" else 0)


def child_instructions(nodes: int, queues: int, case: str, marks: str) -> None:
    """In valgrind: run the shape's cases up to ``case``, with instrumentation on for that case's cycle only."""
    import ctypes
    library = ctypes.CDLL(marks)

    def around(name, run, snapshot):
        if name != case:
            return run()
        library.marks_start()
        decisions = run()
        library.marks_stop()
        return decisions

    Cases(nodes, queues).sequence(around, last=case)


def child_times(nodes: int, queues: int, budget: float) -> None:
    """Repeat the shape's four cases until round one and new queue have each taken ``budget`` CPU seconds; print
    per case [work, CPU seconds, cycles] as JSON."""
    cases = Cases(nodes, queues)
    totals = {case: [0, 0.0, 0] for case in CASES}

    def around(name, run, snapshot):
        started = time.process_time()
        decisions = run()
        seconds = time.process_time() - started
        total = totals[name]
        total[0] += work(name, decisions, snapshot)
        total[1] += seconds
        total[2] += 1
        return decisions

    while totals["round one"][1] < budget or totals["new queue"][1] < budget:
        cases.sequence(around)
    print(json.dumps(totals))


# -- instructions ---------------------------------------------------------------------------------------------
def build_marks(directory: str) -> str:
    source, library = Path(directory, "marks.c"), Path(directory, "marks.so")
    source.write_text(MARKS_C)
    built = subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(library), str(source)],
                           capture_output=True, text=True)
    if built.returncode != 0:
        sys.exit(f"compare_trees: building the callgrind marks needs cc and valgrind's headers "
                 f"(valgrind/callgrind.h): {built.stderr.strip()[-300:]}")
    return str(library)


def instructions(tree: Path, nodes: int, queues: int, case: str, seed: int, marks: str, directory: str) -> int:
    """The instructions of ``case``'s cycle in ``tree`` (callgrind's Ir between the marks)."""
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED=str(seed))
    out = Path(directory, f"out-{os.getpid()}-{nodes}x{queues}-{case.replace(' ', '')}-{tree.name}")
    command = ["nice", "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
               sys.executable, str(Path(__file__).resolve()), "--child-instructions",
               f"{nodes},{queues},{case},{marks}"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd="/")
    dumps = [path for path in Path(directory).glob(out.name + "*") if path.name != out.name]
    text = dumps[0].read_text() if len(dumps) == 1 else ""
    for path in Path(directory).glob(out.name + "*"):
        path.unlink()
    found = re.search(r"^totals:\s+(\d+)", text, re.MULTILINE)
    if done.returncode != 0 or not found:
        sys.exit(f"compare_trees: {tree} {nodes}x{queues} {case}: valgrind exited {done.returncode}: "
                 f"{done.stderr.strip()[-500:]}")
    return int(found.group(1))


def compare_instructions(trees: dict[str, Path], shapes: list[tuple[int, int]], seed: int) -> None:
    print(f"instructions per cycle (callgrind Ir, the cycle only), hash seed {seed}")
    print(f"{'shape':<10} {'case':<10} {'base':>16} {'tree':>16} {'tree / base':>12}", flush=True)
    worst = (0.0, "")
    with tempfile.TemporaryDirectory(prefix="compare-trees-") as directory:
        marks = build_marks(directory)
        for nodes, queues in shapes:
            for case in CASES:
                counts = {name: instructions(tree, nodes, queues, case, seed, marks, directory)
                          for name, tree in trees.items()}
                ratio = counts["tree"] / counts["base"]
                worst = max(worst, (ratio, f"{nodes}x{queues} {case}"))
                print(f"{nodes}x{queues:<8} {case:<10} {counts['base']:>16,} {counts['tree']:>16,} {ratio:>12.3f}",
                      flush=True)
    print(f"highest tree / base: {worst[0]:.3f} ({worst[1]})")


# -- paired CPU time ------------------------------------------------------------------------------------------
def timed(tree: Path, nodes: int, queues: int, seed: int, budget: float) -> dict[str, float]:
    """One process of ``tree`` on one shape: per case, its speed (work per CPU second; *full*: ms per cycle)."""
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED=str(seed))
    command = ["nice", sys.executable, str(Path(__file__).resolve()), "--child-times", f"{nodes},{queues},{budget}"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd="/")
    if done.returncode != 0:
        sys.exit(f"compare_trees: {tree} {nodes}x{queues} seed {seed}: exited {done.returncode}: "
                 f"{done.stderr.strip()[-500:]}")
    totals = json.loads(done.stdout.strip().splitlines()[-1])
    return {case: (seconds * 1000 / cycles if case == "full" else done_work / seconds)
            for case, (done_work, seconds, cycles) in totals.items()}


def speed_ratio(case: str, tree: float, base: float) -> float:
    """TREE's speed over BASE's: per second over per second, or BASE's milliseconds over TREE's (case ``full``)."""
    return base / tree if case == "full" else tree / base


def bootstrap_median(ratios: list[float], rounds: int = 4000) -> tuple[float, float]:
    """A 95% percentile-bootstrap interval of the median of ``ratios`` (a fixed generator: the same figures give
    the same interval)."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(rounds))
    return medians[int(0.025 * rounds)], medians[int(0.975 * rounds) - 1]


def compare_times(trees: dict[str, Path], shapes: list[tuple[int, int]], pairs: int, budget: float) -> None:
    print(f"paired CPU time: {pairs} pairs, budget {budget} CPU s per case and process; "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    ratios: dict[tuple[str, str], list[float]] = {}
    for pair in range(1, pairs + 1):
        order = ("base", "tree") if pair % 2 else ("tree", "base")
        for nodes, queues in shapes:
            shape = f"{nodes}x{queues}"
            figures = {name: timed(trees[name], nodes, queues, pair, budget) for name in order}
            for case in CASES:
                ratios.setdefault((shape, case), []).append(
                    speed_ratio(case, figures["tree"][case], figures["base"][case]))
            print(f"pair {pair} {shape}: " + " ".join(f"{ratios[shape, case][-1]:.3f}" for case in CASES),
                  flush=True)
    print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print()
    print("TREE / BASE speed (above 1: TREE faster): median of the paired ratios [95% bootstrap interval]")
    print(f"{'shape':<8}" + "".join(f"{case:>24}" for case in CASES))
    for nodes, queues in shapes:
        shape = f"{nodes}x{queues}"
        cells = []
        for case in CASES:
            values = ratios[shape, case]
            low, high = bootstrap_median(values)
            cells.append(f"{statistics.median(values):.3f} [{low:.3f}, {high:.3f}]")
        print(f"{shape:<8}" + "".join(f"{cell:>24}" for cell in cells))


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child-instructions":
        nodes, queues, case, marks = sys.argv[2].split(",")
        child_instructions(int(nodes), int(queues), case, marks)
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--child-times":
        nodes, queues, budget = sys.argv[2].split(",")
        child_times(int(nodes), int(queues), float(budget))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path, help="the tree compared against (holds a flotilla package)")
    parser.add_argument("--tree", type=Path, default=HERE.parent, help="the tree measured (default: this repository)")
    parser.add_argument("--instructions", nargs="?", const="all", metavar="SHAPES",
                        help="count instructions per cycle (callgrind) of these shapes (default all); see above")
    parser.add_argument("--seed", type=int, default=1, help="the hash seed of --instructions (default 1)")
    parser.add_argument("--shapes", default="all", help="paired CPU time: these shapes, as 1x1,100x10 (default all)")
    parser.add_argument("--pairs", type=int, default=15, help="paired CPU time: pairs of runs (default 15)")
    parser.add_argument("--budget", type=float, default=1.5,
                        help="paired CPU time: CPU seconds of round-one and new-queue cycles per process (default 1.5)")
    args = parser.parse_args()
    trees = {"base": args.base, "tree": args.tree}
    for tree in trees.values():
        check_tree(tree)
    if args.instructions:
        compare_instructions(trees, parse_shapes(args.instructions), args.seed)
    else:
        compare_times(trees, parse_shapes(args.shapes), args.pairs, args.budget)


if __name__ == "__main__":
    main()
