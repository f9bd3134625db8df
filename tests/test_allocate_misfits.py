"""Known misfits: a queued job whose requirements already failed in its queue is passed over at once.

The reasons read exactly as if each job had been tried, the lookahead still
counts them, and only the first job of each shape is examined.
"""

from __future__ import annotations

import random

from flotilla.config import load_config
from flotilla.core.cycle import Scheduler
from flotilla.core.model import ClusterSnapshot, Job, JobState, Node, Queue, Snapshot
from scenario import config, run_once
from test_policy_fixes import ACTION_STATE, installed_action  # noqa: F401 (a fixture)

GIB = 2**30


def test_full_node_examines_one_job_per_queue_and_shape():
    scheduler = Scheduler(load_config(None))
    scheduler.settings.lookahead = 50
    scheduler.settings.evict_probability = 0.0
    small, large = {"cpu": 1000, "memory": GIB}, {"cpu": 4000, "memory": GIB}
    node = Node("n1", "c1", {"cpu": 4000, "memory": 64 * GIB})
    running = [Job(f"r-{i}", "A", "s", 0, "armada-default", 0.0, small, state=JobState.RUNNING, cluster="c1",
                   node="n1") for i in range(3)]
    queued = [Job(f"a-{i}", "A", "s", 0, "armada-preemptible", float(i), large if i % 2 else small)
              for i in range(100)]
    queued += [Job(f"b-{i}", "B", "s", 0, "armada-preemptible", float(i), large) for i in range(30)]
    snapshot = Snapshot([ClusterSnapshot("c1", [node], running)], queued, [Queue("A"), Queue("B")],
                        scheduler.priority_classes(), "armada-default")
    decisions = scheduler.run_cycle(snapshot, random.Random(0),
                                    actions=[a for a in scheduler.actions if a.name != "lease"])
    # a-0 takes the last core; a-1 (large) and a-2 (small) fail and are examined; B's large shape is
    # examined once (it failed in A, but B has its own limits, so it is checked, not searched).
    assert [p.job.id for p in decisions.scheduled] == ["a-0"]
    skipped = (50 - 2) + (30 - 1)
    assert decisions.counters["skipped"] == skipped
    assert decisions.counters["considered"] == 4 + skipped
    reasons = decisions.reasons
    short = "0/1 nodes fit: 1 insufficient cpu"
    # a-1 .. a-50 were passed over (50 = the lookahead); the rest of A was never reached.
    assert {job_id: reasons[job_id] for job_id in (f"a-{i}" for i in range(1, 100))} == {
        f"a-{i}": short if i <= 50 else "lookahead 50 reached in queue A" for i in range(1, 100)}
    assert {reasons[f"b-{i}"] for i in range(30)} == {short}


def test_jobs_an_earlier_action_placed_are_not_placed_again(tmp_path, installed_action):  # noqa: F811
    """A third-party action places B's jobs first; allocate offers only what is still queued."""
    out = run_once(tmp_path, config(extra="actions: [firstnode, allocate]"), ACTION_STATE)
    assert [(p["job"], p["node"]) for p in out["scheduled"]] == [("b-1", "node-1"), ("b-2", "node-1"),
                                                                ("a-1", "node-2")]
