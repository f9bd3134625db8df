"""Job-level urgency preemption: whole jobs of the lowest class, as few as possible (volcano-scheduler.txt)."""

from __future__ import annotations

from tests.support.scenario import placements, run_once
from tests.support.actions import LOW


HEAD = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 32}}
      - {name: node-2, resources: {cpu: 32}}
      - {name: node-3, resources: {cpu: 32}}
jobs:
  - {id: d-1, queue: A, requests: {cpu: 16}, state: running, node: node-1}
  - {id: d-2, queue: A, requests: {cpu: 16}, state: running, node: node-2}
  - {id: d-3, queue: A, requests: {cpu: 16}, state: running, node: node-3}
  - {id: g-1, queue: A, priorityClass: armada-preemptible, requests: {cpu: 8}, gang: {id: g, cardinality: 2},
     state: running, node: node-3}
  - {id: g-2, queue: A, priorityClass: armada-preemptible, requests: {cpu: 8}, gang: {id: g, cardinality: 2},
     state: running, node: node-3}
  - {id: u-1, queue: B, requests: {cpu: 16}, submitted: 9}
"""


def test_the_lowest_class_goes_first_even_if_it_takes_more_jobs(tmp_path):
    # node-1: one 20000 job; node-2: two 10000 jobs; node-3: a 20000 gang. The 10000 jobs go.
    state = HEAD + """
  - {id: p-1, queue: A, priorityClass: armada-preemptible, requests: {cpu: 16}, state: running, node: node-1}
  - {id: l-1, queue: A, priorityClass: armada-low, requests: {cpu: 8}, state: running, node: node-2}
  - {id: l-2, queue: A, priorityClass: armada-low, requests: {cpu: 8}, state: running, node: node-2}
"""
    out = run_once(tmp_path, LOW, state)
    assert placements(out) == {"u-1": "node-2"}
    assert out["preempted"] == ["l-1", "l-2"]


def test_one_whole_job_rather_than_pods_of_several_jobs(tmp_path):
    # node-1 is full of a non-preemptible job; node-2 holds two single 8-core jobs, node-3 one gang of two
    # 8-core pods. Same class, same pod count: the one whole job (the gang) goes.
    state = HEAD.replace("{id: d-1, queue: A, requests: {cpu: 16}", "{id: d-1, queue: A, requests: {cpu: 32}") + """
  - {id: s-1, queue: A, priorityClass: armada-preemptible, requests: {cpu: 8}, state: running, node: node-2}
  - {id: s-2, queue: A, priorityClass: armada-preemptible, requests: {cpu: 8}, state: running, node: node-2}
"""
    out = run_once(tmp_path, LOW, state)
    assert placements(out) == {"u-1": "node-3"}
    assert out["preempted"] == ["g-1", "g-2"]


def test_a_job_of_a_class_the_config_no_longer_has_waits_and_urgent_jobs_still_preempt():
    # A snapshot may list a queued job of a priority class it does not define (serve leaves such jobs out;
    # a library caller or a backend need not). Such a job is refused with its reason (the priorityclass
    # plugin's job_valid); preempt passes it over instead of failing the whole cycle, and the urgent job
    # behind it in the same queue still displaces a preemptible one.
    import random

    from flotilla.config import load_config
    from flotilla.scheduler import Scheduler
    from flotilla.core.model import ClusterSnapshot, Job, JobState, Node, Queue, Snapshot

    scheduler = Scheduler(load_config(None))
    scheduler.settings.evict_probability = 0.0
    nodes = [Node("node-1", "c1", {"cpu": 4000})]
    running = [Job("p-1", "A", "s", 0, "armada-preemptible", 0.0, {"cpu": 4000}, state=JobState.RUNNING,
                   cluster="c1", node="node-1")]
    queued = [Job("gone-1", "B", "s", 0, "retired", 1.0, {"cpu": 4000}),
              Job("u-1", "B", "s", 0, "armada-default", 2.0, {"cpu": 4000})]
    snapshot = Snapshot([ClusterSnapshot("c1", nodes, running)], queued, [Queue("A"), Queue("B")],
                        scheduler.priority_classes(), "armada-default")
    decisions = scheduler.run_cycle(snapshot, random.Random(0),
                                    actions=[a for a in scheduler.actions if a.name != "lease"])
    assert [(p.job.id, p.node) for p in decisions.scheduled] == [("u-1", "node-1")]
    assert [job.id for job in decisions.preempted] == ["p-1"]
    assert decisions.reasons["gone-1"] == "unknown priority class retired"
