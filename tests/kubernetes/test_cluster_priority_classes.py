"""Cluster PriorityClass objects as Flotilla priority classes, without a cluster (KWOK: test_kwok_conventions.py)."""

from __future__ import annotations

import random

from flotilla.config import load_config, parse_config
from flotilla.core.model import ClusterSnapshot, Job, JobState, Node, PriorityClass, Queue, Snapshot
from flotilla.kubernetes.priorityclasses import (NO_CLASS, ClusterPriorityClass, PriorityClassTracker,
                                                 cluster_classes, read_priority_class)
from flotilla.scheduler import Scheduler


def pc_object(name, value, *, policy=None, default=False, labels=None):
    obj = {"metadata": {"name": name, "labels": labels or {}}, "value": value, "globalDefault": default}
    if policy:
        obj["preemptionPolicy"] = policy
    return obj


def test_cluster_classes_rank_by_value_plus_offset_and_system_classes_are_never_preempted():
    tracker = PriorityClassTracker()
    tracker.replace([pc_object("sched-preemption-low-priority", 1), pc_object("sched-preemption-high-priority", 1000),
                     pc_object("waits", 500, policy="Never"), pc_object("armada-default", 7),
                     pc_object("cluster-default", 10, default=True),
                     pc_object("mine", 5, labels={"app.kubernetes.io/managed-by": "flotilla"}), {"metadata": {}}])
    assert tracker.version == 1 and tracker.synced
    assert read_priority_class(pc_object("mine", 5, labels={"app.kubernetes.io/managed-by": "flotilla"})).managed
    own = [PriorityClass("armada-default", 30000, False), PriorityClass("armada-preemptible", 20000, True)]
    got = cluster_classes(own, [tracker.classes.values()], offset=0)
    assert [(pc.name, pc.priority, pc.preemptible, pc.preempts, pc.fair_share) for pc in got] == [
        ("armada-default", 30000, False, True, True),            # Flotilla's own class keeps its name and value
        ("armada-preemptible", 20000, True, True, True),
        ("system-cluster-critical", 2_000_000_000, False, True, False),
        ("system-node-critical", 2_000_001_000, False, True, False),
        (NO_CLASS, 0, True, True, False),
        ("cluster-default", 10, True, True, False),
        ("mine", 5, True, True, False),
        ("sched-preemption-high-priority", 1000, True, True, False),
        ("sched-preemption-low-priority", 1, True, True, False),
        ("waits", 500, True, False, False),
    ]
    assert all(pc.fair_share for pc in cluster_classes([], [tracker.classes.values()], fair_share=True))
    shifted = {pc.name: pc.priority for pc in cluster_classes(own, [tracker.classes.values()], offset=-1000)}
    assert (shifted["sched-preemption-high-priority"], shifted[NO_CLASS], shifted["armada-default"],
            shifted["system-node-critical"]) == (0, -1000, 30000, 2_000_000_000)
    # Watch events: a change bumps the version, a repeat does not.
    tracker.on_event("MODIFIED", pc_object("waits", 500, policy="Never"))
    assert tracker.version == 1
    tracker.on_event("DELETED", pc_object("waits", 500))
    tracker.on_event("ADDED", pc_object("new", 3))
    assert tracker.version == 3 and sorted(tracker.classes) == [
        "armada-default", "cluster-default", "mine", "new", "sched-preemption-high-priority",
        "sched-preemption-low-priority"]


def test_the_settings_are_read_from_the_config():
    stock = load_config(None).cluster_priority_classes
    assert (stock.priority_offset, stock.fair_share_preemption) == (0, False)
    cfg = parse_config("clusterPriorityClasses: {priorityOffset: -1000000000, fairSharePreemption: true}\n",
                       "c.yaml").cluster_priority_classes
    assert (cfg.priority_offset, cfg.fair_share_preemption) == (-1_000_000_000, True)


def _cycle(classes, running, queued, evict=0.0):
    scheduler = Scheduler(load_config(None))
    scheduler.settings.evict_probability = evict
    nodes = [Node("node-1", "c1", {"cpu": 4000})]
    snapshot = Snapshot([ClusterSnapshot("c1", nodes, running)], queued, [Queue("A"), Queue("B")],
                        scheduler.priority_classes() + classes, "armada-default")
    return scheduler.run_cycle(snapshot, random.Random(0), actions=[a for a in scheduler.actions if a.name != "lease"])


def test_urgency_preemption_among_cluster_classes_follows_kubernetes():
    classes = cluster_classes([], [[ClusterPriorityClass("low", 1), ClusterPriorityClass("high", 1000),
                                    ClusterPriorityClass("never", 1000, preempts=False)]])
    low = Job("low-1", "A", "s", 0, "low", 0.0, {"cpu": 4000}, state=JobState.RUNNING, cluster="c1", node="node-1")
    # A higher value preempts a lower one (whatever the queues' shares).
    decisions = _cycle(classes, [low], [Job("high-1", "B", "s", 0, "high", 1.0, {"cpu": 4000})])
    assert [(p.job.id, p.node) for p in decisions.scheduled] == [("high-1", "node-1")]
    assert [job.id for job in decisions.preempted] == ["low-1"]
    # preemptionPolicy: Never: it waits.
    decisions = _cycle(classes, [low], [Job("never-1", "B", "s", 0, "never", 1.0, {"cpu": 4000})])
    assert decisions.scheduled == [] and decisions.preempted == []
    # A system-critical pod is never preempted, even by a higher system class.
    critical = Job("crit-1", "A", "s", 0, "system-cluster-critical", 0.0, {"cpu": 4000}, state=JobState.RUNNING,
                   cluster="c1", node="node-1")
    decisions = _cycle(classes, [critical], [Job("node-1", "B", "s", 0, "system-node-critical", 1.0,
                                                 {"cpu": 4000})])
    assert decisions.scheduled == [] and decisions.preempted == []
    # A pod with no class (priority 0) preempts none of value 1, and is preempted by one of value 1.
    nothing = Job("none-1", "A", "s", 0, NO_CLASS, 0.0, {"cpu": 4000}, state=JobState.RUNNING, cluster="c1",
                  node="node-1")
    decisions = _cycle(classes, [nothing], [Job("low-2", "B", "s", 0, "low", 1.0, {"cpu": 4000})])
    assert [job.id for job in decisions.preempted] == ["none-1"]
    decisions = _cycle(classes, [low], [Job("none-2", "B", "s", 0, NO_CLASS, 1.0, {"cpu": 4000})])
    assert decisions.preempted == []


def test_preemption_to_fair_share_leaves_cluster_class_pods_unless_configured():
    def run(fair_share):
        classes = cluster_classes([], [[ClusterPriorityClass("batch", 5)]], fair_share=fair_share)
        running = [Job(f"a-{i}", "A", "s", 0, "batch", 0.0, {"cpu": 2000}, state=JobState.RUNNING, cluster="c1",
                       node="node-1") for i in range(2)]
        decisions = _cycle(classes, running, [Job("b-1", "B", "s", 0, "batch", 1.0, {"cpu": 2000})], evict=1.0)
        return [p.job.id for p in decisions.scheduled], [job.id for job in decisions.preempted]

    # Queue A holds the whole node, B waits with a job of the same class: Kubernetes preempts nothing.
    assert run(False) == ([], [])
    assert run(True) == (["b-1"], ["a-1"])
