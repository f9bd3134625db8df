"""Pod slots as kube-scheduler's NodeResourcesFit counts them: a node's ``pods`` holds every pod on it.

A node that declares ``pods`` takes that many pods, Flotilla's and foreign
ones together; one that declares none is unlimited. A job waiting for a slot
reads ``Too many pods``. Slots weigh nothing: shares and ``allocated``
read as without them.
"""

from __future__ import annotations

import pytest

from flotilla.core.model import ClusterSnapshot, Job, Node, Queue, Snapshot
from flotilla.core.resources import UNLIMITED_PODS, ResourceSpace
from flotilla.config import load_config
from flotilla.scheduler import Scheduler

TWO_NODES_OF_FOUR = """
clusters:
  - name: c1
    nodes:
      - {name: n1, resources: {cpu: 32, memory: 64Gi, pods: 4}}
      - {name: n2, resources: {cpu: 32, memory: 64Gi, pods: 4}}
jobs:
""" + "".join(f"  - {{id: j{k:02d}, queue: A, requests: {{cpu: 100m, memory: 64Mi}}, submitted: {k}}}\n"
              for k in range(10))


def test_two_nodes_of_four_slots_take_eight_of_ten(flotilla_cycle):
    result = flotilla_cycle(TWO_NODES_OF_FOUR)
    assert sorted(result.scheduled) == [f"j{k:02d}" for k in range(8)]
    assert sorted(result.scheduled.values()) == ["n1"] * 4 + ["n2"] * 4
    assert result.queued == {"j08": "0/2 nodes are available: 2 Too many pods",
                             "j09": "0/2 nodes are available: 2 Too many pods"}
    # Slots are no resource of the queue's: its allocation and share read as without them.
    assert result.output["queues"]["A"]["allocated"] == {"cpu": "800m", "memory": "512Mi"}
    assert result.shares["A"] == pytest.approx(0.8 / 64, abs=1e-6)


WITHOUT_SLOTS = TWO_NODES_OF_FOUR.replace(", pods: 4", "")


def test_nodes_without_pods_are_unlimited_and_shares_are_unchanged(flotilla_cycle):
    limited = flotilla_cycle(TWO_NODES_OF_FOUR.replace("pods: 4", "pods: 110"))
    unlimited = flotilla_cycle(WITHOUT_SLOTS)
    assert len(unlimited.scheduled) == len(limited.scheduled) == 10
    assert unlimited.queued == limited.queued == {}
    assert unlimited.scheduled == limited.scheduled
    assert unlimited.output["queues"] == limited.output["queues"]


MIXED = """
clusters:
  - name: c1
    nodes:
      - {name: small, resources: {cpu: 32, memory: 64Gi, pods: 2}}
      - {name: open, resources: {cpu: 2, memory: 64Gi}}
jobs:
  - {id: r1, queue: A, requests: {cpu: 1}, state: running, cluster: c1, node: small}
""" + "".join(f"  - {{id: j{k}, queue: A, requests: {{cpu: 500m}}, submitted: {k + 1}}}\n" for k in range(6))


def test_a_running_job_takes_a_slot_and_a_node_without_pods_has_no_limit(flotilla_cycle):
    result = flotilla_cycle(MIXED)
    # small has one slot left (r1 holds the other); open has room for four 500m jobs and no slot limit.
    assert sorted(result.scheduled.items()) == [("j0", "small"), ("j1", "open"), ("j2", "open"),
                                                ("j3", "open"), ("j4", "open")]
    assert result.queued == {"j5": "0/2 nodes are available: 1 Insufficient cpu, 1 Too many pods"}


SHORT_OF_BOTH = """
clusters:
  - name: c1
    nodes:
      - {name: n1, resources: {cpu: 1, pods: 1}}
jobs:
  - {id: r1, queue: A, requests: {cpu: 1}, state: running, cluster: c1, node: n1}
  - {id: w1, queue: A, requests: {cpu: 1}, submitted: 1}
"""


def test_a_node_short_of_slots_and_cpu_counts_under_pods_first(flotilla_cycle):
    # NodeResourcesFit checks the pod count before any resource.
    assert flotilla_cycle(SHORT_OF_BOTH).queued == {"w1": "0/1 nodes are available: 1 Too many pods"}


def _snapshot(scheduler, foreign: dict) -> Snapshot:
    nodes = [Node("n1", "c1", {"cpu": 32000, "pods": 4}), Node("n2", "c1", {"cpu": 32000, "pods": 4})]
    queued = [Job(f"j{k}", "A", requests={"cpu": 100}, submitted=float(k)) for k in range(8)]
    return Snapshot([ClusterSnapshot("c1", nodes, [], foreign)], queued, [Queue("A")],
                    scheduler.priority_classes(), "armada-default")


def test_foreign_pods_take_slots():
    # Two foreign pods on n1 (foreign usage names their count as pods): n1 takes two of Flotilla's.
    scheduler = Scheduler(load_config())
    decisions = scheduler.run_cycle(_snapshot(scheduler, {"n1": {"cpu": 200, "pods": 2}}))
    placed = sorted((p.node, p.job.id) for p in decisions.scheduled)
    assert [node for node, _ in placed] == ["n1", "n1", "n2", "n2", "n2", "n2"]
    assert sorted(job.id for job in decisions.queued) == ["j6", "j7"]
    assert {decisions.explain(job) for job in decisions.queued} == {"0/2 nodes are available: 2 Too many pods"}


def test_the_slot_is_the_last_dimension_and_only_where_nodes_declare_pods():
    space = ResourceSpace({"cpu", "memory", "pods", "example.com/x"})
    assert space.names == ("cpu", "memory", "example.com/x", "pods")
    assert space.slot == 3
    requests = {"cpu": 1000}
    assert space.vector(requests) == (1000, 0, 0, 1)
    assert space.allocatable({"cpu": 4000}) == (4000, 0, 0, UNLIMITED_PODS)
    assert space.allocatable({"cpu": 4000, "pods": 110}) == (4000, 0, 0, 110)
    assert space.usage({"cpu": 500, "pods": 3}) == (500, 0, 0, 3)
    assert space.formatted((1000, 0, 0, 7)) == {"cpu": "1"}
    plain = ResourceSpace({"cpu"})
    assert plain.slot == -1 and plain.vector(requests) == (1000,)
    assert plain.usage({"cpu": 500, "pods": 3}) == (500,)
