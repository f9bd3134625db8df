"""Why a job waits, in kube-scheduler's words: every node counted once, under the first check it fails."""

from __future__ import annotations

# n1 is full (a 4-core job runs there), n2 is empty but tainted: the waiting job's reason names both.
FULL_AND_TAINTED = """
clusters:
  - name: c1
    nodes:
      - {name: n1, resources: {cpu: 4, memory: 16Gi}}
      - name: n2
        resources: {cpu: 4, memory: 16Gi}
        taints: [{key: dedicated, value: infra, effect: NoSchedule}]
jobs:
  - {id: run-1, queue: A, requests: {cpu: 4}, state: running, cluster: c1, node: n1}
  - {id: wait-1, queue: A, requests: {cpu: 2}, submitted: 1}
"""


def test_a_full_node_and_a_tainted_node_are_both_counted(flotilla_cycle):
    result = flotilla_cycle(FULL_AND_TAINTED)
    assert result.scheduled == {}
    assert result.queued == {
        "wait-1": "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {dedicated: infra}"}
    assert result.codes == {"wait-1": "insufficient_resources"}


# Five nodes, each failing a different first check; the counts add up to five.
EVERY_CAUSE = """
clusters:
  - name: c1
    nodes:
      - {name: busy-1, resources: {cpu: 4, memory: 16Gi}}
      - {name: busy-2, resources: {cpu: 4, memory: 16Gi}}
      - {name: off-1, resources: {cpu: 8, memory: 16Gi}, unschedulable: true}
      - name: gpu-1
        resources: {cpu: 8, memory: 16Gi}
        labels: {kind: gpu}
        taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
      - {name: small-1, resources: {cpu: 8, memory: 1Gi}}
jobs:
  - {id: run-1, queue: A, requests: {cpu: 4}, state: running, cluster: c1, node: busy-1}
  - {id: run-2, queue: A, requests: {cpu: 3}, state: running, cluster: c1, node: busy-2}
  - {id: wait-1, queue: A, requests: {cpu: 2, memory: 2Gi}, submitted: 1}
"""


def test_every_node_counts_once_under_its_first_failing_check(flotilla_cycle):
    # busy-1 and busy-2 lack cpu (busy-1 lacks memory too, counted once: under cpu, the first resource short);
    # small-1 lacks memory only; off-1 is unschedulable before anything else; gpu-1's taint refuses it.
    result = flotilla_cycle(EVERY_CAUSE)
    assert result.queued == {"wait-1": "0/5 nodes are available: 2 Insufficient cpu, 1 Insufficient memory, "
                                       "1 node(s) had untolerated taint {nvidia.com/gpu: present}, "
                                       "1 node(s) were unschedulable"}


SELECTED_NOWHERE = """
clusters:
  - name: c1
    nodes:
      - {name: n1, resources: {cpu: 8}, labels: {zone: a}}
      - {name: n2, resources: {cpu: 8}, labels: {zone: a}}
      - name: n3
        resources: {cpu: 8}
        labels: {zone: b}
        taints: [{key: dedicated, value: infra, effect: NoExecute}]
jobs:
  - {id: sel-1, queue: A, requests: {cpu: 1}, nodeSelector: {zone: c}, submitted: 1}
"""


def test_no_node_matches_reads_the_same_way(flotilla_cycle):
    # n3's taint is checked before its labels (kube-scheduler's filter order): it counts under the taint.
    result = flotilla_cycle(SELECTED_NOWHERE)
    reason = result.queued["sel-1"]
    assert reason == ("0/3 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, "
                      "1 node(s) had untolerated taint {dedicated: infra}")
    assert result.codes == {"sel-1": "node_selector"}


HOST_PORTS = """
clusters:
  - name: c1
    nodes:
      - {name: n1, resources: {cpu: 8}}
      - {name: n2, resources: {cpu: 1}}
jobs:
  - {id: web-1, queue: A, requests: {cpu: 1}, hostPorts: [{port: 8080}], state: running, cluster: c1, node: n1}
  - {id: web-2, queue: A, requests: {cpu: 2}, hostPorts: [{port: 8080}], submitted: 1}
"""


def test_a_held_host_port_is_counted_per_node(flotilla_cycle):
    result = flotilla_cycle(HOST_PORTS)
    reason = result.queued["web-2"]
    assert reason == ("0/2 nodes are available: 1 Insufficient cpu, "
                      "1 node(s) didn't have free ports for the requested pod ports")


def test_a_cycles_reasons_tell_its_own_room_after_the_next_cycle_changed_it():
    # Wordings are made when asked; those not asked for by the next sync are made just before it changes the
    # node index. Read after the next cycle freed the node, the first cycle's reasons still count its room.
    from flotilla.config import load_config
    from flotilla.core.model import ClusterSnapshot, Job, JobState, Node, Queue, Snapshot
    from flotilla.scheduler import Scheduler

    scheduler = Scheduler(load_config(None), ["allocate"])
    node = Node("n1", "c1", {"cpu": 4000, "memory": 2**34})
    running = Job("run-1", "A", requests={"cpu": 4000}, state=JobState.RUNNING, cluster="c1", node="n1")
    waiting = [Job("wait-1", "A", requests={"cpu": 2000}, submitted=1.0),
               Job("wait-2", "B", requests={"cpu": 3000}, submitted=2.0)]

    def snapshot(jobs_running, queued):
        return Snapshot([ClusterSnapshot("c1", [node], jobs_running, {})], queued, [Queue("A"), Queue("B")],
                        scheduler.priority_classes(), scheduler.config.default_priority_class)

    first = scheduler.run_cycle(snapshot([running], list(waiting)))
    assert first.scheduled == []
    assert first.explain(waiting[0]) == "0/1 nodes are available: 1 Insufficient cpu"
    # run-1 finished and both waiting jobs were cancelled: the next cycle's index has the whole node free.
    second = scheduler.run_cycle(snapshot([], []))
    assert second.scheduled == [] and scheduler.state.index.free[0][0][0] == 4000
    # wait-2's reason was never asked for before the second cycle: it too tells the first cycle's room.
    assert [first.explain(job) for job in waiting] == ["0/1 nodes are available: 1 Insufficient cpu"] * 2
