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
    assert [(pc.name, pc.priority, pc.preemptible, pc.preempts) for pc in got] == [
        ("armada-default", 30000, False, True),            # Flotilla's own class keeps its name and value
        ("armada-preemptible", 20000, True, True),
        ("system-cluster-critical", 2_000_000_000, False, True),
        ("system-node-critical", 2_000_001_000, False, True),
        (NO_CLASS, 0, True, True),
        ("cluster-default", 10, True, True),
        ("mine", 5, True, True),
        ("sched-preemption-high-priority", 1000, True, True),
        ("sched-preemption-low-priority", 1, True, True),
        ("waits", 500, True, False),
    ]
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


def test_the_offset_setting_is_read_from_the_config():
    assert load_config(None).cluster_priority_classes.priority_offset == 0
    cfg = parse_config("clusterPriorityClasses: {priorityOffset: -1000000000}\n", "c.yaml")
    assert cfg.cluster_priority_classes.priority_offset == -1_000_000_000


def _cycle(classes, running, queued):
    scheduler = Scheduler(load_config(None))
    scheduler.settings.evict_probability = 0.0
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
