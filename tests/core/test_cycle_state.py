"""The state kept between cycles equals a fresh rebuild after every cycle, and so do the decisions.

A small world of two clusters changes at random between cycles: placements
start (or fail to), preemptions stop jobs that come back to the queue, jobs
finish, new jobs arrive (gangs, some held to one zone, GPU jobs with a selector, unshared request
mappings, jobs no node can run, which ``enqueue`` sets aside), nodes are cordoned, relabelled, added or removed, foreign usage
moves, queue weights and limits change and queues (some under a parent)
come and go. Each cycle, one scheduler keeps its state and another rebuilds
from the snapshot; the synced state must fingerprint the same as a fresh
one, and both schedulers must decide the same.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import pytest

from flotilla.config import load_config
from flotilla.scheduler import Scheduler
from flotilla.core.cyclestate import CycleState
from flotilla.core.nodeaffinity import NAME_FIELD, NodeAffinity, Requirement, Term
from flotilla.core.model import (ClusterSnapshot, ForeignPod, Gang, Job, JobState, Node, Queue, Snapshot, Taint,
                                 Toleration)
from flotilla.core.podrules import PodRules, PodTerm, Selector, SpreadConstraint

GIB = 2**30
SHAPES = [{"cpu": 1000, "memory": 2 * GIB}, {"cpu": 2000, "memory": 4 * GIB}, {"cpu": 4000, "memory": 8 * GIB},
          {"cpu": 500, "memory": GIB}]
GPU_SHAPE = {"cpu": 2000, "memory": 8 * GIB, "nvidia.com/gpu": 1}
GPU_SELECTOR = {"kind": "gpu"}
GPU_TOLERATION = (Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),)
GPU_TAINT = (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
DEDICATED = Taint("dedicated", "batch", "NoSchedule")
APP_A = Selector((Requirement("app", "In", ("a",)),))
#: Pod rules: one app-a pod per node; app-a spread over zones; app-a preferring nodes without app-a.
ANTI = PodRules(anti_affinity=(PodTerm(APP_A, frozenset(("default",)), "kubernetes.io/hostname"),))
SPREAD = PodRules(spread=(SpreadConstraint(1, "zone", True, APP_A),))
PREFERRED = PodRules(preferred_anti_affinity=((50, PodTerm(APP_A, frozenset(("default",)), "kubernetes.io/hostname")),))


class World:
    """Clusters that do what they are told, mostly, and a queue of jobs that keeps changing."""

    def __init__(self, rng: random.Random, priority_classes, in_order: bool = False):
        self.rng = rng
        #: Jobs submitted in the order they are listed (queues then keep them without entry tuples).
        self.in_order = in_order
        self.priority_classes = priority_classes
        self.nodes: dict[str, list[Node]] = {"c1": [], "c2": []}
        self.running: dict[str, list[Job]] = {"c1": [], "c2": []}
        self.foreign: dict[str, dict[str, dict[str, int]]] = {"c1": {}, "c2": {}}
        self.foreign_pods: dict[str, dict[str, tuple]] = {"c1": {}, "c2": {}}
        self.foreign_ports: dict[str, dict[str, tuple]] = {"c1": {}, "c2": {}}
        self.queued: dict[str, Job] = {}
        # A at the top, B and C under P (a queue tree: P holds no jobs itself).
        self.queues = [Queue("A", 1.0), Queue("P", 1.0), Queue("B", 2.0, parent="P"), Queue("C", 1.0, parent="P")]
        self.serial = 0
        #: Cycles after which some node changed.
        self.node_changes = 0
        for cluster in self.nodes:
            for _ in range(6):
                self.add_node(cluster)
        for _ in range(60):
            self.submit()

    def add_node(self, cluster: str) -> None:
        self.serial += 1
        # The first node declares pod slots, so the space counts them from the start; later ones may not
        # (unlimited) or may have few (slots run out before cores).
        slots = {"pods": self.rng.choice([3, 6])} if self.serial == 1 or self.rng.random() < 0.5 else {}
        if self.rng.random() < 0.25:
            node = Node(f"gpu-{self.serial}", cluster, {"cpu": 16000, "memory": 64 * GIB, "nvidia.com/gpu": 4,
                                                        **slots},
                        {"kind": "gpu", "kubernetes.io/hostname": f"gpu-{self.serial}"}, GPU_TAINT)
        else:
            node = Node(f"cpu-{self.serial}", cluster, {"cpu": self.rng.choice([8000, 16000]),
                                                         "memory": self.rng.choice([32, 64]) * GIB, **slots},
                        {"kind": "cpu", "kubernetes.io/hostname": f"cpu-{self.serial}"})
        self.nodes[cluster].append(node)

    def submit(self) -> None:
        rng = self.rng
        parents = {queue.parent for queue in self.queues}
        queue = rng.choice([queue for queue in self.queues if queue.name not in parents]).name
        self.serial += 1
        pc = rng.choice(["armada-preemptible", "armada-preemptible", "armada-default"])
        # Ties on purpose: the order first seen breaks them.
        submitted = float(self.serial // 3) if self.in_order else float(rng.randrange(50))
        roll = rng.random()
        if roll < 0.1:
            size = rng.choice([2, 3])
            # Every third gang in one zone (a topology gang): its label key comes and goes with it.
            gang = Gang(f"g{self.serial}", size, uniformity_label="zone" if self.serial % 3 == 0 else "")
            for k in range(size):
                self.add_queued(Job(f"j{self.serial}-{k}", queue, "s", rng.randrange(2), pc, submitted,
                                    rng.choice(SHAPES), gang=gang))
        elif roll < 0.2:
            self.add_queued(Job(f"j{self.serial}", queue, "s", rng.randrange(2), pc, submitted, GPU_SHAPE,
                                GPU_SELECTOR, GPU_TOLERATION))
        elif roll < 0.23:  # fits no node: enqueue sets it aside
            self.add_queued(Job(f"j{self.serial}", queue, "s", 0, pc, submitted, {"cpu": 64000}))
        elif roll < 0.26:  # binds a host port: never two conflicting ones on one node
            self.add_queued(Job(f"j{self.serial}", queue, "s", rng.randrange(2), pc, submitted, rng.choice(SHAPES),
                                host_ports=(("TCP", rng.choice([8080, 9090]),
                                             rng.choice(["0.0.0.0", "10.0.0.1", "10.0.0.2"])),)))
        elif roll < 0.28:  # node affinity: on a zone's label, or on a node's name (nodes then typed by name)
            term = rng.choice([Term((Requirement("zone", "In", ("a",)),)),
                               Term((Requirement("zone", "NotIn", ("a",)),)),
                               Term(fields=(Requirement(NAME_FIELD, "NotIn", ("cpu-2",)),))])
            affinity = NodeAffinity((term,), ((5, Term((Requirement("zone", "In", ("b",)),))),))
            self.add_queued(Job(f"j{self.serial}", queue, "s", rng.randrange(2), pc, submitted, rng.choice(SHAPES),
                                affinity=affinity))
        elif roll < 0.3:  # a mapping of its own, equal to a shared one
            self.add_queued(Job(f"j{self.serial}", queue, "s", rng.randrange(2), pc, submitted,
                                dict(rng.choice(SHAPES))))
        elif roll < 0.34:  # pod rules, or only labels that running pods' anti-affinity may select
            rules = rng.choice([ANTI, ANTI, SPREAD, PREFERRED, None])
            self.add_queued(Job(f"j{self.serial}", queue, "s", rng.randrange(2), pc, submitted, rng.choice(SHAPES),
                                labels={"app": rng.choice(["a", "b"]) if rules is None else "a"},
                                namespace="default", pod_rules=rules))
        else:
            self.add_queued(Job(f"j{self.serial}", queue, "s", rng.randrange(2), pc, submitted, rng.choice(SHAPES)))

    def add_queued(self, job: Job) -> None:
        self.queued[job.id] = job

    def snapshot(self, now: float) -> Snapshot:
        return Snapshot([ClusterSnapshot(name, list(self.nodes[name]), list(self.running[name]),
                                         dict(self.foreign[name]), dict(self.foreign_pods[name]),
                                         foreign_ports=dict(self.foreign_ports[name]))
                         for name in self.nodes],
                        list(self.queued.values()), list(self.queues), self.priority_classes, "armada-default", now)

    def apply(self, decisions) -> None:
        rng = self.rng
        for job in decisions.preempted:
            self.stop(job.cluster, job.id, requeue=True)
        failed_gangs = {p.job.gang.id for p in decisions.scheduled if p.job.gang is not None and rng.random() < 0.1}
        for placement in decisions.scheduled:
            job = placement.job
            if (job.gang is None and rng.random() < 0.1) or (job.gang is not None and job.gang.id in failed_gangs):
                continue  # the start did not happen: still queued next cycle
            del self.queued[job.id]
            self.running[placement.cluster].append(
                replace(job, state=JobState.RUNNING, cluster=placement.cluster, node=placement.node))

    def remove_node(self, cluster: str, k: int) -> None:
        gone = self.nodes[cluster].pop(k)
        for job in [job for job in self.running[cluster] if job.node == gone.name]:
            self.stop(cluster, job.id, requeue=True)
        self.foreign[cluster].pop(gone.name, None)
        self.foreign_pods[cluster].pop(gone.name, None)
        self.foreign_ports[cluster].pop(gone.name, None)

    def stop(self, cluster: str, job_id: str, requeue: bool) -> None:
        for k, job in enumerate(self.running[cluster]):
            if job.id == job_id:
                del self.running[cluster][k]
                if requeue:
                    self.add_queued(replace(job, state=JobState.QUEUED, cluster=None, node=None))
                return

    def churn(self) -> None:
        """Random changes between cycles."""
        rng = self.rng
        for _ in range(rng.randrange(8)):
            self.submit()
        for cluster, jobs in self.running.items():
            for job in [job for job in jobs if rng.random() < 0.1]:
                self.stop(cluster, job.id, requeue=False)  # finished
        if self.queued and rng.random() < 0.3:  # cancelled while queued
            del self.queued[rng.choice(list(self.queued))]
        cluster = rng.choice(list(self.nodes))
        nodes = self.nodes[cluster]
        before = {name: {id(node) for node in nodes} for name, nodes in self.nodes.items()}
        roll = rng.random()
        if roll < 0.05:
            self.add_node(cluster)
        elif roll < 0.08 and len(nodes) > 3:
            self.remove_node(cluster, rng.randrange(len(nodes)))
        elif roll < 0.12:
            k = rng.randrange(len(nodes))
            nodes[k] = replace(nodes[k], unschedulable=not nodes[k].unschedulable)  # cordon / uncordon
        elif roll < 0.15:
            k = rng.randrange(len(nodes))
            nodes[k] = replace(nodes[k], labels={**nodes[k].labels, "zone": rng.choice(["a", "b"])})
        elif roll < 0.3:
            k = rng.randrange(len(nodes))
            nodes[k] = replace(nodes[k])  # the same node as a new object
        # More node changes, none of which may rebuild the kept state: a taint no job tolerates put on or
        # taken off, an indexed label (GPU jobs select on "kind") changed, a resize (smaller than what runs
        # there too: the node is then overcommitted, as in a fresh rebuild), a node added to either cluster
        # (to c1, that is before every node of c2: positions after it move) or removed with its jobs.
        roll = rng.random()
        k = rng.randrange(len(nodes))
        if roll < 0.08:
            taints = nodes[k].taints
            nodes[k] = replace(nodes[k], taints=taints[:-1] if DEDICATED in taints else (*taints, DEDICATED))
        elif roll < 0.16:
            kind = {"cpu": "gpu", "gpu": "cpu"}[nodes[k].labels["kind"]]
            nodes[k] = replace(nodes[k], labels={**nodes[k].labels, "kind": kind})
        elif roll < 0.24:
            nodes[k] = replace(nodes[k], resources={**nodes[k].resources, "cpu": rng.choice([4000, 8000, 16000]),
                                                    "memory": rng.choice([16, 32, 64]) * GIB})
        elif roll < 0.3:
            self.add_node(rng.choice(list(self.nodes)))
        elif roll < 0.34 and len(nodes) > 3:
            self.remove_node(cluster, k)
        self.node_changes += any({id(node) for node in nodes} != before[name] for name, nodes in self.nodes.items())
        if rng.random() < 0.2:
            node = rng.choice(self.nodes[cluster]).name
            if rng.random() < 0.5:
                self.foreign[cluster][node] = {"cpu": rng.choice([500, 1000]), "pods": rng.choice([1, 2])}
                self.foreign_ports[cluster][node] = rng.choice([(), (("TCP", 8080, "0.0.0.0"),),
                                                                (("TCP", 9090, "10.0.0.1"),)])
            else:
                self.foreign[cluster].pop(node, None)
                self.foreign_ports[cluster].pop(node, None)
        if rng.random() < 0.15:  # someone else's pods: an app-a pod, or one whose anti-affinity keeps app-a out
            node = rng.choice(self.nodes[cluster]).name
            if rng.random() < 0.6:
                self.serial += 1
                pod = rng.choice([ForeignPod(f"other/p{self.serial}", "default", {"app": "a"}),
                                  ForeignPod(f"other/p{self.serial}", "default", {"app": "x"}, ANTI)])
                self.foreign_pods[cluster][node] = (*self.foreign_pods[cluster].get(node, ()), pod)
            else:
                self.foreign_pods[cluster].pop(node, None)
        roll = rng.random()
        if roll < 0.1:
            k = rng.randrange(len(self.queues))
            self.queues[k] = Queue(self.queues[k].name, rng.choice([1.0, 2.0, 3.0]),
                                   rng.choice([{}, {"cpu": 0.5}]), self.queues[k].parent)
        elif roll < 0.13:
            self.queues.append(Queue(f"Q{self.serial}", 1.0, parent=rng.choice([None, "P"])))
            self.serial += 1
        elif roll < 0.16:
            busy = {job.queue for job in self.queued.values()} | {job.queue for jobs in self.running.values()
                                                                  for job in jobs}
            busy |= {queue.parent for queue in self.queues}
            idle = [queue for queue in self.queues if queue.name not in busy]
            if idle:
                self.queues.remove(rng.choice(idle))


@pytest.mark.parametrize("in_order", [False, True])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_incremental_state_and_decisions_equal_a_fresh_rebuild(seed, in_order):
    config = load_config(None)
    names = ["enqueue", "evict", "allocate", "preempt"]
    kept = Scheduler(config, names)
    fresh = Scheduler(config, names, keep_state=False)
    for scheduler in (kept, fresh):
        scheduler.settings.evict_probability = 0.5
        scheduler.settings.lookahead = 20
    world = World(random.Random(seed), kept.priority_classes(), in_order)
    syncs = rebuilds = ports_seen = rules_seen = 0
    for cycle in range(40):
        snapshot = world.snapshot(float(cycle))
        if kept.state is not None:
            kept.state.sync(snapshot, kept.settings.indexed_resources)
            # Node changes included: nothing in this world rebuilds after the first cycle.
            assert kept.state.rebuilds == 1, f"cycle {cycle}"
            rebuilt = CycleState()
            rebuilt.sync(snapshot, kept.settings.indexed_resources)
            # Node positions and type ids are compared as they are, not normalized: the kept index renumbers
            # both as a fresh build would (positions are the searches' tie-break, type order is the order
            # iter_fitting walks), so they must be equal.
            assert kept.state.fingerprint() == rebuilt.fingerprint(), f"cycle {cycle}"
        ours = kept.run_cycle(snapshot, random.Random(seed * 1000 + cycle))
        theirs = fresh.run_cycle(snapshot, random.Random(seed * 1000 + cycle))
        assert ours.to_dict() == theirs.to_dict(), f"cycle {cycle}"
        assert [p.job.id for p in ours.scheduled] == [p.job.id for p in theirs.scheduled]
        world.apply(ours)
        # A node that took a job this cycle holds no more pods than its slots (foreign ones count).
        for placement in ours.scheduled:
            node = next(n for n in world.nodes[placement.cluster] if n.name == placement.node)
            if "pods" in node.resources:
                here = sum(job.node == node.name for job in world.running[placement.cluster])
                assert here + world.foreign[placement.cluster].get(node.name, {}).get("pods", 0) <= \
                    node.resources["pods"], f"cycle {cycle}: {node.name} over its pod slots"
        held = Counter((job.cluster, job.node, port) for jobs in world.running.values() for job in jobs
                       for port in job.host_ports)
        assert all(n == 1 for n in held.values()), f"cycle {cycle}: a host port twice on one node"
        for name, jobs in world.running.items():
            app_a = Counter(job.node for job in jobs if job.labels.get("app") == "a")
            excluding = {job.node for job in jobs if job.pod_rules is ANTI}
            assert all(app_a[node] == 1 for node in excluding), f"cycle {cycle}: anti-affinity broken"
            rules_seen += len(excluding)
        # 0.0.0.0 binds every address: no other IP's holder of that port beside it (NodePorts).
        wildcard = {(cluster, node, protocol, number) for cluster, node, (protocol, number, ip) in held
                    if ip == "0.0.0.0"}
        assert not any((cluster, node, protocol, number) in wildcard for cluster, node, (protocol, number, ip) in held
                       if ip != "0.0.0.0"), f"cycle {cycle}: a host port beside 0.0.0.0's"
        ports_seen += len(held)
        world.churn()
        syncs, rebuilds = kept.state.syncs, kept.state.rebuilds
    # Every cycle after the first was brought up to date, node changes included.
    assert syncs > 40 and rebuilds == 1
    assert world.node_changes >= 10 and ports_seen > 0 and rules_seen > 0


def test_node_changes_keep_the_state_and_a_reorder_rebuilds():
    """Each kind of node change alone: the kept state equals a fresh rebuild and was not rebuilt; existing
    nodes in another order (positions are the searches' tie-break) rebuild, as documented."""
    config = load_config(None)
    scheduler = Scheduler(config)
    nodes = [Node(f"n{i}", "c1", {"cpu": 8000, "memory": 32 * GIB}, {"kind": "cpu"}) for i in range(4)]
    other = [Node("m0", "c2", {"cpu": 8000, "memory": 32 * GIB}, {"kind": "cpu"})]
    running = [Job("r1", "A", "s", 0, "armada-preemptible", 0.0, SHAPES[0], state=JobState.RUNNING, cluster="c1",
                   node="n2"),
               Job("r2", "A", "s", 0, "armada-preemptible", 0.0, SHAPES[1], state=JobState.RUNNING, cluster="c2",
                   node="m0")]
    queued = [Job("g1", "A", "s", 0, "armada-default", 1.0, GPU_SHAPE, GPU_SELECTOR, GPU_TOLERATION)]

    def snapshot(c1, c2=other):
        return Snapshot([ClusterSnapshot("c1", c1, running[:1]), ClusterSnapshot("c2", c2, running[1:])], queued,
                        [Queue("A")], scheduler.priority_classes(), "armada-default")

    state = CycleState()
    state.sync(snapshot(nodes), ())
    changes = [
        [*nodes, Node("n9", "c1", {"cpu": 4000, "memory": 8 * GIB}, {"kind": "cpu"})],  # added before c2's node
        [nodes[0], nodes[2], nodes[3]],  # removed
        [replace(nodes[0], unschedulable=True), *nodes[1:]],  # cordoned
        [replace(nodes[0], taints=(DEDICATED,)), *nodes[1:]],  # tainted
        [nodes[0], replace(nodes[1], labels={"kind": "gpu"}), *nodes[2:]],  # relabelled: g1 selects on kind
        [*nodes[:2], replace(nodes[2], resources={"cpu": 16000, "memory": 64 * GIB}), nodes[3]],  # resized
        nodes,  # all back
    ]
    for c1 in changes:
        state.sync(snapshot(c1), ())
        fresh = CycleState()
        fresh.sync(snapshot(c1), ())
        assert state.fingerprint() == fresh.fingerprint()
        assert state.rebuilds == 1
        assert state.running["r2"].node == len(c1)  # c2's node comes after c1's
    state.sync(snapshot([nodes[1], nodes[0], *nodes[2:]]), ())
    assert state.rebuilds == 2


@pytest.mark.parametrize("changed", [False, True])
def test_queued_list_less_the_placements_syncs_without_a_lookup_per_job_and_a_changed_job_is_seen(changed):
    """The next snapshot lists the queued jobs as before less those placed: recognised by identity passes (the
    per-job map is never filled), equal to a rebuild; with one queued job replaced by a new object as well,
    the change is found."""
    config = load_config(None)
    scheduler = Scheduler(config, ["allocate"])
    nodes = [Node(f"n{i}", "c1", {"cpu": 4000, "memory": 16 * GIB}) for i in range(3)]
    queues = [Queue("A"), Queue("B")]
    queued = [Job(f"j{k}", "AB"[k % 2], "s", 0, "armada-preemptible", float(k), SHAPES[0]) for k in range(200)]
    snapshot = Snapshot([ClusterSnapshot("c1", nodes)], queued, queues, scheduler.priority_classes(), "armada-default")
    first = scheduler.run_cycle(snapshot, random.Random(0))
    assert len(first.scheduled) == 12
    placed = {p.job.id for p in first.scheduled}
    running = [replace(p.job, state=JobState.RUNNING, cluster="c1", node=p.node) for p in first.scheduled]
    jobs = [job for job in queued if job.id not in placed]
    if changed:
        jobs[150] = replace(jobs[150], priority=5)
    later = Snapshot([ClusterSnapshot("c1", nodes, running)], jobs, queues, scheduler.priority_classes(),
                     "armada-default")
    scheduler.state.sync(later, scheduler.settings.indexed_resources)
    rebuilt = CycleState()
    rebuilt.sync(later, scheduler.settings.indexed_resources)
    assert scheduler.state.rebuilds == 1 and scheduler.state.entries_filled == changed
    assert scheduler.state.fingerprint() == rebuilt.fingerprint()


def test_a_foreign_pod_holding_a_resource_no_node_offers_takes_nothing_that_matters():
    """Kubernetes' e2e specs add an extended resource to nodes, bind pods that use it and take it off the nodes
    again while the pods are there: their usage of a resource no node offers and no job asks constrains no
    placement, whether the state is built with it or synced to it."""
    config = load_config(None)
    scheduler = Scheduler(config, ["allocate"])
    nodes = [Node(f"n{i}", "c1", {"cpu": 4000, "memory": 16 * GIB, "pods": 10}) for i in range(2)]
    queued = [Job(f"j{k}", "A", "s", 0, "armada-preemptible", float(k), {"cpu": 1000}) for k in range(6)]

    def snapshot(foreign):
        return Snapshot([ClusterSnapshot("c1", nodes, [], foreign)], queued, [Queue("A")],
                        scheduler.priority_classes(), "armada-default")

    plain = {"n0": {"cpu": 2000, "pods": 1}}
    extended = {"n0": {"cpu": 2000, "example.com/fakecpu": 800, "pods": 1}}
    for first, second in ((plain, extended), (extended, plain), (extended, extended)):
        scheduler = Scheduler(config, ["allocate"])
        scheduler.run_cycle(snapshot(first), random.Random(0))
        decisions = scheduler.run_cycle(snapshot(second), random.Random(0))
        assert Counter(p.node for p in decisions.scheduled) == {"n0": 2, "n1": 4}
        rebuilt = CycleState()
        rebuilt.sync(snapshot(second), scheduler.settings.indexed_resources)
