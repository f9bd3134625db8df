"""The node index against brute force, and statements that leave no trace."""

from __future__ import annotations

import random

from flotilla.core.model import Node
from flotilla.core.nodeindex import EVICTED, NONPREEMPTIBLE, NodeIndex
from flotilla.core.resources import ResourceSpace


def make_index(rng: random.Random, n: int = 60):
    space = ResourceSpace({"cpu", "memory", "nvidia.com/gpu"})
    nodes = [Node(f"n{i}", "c", {"cpu": rng.choice([8000, 16000, 32000]), "memory": rng.choice([32, 64]) * 2**30,
                                 "nvidia.com/gpu": rng.choice([0, 0, 4])}) for i in range(n)]
    index = NodeIndex(space, nodes, [20000, 30000], set())
    return space, index


def brute_force(index, vec, level):
    k = index.level_of[level]
    fitting = [(tuple(index.free[i][k]), i) for i in range(len(index.nodes))
               if all(a <= f for a, f in zip(vec, index.free[i][k]))]
    return min(fitting)[1] if fitting else None


def test_find_equals_brute_force_smallest_fit_under_random_binds():
    rng = random.Random(42)
    space, index = make_index(rng)
    index.build()
    queues = ["A", "B", "C"]
    bound = []
    for step in range(400):
        vec = space.vector({"cpu": rng.choice([500, 1000, 4000, 8000]), "memory": rng.choice([1, 4, 16]) * 2**30,
                            "nvidia.com/gpu": rng.choice([0, 0, 0, 1])})
        level = rng.choice([EVICTED, 20000, 30000])
        expected = brute_force(index, vec, level)
        assert index.find(vec, level, range(len(index.types)), "any", "A") == expected
        if expected is not None and level == EVICTED:
            job_level = rng.choice([20000, NONPREEMPTIBLE])
            index.bind(expected, f"j{step}", rng.choice(queues), vec, job_level)
            bound.append((expected, f"j{step}"))
        elif bound and rng.random() < 0.3:
            node, job = bound.pop(rng.randrange(len(bound)))
            index.unbind(node, job)


def test_tiers_partition_nodes_by_owner():
    rng = random.Random(1)
    space, index = make_index(rng, 10)
    index.build()
    vec = space.vector({"cpu": 1000})
    index.bind(3, "a1", "A", vec, 20000)
    index.bind(5, "b1", "B", vec, 20000)
    index.bind(5, "a2", "A", vec, 20000)
    types = range(len(index.types))
    assert index.find(vec, EVICTED, types, "own", "A") == 3
    assert index.find(vec, EVICTED, types, "own", "B") is None
    unused = index.find(vec, EVICTED, types, "unused", "A")
    assert unused not in (3, 5)
    index.unbind(5, "b1")
    assert index.find(vec, EVICTED, types, "own", "A") in (3, 5)
    # Evicted jobs do not make a node used.
    index.unbind(3, "a1")
    index.bind(3, "a1", "A", vec, EVICTED)
    assert index.bucket(3) is None


def test_discarded_statement_leaves_no_trace(tmp_path):
    from flotilla.config import load_config, load_state
    from flotilla.scheduler import Scheduler
    from flotilla.core.session import Session

    state = tmp_path / "s.yaml"
    state.write_text(
        "jobs:\n"
        "  - {id: r-1, queue: A, priorityClass: armada-preemptible, requests: {cpu: 4}, state: running, node: node-1}\n"
        "  - {id: q-1, queue: B, requests: {cpu: 8}}\n"
        "  - {id: q-2, queue: B, requests: {cpu: 8}}\n")
    cfg = load_config(None)
    session = Session(load_state(state, cfg), Scheduler(cfg).settings)
    before = ([[list(level) for level in node] for node in session.index.free],
              {q.name: list(q.allocated) for q in session.queues.values()},
              [session.index.bucket(i) for i in range(len(session.index.nodes))])
    stmt = session.statement()
    stmt.allocate(session.snapshot.queued[0], 0)
    stmt.allocate(session.snapshot.queued[1], 1)
    stmt.evict(session.running["r-1"].job)
    stmt.preempt(session.running["r-1"].job)
    stmt.discard()
    after = ([[list(level) for level in node] for node in session.index.free],
             {q.name: list(q.allocated) for q in session.queues.values()},
             [session.index.bucket(i) for i in range(len(session.index.nodes))])
    assert after == before
    assert session.scheduled == [] and session.evicted == {} and session.preempted == {}


def brute_force_tier(index, vec, level, types, tier, queue):
    """The smallest (free, position) that fits among ``types``' nodes in ``tier``, by a scan."""
    k = index.level_of[level]
    fitting = []
    for i in range(len(index.nodes)):
        bucket = index.bucket(i)
        in_tier = {"own": bucket == queue, "unused": bucket is None, "used": bucket is not None, "any": True}[tier]
        if in_tier and index.type_of[i] in types and all(a <= f for a, f in zip(vec, index.free[i][k])):
            fitting.append((tuple(index.free[i][k]), i))
    return min(fitting)[1] if fitting else None


