"""Write the large example workload: 1,000 nodes, 100 queues of unequal weights, 200,000 jobs, one week.

    python examples/workloads/make_large.py            # writes examples/workloads/large.yaml
    flotilla simulate --config examples/simulate-large.yaml --workload examples/workloads/large.yaml

The config (``examples/simulate-large.yaml``) holds the 1,000 nodes and the
100 queues; this script writes the submissions, compactly, with ``every`` and
``times`` (each line is a job pattern repeated over the week). Deterministic:
the same file every time (``--seed`` changes it).

Each queue has a steady trickle of small jobs around the clock, a daily burst
at its own hour (the bursts overlap in the working day, so queues compete and
fair shares matter), and for one queue in four a few gangs a day. Jobs are
1 to 16 cores and ten minutes to six hours; about one in three is
preemptible. The demand is about two thirds of the pool's week, peaking
above it in the working day.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

TOTAL_JOBS = 200_000
QUEUES = 100
WEEK = 7 * 86400
HERE = Path(__file__).resolve().parent


def weight_of(q: int) -> int:
    """Unequal weights: mostly 1 and 2, some 4, a few 8."""
    return (1, 1, 2, 1, 2, 4, 1, 2, 1, 8)[q % 10]


def patterns(rng: random.Random, q: int) -> list[dict]:
    name = f"q{q:03d}"
    out = []
    # Steady trickle: a few small jobs every 20 to 60 minutes, all week.
    every = rng.choice([20, 30, 45, 60]) * 60
    out.append({"at": rng.randrange(0, every, 60), "queue": name, "count": rng.choice([2, 3, 4]),
                "jobSet": "steady", "priorityClass": "armada-preemptible",
                "requests": {"cpu": rng.choice([1, 2, 4])}, "duration": rng.choice([10, 20, 30, 45]) * 60,
                "every": every, "times": WEEK // every})
    # A daily burst at the queue's own hour (mostly 7:00 to 17:00).
    hour = rng.choice(list(range(7, 18)) * 3 + list(range(0, 24)))
    out.append({"at": hour * 3600 + rng.randrange(0, 3600, 60), "queue": name,
                "count": rng.choice([40, 60, 80, 100, 120]), "jobSet": "daily",
                "priorityClass": rng.choice(["armada-default", "armada-default", "armada-preemptible"]),
                "requests": {"cpu": rng.choice([2, 4, 8, 16]), "memory": f"{rng.choice([8, 16, 32])}Gi"},
                "duration": rng.choice([60, 90, 120, 180, 240, 360]) * 60, "every": 86400, "times": 7})
    # One queue in four runs gangs (2 to 16 members) a few times a day.
    if q % 4 == 0:
        cardinality = rng.choice([2, 4, 8, 16])
        out.append({"at": rng.randrange(0, 6 * 3600, 60), "queue": name, "count": cardinality * rng.choice([1, 2]),
                    "jobSet": "gang", "priorityClass": "armada-default",
                    "requests": {"cpu": rng.choice([4, 8])}, "duration": rng.choice([60, 120]) * 60,
                    "gang": {"cardinality": cardinality}, "every": 6 * 3600, "times": WEEK // (6 * 3600)})
    return out


def jobs_in(entry: dict) -> int:
    return entry["count"] * entry.get("times", 1)


def fmt(entry: dict) -> str:
    def value(v):
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k}: {value(x)}" for k, x in v.items()) + "}"
        return str(v)

    def seconds(s: int) -> str:
        for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
            if s and s % size == 0:
                return f"{s // size}{unit}"
        return f"{s}s"

    parts = []
    for key, v in entry.items():
        if key in ("at", "duration", "every"):
            v = seconds(v)
        parts.append(f"{key}: {value(v)}")
    return "  - {" + ", ".join(parts) + "}"


def build(seed: int) -> list[dict]:
    rng = random.Random(seed)
    entries = [e for q in range(QUEUES) for e in patterns(rng, q)]
    total = sum(jobs_in(e) for e in entries)
    # Scale the steady trickles so that the week holds exactly TOTAL_JOBS jobs: scale down, then add
    # one job per repeat to trickles while that fits, and send the last few as one batch on Monday morning.
    steady = [e for e in entries if e["jobSet"] == "steady"]
    others = total - sum(jobs_in(e) for e in steady)
    scale = (TOTAL_JOBS - others) / sum(jobs_in(e) for e in steady)
    for e in steady:
        e["count"] = max(1, int(e["count"] * scale))
    remainder = TOTAL_JOBS - sum(jobs_in(e) for e in entries)
    while any(e["times"] <= remainder for e in steady):
        for e in steady:
            if e["times"] <= remainder:
                e["count"] += 1
                remainder -= e["times"]
    if remainder > 0:
        entries.append({"at": 9 * 3600, "queue": "q000", "count": remainder, "jobSet": "catch-up",
                        "priorityClass": "armada-preemptible", "requests": {"cpu": 1}, "duration": 1800})
    assert sum(jobs_in(e) for e in entries) == TOTAL_JOBS, sum(jobs_in(e) for e in entries)
    return entries


CONFIG_HEAD = """\
# The large simulate example: 1,000 nodes of 16 cores, 100 queues of unequal weights.
# Generated with its workload by examples/workloads/make_large.py; see bench/simulate.py.
#   flotilla simulate --config examples/simulate-large.yaml --workload examples/workloads/large.yaml
actions: [evict, allocate, preempt, lease]
plugins:
  - name: assetfairness
    args: {resourceWeights: {cpu: 1, nvidia.com/gpu: 1, memory: 0}}
  - name: bestfit
  - name: gang
  - name: priorityclass
  - name: predicates
