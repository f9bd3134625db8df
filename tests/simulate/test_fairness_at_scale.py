"""Preemption to fair share at scale: the seed's two-queue rule on 100 nodes, with exact counts.

100 nodes of 32 cores run 3,200 one-core preemptible jobs of queue A (32 per
node); queue B submits 3,200 more. One cycle must end at the fair shares,
whatever ``allocate.lookahead`` is: evicted jobs that cannot go back to their
node (B took the room) are not "passed over" and must not use it up.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from flotilla.config import load_config
from flotilla.scheduler import Scheduler
from flotilla.core.model import ClusterSnapshot, Job, JobState, Node, Queue, Snapshot

GIB = 2**30
NODES = 100
PER_NODE = 32


def run_cycle(weight_a: float, weight_b: float, lookahead: int | None = None, floor: float | None = None):
    scheduler = Scheduler(load_config(None))
    if lookahead is not None:
        scheduler.settings.lookahead = lookahead
    if floor is not None:
        scheduler.settings.evict_protected_fraction = floor
    nodes = [Node(f"n{i:03d}", "c1", {"cpu": 32000, "memory": 256 * GIB}) for i in range(NODES)]
    requests = {"cpu": 1000, "memory": 4 * GIB}
    running = [Job(f"a-{i}", "A", "s", 0, "armada-preemptible", float(i), requests, state=JobState.RUNNING,
                   cluster="c1", node=f"n{i // PER_NODE:03d}") for i in range(NODES * PER_NODE)]
    queued = [Job(f"b-{i}", "B", "s", 0, "armada-preemptible", float(i), requests) for i in range(NODES * PER_NODE)]
    snapshot = Snapshot([ClusterSnapshot("c1", nodes, running)], queued, [Queue("A", weight_a), Queue("B", weight_b)],
                        scheduler.priority_classes(), "armada-default")
    actions = [action for action in scheduler.actions if action.name != "lease"]
    return scheduler.run_cycle(snapshot, random.Random(0), actions=actions)


@pytest.mark.parametrize("lookahead", [None, 100_000])
def test_equal_weights_end_at_1600_each_on_alternate_nodes(lookahead):
    # The seed's rule alone: every job of A is evicted (no floor under its fair share).
    decisions = run_cycle(1, 1, lookahead, floor=0)
    # A returns to every even node, B takes every odd node whole.
    odd = {f"n{i:03d}" for i in range(1, NODES, 2)}
    assert [job.id for job in decisions.preempted] == sorted(
        f"a-{i}" for i in range(NODES * PER_NODE) if (i // PER_NODE) % 2 == 1)
    assert [p.job.id for p in decisions.scheduled] == [f"b-{i}" for i in range(1600)]
    assert Counter(p.node for p in decisions.scheduled) == {node: PER_NODE for node in odd}
    assert [job.id for job in decisions.queued] == [f"b-{i}" for i in range(1600, 3200)]
    assert {name: (q.fair_share, q.share, q.allocated["cpu"]) for name, q in decisions.queues.items()} == {
        "A": (0.5, 0.5, "1600"), "B": (0.5, 0.5, "1600")}


@pytest.mark.parametrize("lookahead", [None, 100_000])
def test_with_the_floor_a_keeps_its_first_1600_and_b_takes_the_other_nodes_whole(lookahead):
    # protectedFractionOfFairShare 1 (the default): A (3,200 cores, fair share 1,600) is evicted only beyond
    # its fair share, a-1600 on, in job order; their room, nodes n050..n099, is B's.
    decisions = run_cycle(1, 1, lookahead)
    assert decisions.counters["evicted"] == 1600 and decisions.counters["protected"] == 1600
    assert [job.id for job in decisions.preempted] == sorted(f"a-{i}" for i in range(1600, NODES * PER_NODE))
    assert [p.job.id for p in decisions.scheduled] == [f"b-{i}" for i in range(1600)]
    assert Counter(p.node for p in decisions.scheduled) == {f"n{i:03d}": PER_NODE for i in range(50, NODES)}
    assert {name: (q.fair_share, q.share, q.allocated["cpu"]) for name, q in decisions.queues.items()} == {
        "A": (0.5, 0.5, "1600"), "B": (0.5, 0.5, "1600")}


@pytest.mark.parametrize("lookahead", [None, 100_000])
def test_weights_1_to_3_end_at_800_and_2400(lookahead):
    decisions = run_cycle(1, 3, lookahead)
    assert len(decisions.preempted) == 2400
    assert [p.job.id for p in decisions.scheduled] == [f"b-{i}" for i in range(2400)]
    assert {name: (q.fair_share, q.share, q.allocated["cpu"]) for name, q in decisions.queues.items()} == {
        "A": (0.25, 0.25, "800"), "B": (0.75, 0.75, "2400")}
    # B lands exactly where A's jobs were preempted: every node stays full, none overfull.
    freed = Counter(job.node for job in decisions.preempted)
    assert Counter(p.node for p in decisions.scheduled) == freed