def brute_force_fitting(index, vec, level, types):
    """iter_fitting's order: per type, unused nodes then used ones, each by (free, position)."""
    k = index.level_of[level]
    order = []
    for t in types:
        for used in (False, True):
            order += [i for _, i in sorted(
                (tuple(index.free[i][k]), i) for i in index.types[t].nodes
                if (index.bucket(i) is not None) == used and all(a <= f for a, f in zip(vec, index.free[i][k])))]
    return order


def test_every_tier_and_iteration_equal_brute_force_and_a_fresh_build():
    """Uniform nodes (many equal free vectors, so buckets hold many nodes) and mixed ones, two types."""
    for seed, uniform in ((7, True), (8, False)):
        rng = random.Random(seed)
        space = ResourceSpace({"cpu", "memory"})
        nodes = [Node(f"n{i}", "c", {"cpu": 8000 if uniform else rng.choice([4000, 8000]),
                                     "memory": 32 * 2**30 if uniform else rng.choice([16, 32]) * 2**30},
                      {"pool": rng.choice(["a", "b"])}) for i in range(40)]
        index = NodeIndex(space, nodes, [20000, 30000], {"pool"})
        index.build()
        jobs = []
        for step in range(1500):
            vec = space.vector({"cpu": rng.choice([1000, 2000]), "memory": rng.choice([2, 4]) * 2**30})
            level = rng.choice([EVICTED, 20000, 30000])
            queue = rng.choice("ABC")
            types = rng.choice([[0], [1], [0, 1], [1, 0]])
            for tier in ("own", "unused", "used", "any"):
                assert index.find(vec, level, types, tier, queue) == brute_force_tier(index, vec, level, types,
                                                                                        tier, queue)
            assert list(index.iter_fitting(vec, level, types)) == brute_force_fitting(index, vec, level, types)
            node = index.find(vec, EVICTED, [0, 1], rng.choice(["own", "any"]), queue)
            if node is not None and rng.random() < 0.6:
                index.bind(node, f"j{step}", queue, vec, rng.choice([EVICTED, 20000, NONPREEMPTIBLE]))
                jobs.append((node, f"j{step}"))
            elif jobs:
                node, job = jobs.pop(rng.randrange(len(jobs)))
                index.unbind(node, job)
            if step % 100 == 99:
                fresh = NodeIndex(space, nodes, [20000, 30000], {"pool"})
                for i, held in enumerate(index.jobs):
                    for job_id, (q, v, lv) in held.items():
                        fresh.preload(i, job_id, q, v, lv)
                fresh.build()
                assert fresh.fingerprint() == index.fingerprint()
                assert fresh.free == index.free


def test_relevel_equals_unbinding_and_binding_again():
    """Evicting and returning a job moves its level in one step: the index ends as unbind-then-bind leaves it,
    whether or not the move changes who uses the node (and so its tier)."""
    rng = random.Random(11)
    space = ResourceSpace({"cpu", "memory"})
    nodes = [Node(f"n{i}", "c", {"cpu": 8000, "memory": 32 * 2**30}, {"pool": "ab"[i % 2]}) for i in range(12)]
    twins = [NodeIndex(space, nodes, [20000, 30000], {"pool"}) for _ in range(2)]
    for index in twins:
        index.build()
    relevelled, rebound = twins
    jobs: dict[str, tuple[int, str]] = {}
    levels = [EVICTED, 20000, 30000, NONPREEMPTIBLE]
    moves = 0
    for step in range(3000):
        vec = space.vector({"cpu": rng.choice([1000, 2000]), "memory": rng.choice([2, 4]) * 2**30})
        queue = rng.choice("ABC")
        roll = rng.random()
        if roll < 0.4 or not jobs:
            node = relevelled.find(vec, EVICTED, [0, 1], "any", queue)
            if node is not None:
                level = rng.choice(levels)
                for index in twins:
                    index.bind(node, f"j{step}", queue, vec, level)
                jobs[f"j{step}"] = (node, queue)
        elif roll < 0.55:
            job_id = rng.choice(sorted(jobs))
            node, _ = jobs.pop(job_id)
            for index in twins:
                index.unbind(node, job_id)
        else:
            job_id = rng.choice(sorted(jobs))
            node, queue = jobs[job_id]
            level = rng.choice(levels)
            was = relevelled.jobs[node][job_id][2]
            assert relevelled.relevel(node, job_id, level) == was
            _, held_vec, _ = rebound.unbind(node, job_id)
            rebound.bind(node, job_id, queue, held_vec, level)
            moves += 1
        assert relevelled.free == rebound.free
        assert relevelled.users == rebound.users
        assert [relevelled.bucket(i) for i in range(len(nodes))] == [rebound.bucket(i) for i in range(len(nodes))]
        assert relevelled.fingerprint() == rebound.fingerprint()
        probe = space.vector({"cpu": 2000, "memory": 4 * 2**30})
        for tier in ("own", "unused", "used", "any"):
            for level in levels[:3]:
                assert relevelled.find(probe, level, [0, 1], tier, queue) == \
                    rebound.find(probe, level, [0, 1], tier, queue)
    assert moves > 1000