priorityClasses:
  - {name: armada-default, priority: 30000, preemptible: false}
  - {name: armada-preemptible, priority: 20000, preemptible: true}
defaultPriorityClass: armada-default
# A week at a two-minute cycle, each node's preemptible jobs reconsidered for fair share with
# probability 1/4 per cycle: the whole week runs in a few minutes (see bench/simulate.py and
# docs/simulate.md). A one-minute cycle and probability 1 reconsider more often, at several times
# the cost.
evict: {probability: EVICT}
allocate: {lookahead: 100}
cycle: {period: PERIOD}
clusters:
  - name: sim
    kind: simulated
    nodes:
      - {count: 600, namePrefix: node, resources: {cpu: 16, memory: 64Gi}}
      - {count: 400, namePrefix: node, resources: {cpu: 16, memory: 128Gi}}
queues:
"""


def write_config(path: Path, period: str, evict: float) -> None:
    lines = [CONFIG_HEAD.replace("PERIOD", period).replace("EVICT", f"{evict:g}").rstrip("\n")]
    lines += [f"  - {{name: q{q:03d}, weight: {weight_of(q)}}}" for q in range(QUEUES)]
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default=str(HERE / "large.yaml"))
    parser.add_argument("--config-out", default=str(HERE.parent / "simulate-large.yaml"))
    parser.add_argument("--period", default="2m", help="cycle.period of the config")
    parser.add_argument("--evict", type=float, default=0.25, help="evict.probability of the config")
    args = parser.parse_args()
    entries = build(args.seed)
    lines = [f"# Generated by examples/workloads/make_large.py --seed {args.seed}: {TOTAL_JOBS} jobs, "
             f"{QUEUES} queues, one week.", "# Use with examples/simulate-large.yaml (1,000 nodes).", "submissions:"]
    lines += [fmt(e) for e in entries]
    Path(args.out).write_text("\n".join(lines) + "\n")
    write_config(Path(args.config_out), args.period, args.evict)
    print(f"wrote {args.out}: {len(entries)} submission lines, {TOTAL_JOBS} jobs; {args.config_out}")


if __name__ == "__main__":
    main()
