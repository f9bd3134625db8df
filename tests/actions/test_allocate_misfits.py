"""Known misfits: a queued job whose requirements already failed in its queue is passed over at once.

The reasons read exactly as if each job had been tried, the lookahead still
counts them, and only the first job of each shape is examined.
"""

from __future__ import annotations

import random

import pytest

from flotilla.config import load_config
from flotilla.scheduler import Scheduler
from flotilla.core.model import ClusterSnapshot, Job, JobState, Node, Queue, Snapshot
from tests.support.scenario import config, run_once
from tests.support.actions import ACTION_STATE

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
    short = "0/1 nodes are available: 1 Insufficient cpu"
    # a-1 .. a-50 were passed over (50 = the lookahead); the rest of A was never reached.
    assert {job_id: reasons[job_id] for job_id in (f"a-{i}" for i in range(1, 100))} == {
        f"a-{i}": short if i <= 50 else "lookahead 50 reached in queue A" for i in range(1, 100)}
    assert {reasons[f"b-{i}"] for i in range(30)} == {short}


def test_jobs_an_earlier_action_placed_are_not_placed_again(tmp_path, installed_action):
    """A third-party action places B's jobs first; allocate offers only what is still queued."""
    out = run_once(tmp_path, config(extra="actions: [firstnode, allocate]"), ACTION_STATE)
    assert [(p["job"], p["node"]) for p in out["scheduled"]] == [("b-1", "node-1"), ("b-2", "node-1"),
                                                                ("a-1", "node-2")]


# -- passing over runs of known misfits in bulk changes no decision, reason or count ------------------------

def _one_by_one(monkeypatch):
    """Allocate passing over known misfits one job at a time, as it did before runs were passed in bulk."""
    from flotilla.core.units import QueueUnits

    monkeypatch.setattr(QueueUnits, "skip_known", lambda self, misfits, limit, job_valid: [])


def _mixed_snapshot(scheduler, rng, nodes, queues, jobs, first=0):
    shapes = [{"cpu": 1000, "memory": 4 * GIB}, {"cpu": 2000, "memory": 8 * GIB}, {"cpu": 8000, "memory": 32 * GIB},
              {"cpu": 500, "memory": GIB}]
    gpu = {"cpu": 4000, "memory": 32 * GIB, "nvidia.com/gpu": 1}
    from flotilla.core.model import Gang, Taint, Toleration
    taint = (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
    toleration = (Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),)
    selector = {"kind": "gpu"}
    cluster_nodes = [Node(f"gpu-{i}", "c1", {"cpu": 16000, "memory": 128 * GIB, "nvidia.com/gpu": 2}, {"kind": "gpu"},
                          taint) if i % 5 == 0 else
                     Node(f"cpu-{i}", "c1", {"cpu": rng.choice([4000, 8000, 16000]), "memory": 64 * GIB}, {"kind": "cpu"})
                     for i in range(nodes)]
    names = [f"q{q}" for q in range(queues)]
    queued = []
    gang_members = 0
    for j in range(first, first + jobs):
        queue = names[j % queues]
        if j % 97 == 0:  # a gang of 3, its members next to each other
            gang = Gang(f"g{j}", 3)
            gang_members = 3
        if gang_members:
            gang_members -= 1
            queued.append(Job(f"j{j}", queue, "s", rng.randrange(3), "armada-preemptible", float(j), shapes[1],
                              gang=gang))
        elif j % 41 == 0:
            queued.append(Job(f"j{j}", queue, "s", rng.randrange(3), "armada-default", float(j), gpu, selector,
                              toleration))
        elif j % 53 == 0:
            queued.append(Job(f"j{j}", queue, "s", 0, "no-such-class", float(j), shapes[0]))
        else:
            queued.append(Job(f"j{j}", queue, "s", rng.randrange(3), "armada-preemptible", float(j),
                              shapes[rng.randrange(len(shapes))]))
    queue_objs = [Queue(name, weight=1.0 + k % 3, limits={"cpu": 0.15} if k == 1 else {}) for k, name in enumerate(names)]
    return Snapshot([ClusterSnapshot("c1", cluster_nodes)], queued, queue_objs, scheduler.priority_classes(),
                    "armada-default")


def _uniform_snapshot(scheduler, nodes, queues, per_queue):
    requests = {"cpu": 1000, "memory": 4 * GIB}
    node_objs = [Node(f"n{i}", "c1", {"cpu": 32000, "memory": 256 * GIB}) for i in range(nodes)]
    queued = [Job(f"q{q}-{j}", f"q{q}", "s", 0, "armada-preemptible", float(j * queues + q), requests)
              for j in range(per_queue) for q in range(queues)]
    return Snapshot([ClusterSnapshot("c1", node_objs)], queued, [Queue(f"q{q}") for q in range(queues)],
                    scheduler.priority_classes(), "armada-default")


def _cycles(snapshots_of, lookahead):
    """Three cycles (placements running, new jobs arriving), each one's decisions as plain values."""
    from dataclasses import replace

    scheduler = Scheduler(load_config(None))
    scheduler.settings.lookahead = lookahead
    scheduler.settings.evict_probability = 0.0
    actions = [a for a in scheduler.actions if a.name != "lease"]
    snapshot = snapshots_of(scheduler, 0)
    out = []
    for cycle in range(3):
        decisions = scheduler.run_cycle(snapshot, random.Random(cycle), actions=actions)
        out.append(([(p.job.id, p.node) for p in decisions.scheduled], [j.id for j in decisions.preempted],
                    decisions.reasons, decisions.counters.get("considered", 0), decisions.counters.get("skipped", 0)))
        placed = {p.job.id for p in decisions.scheduled}
        cluster = snapshot.clusters[0]
        running = list(cluster.running) + [replace(p.job, state=JobState.RUNNING, cluster="c1", node=p.node)
                                           for p in decisions.scheduled]
        arriving = snapshots_of(scheduler, cycle + 1).queued
        snapshot = replace(snapshot, clusters=[ClusterSnapshot("c1", cluster.nodes, running)],
                           queued=[job for job in snapshot.queued if job.id not in placed] + arriving)
    return out


SHAPES = {
    "1 node x 10 queues": (lambda s, k: _uniform_snapshot(s, 1, 10, 320) if k == 0 else
                           replace_ids(_uniform_snapshot(s, 1, 10, 40), k)),
    "mixed": lambda s, k: _mixed_snapshot(s, random.Random(k), 30 if k == 0 else 0, 6, 3000 if k == 0 else 400,
                                          first=10_000 * k),
}


def replace_ids(snapshot, k):
    from dataclasses import replace
    return replace(snapshot, queued=[replace(job, id=f"{job.id}-{k}", submitted=job.submitted - k) for job in
                                     snapshot.queued])


@pytest.mark.parametrize("lookahead", [1000, 50, 7])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_bulk_skip_gives_the_decisions_and_reasons_of_one_by_one(monkeypatch, shape, lookahead):
    snapshots_of = SHAPES[shape]
    fast = _cycles(snapshots_of, lookahead)
    with monkeypatch.context() as patch:
        _one_by_one(patch)
        reference = _cycles(snapshots_of, lookahead)
    for cycle, (mine, theirs) in enumerate(zip(fast, reference)):
        scheduled, preempted, reasons, considered, skipped = mine
        assert (scheduled, preempted) == theirs[:2], cycle
        assert reasons == theirs[2], cycle
        assert (considered, skipped) == theirs[3:], cycle
    assert sum(cycle[4] for cycle in fast) > 0
    if lookahead == 7:
        assert any("lookahead 7 reached" in reason for cycle in fast for reason in cycle[2].values())
