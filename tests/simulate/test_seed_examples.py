"""Every worked example of armada-scheduler.txt (and arvados' head-of-line case), with exact outcomes."""

from __future__ import annotations

from pathlib import Path

from tests.support.scenario import config, jobs, placements, run_once

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_two_queue_preemption_to_fair_share(tmp_path):
    """A's 40 jobs are evicted; A and B alternate; 32 each; A's 8 on node-2 preempted; B all on node-2."""
    out = run_once(tmp_path, None, (EXAMPLES / "two-queues.yaml").read_text())
    assert out["scheduled"] == [{"job": f"b-{i}", "cluster": "sim", "node": "node-2"} for i in range(1, 33)]
    assert out["preempted"] == [f"a-{i}" for i in range(33, 41)]
    assert out["queued"] == [f"b-{i}" for i in range(33, 51)]
    assert out["queues"] == {
        "A": {"fairShare": 0.5, "share": 0.5, "allocated": {"cpu": "32"}},
        "B": {"fairShare": 0.5, "share": 0.5, "allocated": {"cpu": "32"}},
    }
    assert set(out["reasons"]) == set(out["queued"])
    assert out["reasons"]["b-33"] == "0/2 nodes are available: 2 Insufficient cpu"


def test_non_queue_aware_packing_mixes_queues_on_a_node(tmp_path):
    """Without bestfit (plain smallest fit), B's jobs spill onto node-1 and displace A's jobs there.

    The seed warns that non-queue-aware packing interleaves queues on nodes. Here, once node-2's
    free room is gone, node-1 (where A has returned fewer jobs) is the smallest fit for b-25..b-28,
    so A loses a-29..a-32 on node-1 as well as a-37..a-40 on node-2. The seed evicts every job of A,
    so the protected fraction of fair share is off here (with it, A keeps a-1..a-32 on node-1 from the
    start: tests/actions/test_protected_fair_share.py).
    """
    plugins = """
    plugins:
      - name: assetfairness
      - name: gang
      - name: priorityclass
      - name: predicates
    """
    cfg = config(plugins=plugins, extra="evict: {protectedFractionOfFairShare: 0}")
    out = run_once(tmp_path, cfg, (EXAMPLES / "two-queues.yaml").read_text())
    on_node_1 = [p["job"] for p in out["scheduled"] if p["node"] == "node-1"]
    assert on_node_1 == ["b-25", "b-26", "b-27", "b-28"]
    assert len(out["scheduled"]) == 32
    assert out["preempted"] == ["a-29", "a-30", "a-31", "a-32", "a-37", "a-38", "a-39", "a-40"]


STATE_32_CORE = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 32, memory: 128Gi}}
jobs:
  - {id: d-1, queue: A, priorityClass: armada-default, requests: {cpu: 10}, state: running, node: node-1}
  - {id: p-1, queue: A, priorityClass: armada-preemptible, requests: {cpu: 20}, state: running, node: node-1}
"""


def test_allocatable_at_priority_in_the_node_index(tmp_path):
    from flotilla.config import load_config, load_state
    from flotilla.scheduler import Scheduler
    from flotilla.core.nodeindex import EVICTED
    from flotilla.core.session import Session

    path = tmp_path / "s.yaml"
    path.write_text(STATE_32_CORE)
    cfg = load_config(None)
    snapshot = load_state(path, cfg)
    scheduler = Scheduler(cfg)
    session = Session(snapshot, scheduler.settings)
    cpu = session.space.position["cpu"]
    index = session.index
    assert index.free[0][index.level_of[30000]][cpu] == 22000
    assert index.free[0][index.level_of[20000]][cpu] == 2000
    assert index.free[0][index.level_of[EVICTED]][cpu] == 2000


def test_default_job_displaces_preemptible_within_allocatable_at_its_priority(tmp_path):
    cfg = config(extra="evict: {probability: 0}")
    state = STATE_32_CORE + "  - {id: x-1, queue: B, priorityClass: armada-default, requests: {cpu: 22}, submitted: 5}\n"
    out = run_once(tmp_path, cfg, state)
    assert placements(out) == {"x-1": "node-1"}
    assert out["preempted"] == ["p-1"]


def test_default_job_beyond_allocatable_at_its_priority_preempts_nothing(tmp_path):
    cfg = config(extra="evict: {probability: 0}")
    state = STATE_32_CORE + "  - {id: x-1, queue: B, priorityClass: armada-default, requests: {cpu: 23}, submitted: 5}\n"
    out = run_once(tmp_path, cfg, state)
    assert out["scheduled"] == [] and out["preempted"] == [] and out["queued"] == ["x-1"]


def test_preemptible_job_gets_only_what_is_free_at_its_priority(tmp_path):
    cfg = config(extra="evict: {probability: 0}")
    state = STATE_32_CORE + (
        "  - {id: y-1, queue: B, priorityClass: armada-preemptible, requests: {cpu: 2}, submitted: 5}\n"
        "  - {id: y-2, queue: B, priorityClass: armada-preemptible, requests: {cpu: 3}, submitted: 6}\n")
    out = run_once(tmp_path, cfg, state)
    assert placements(out) == {"y-1": "node-1"}
    assert out["preempted"] == [] and out["queued"] == ["y-2"]


TWO_NODES = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 32, memory: 128Gi}}
      - {name: node-2, resources: {cpu: 32, memory: 128Gi}}
jobs:
"""


def test_gang_that_cannot_fit_leaves_no_trace_and_blocks_nothing(tmp_path):
    state = TWO_NODES + "\n".join([
        *(f"  - {{id: g-{i}, queue: A, requests: {{cpu: 24}}, submitted: {i}, gang: {{id: g1, cardinality: 3}}}}"
          for i in (1, 2, 3)),
        "  - {id: a-4, queue: A, requests: {cpu: 8}, submitted: 4}",
    ]) + "\n"
    out = run_once(tmp_path, config(), state)
    assert placements(out) == {"a-4": "node-1"}
    assert out["queued"] == ["g-1", "g-2", "g-3"]
    assert out["reasons"]["g-1"] == "gang g1: 2 of 3 members fit"
    assert out["queues"]["A"]["allocated"] == {"cpu": "8"}


def test_gang_that_fits_is_placed_whole(tmp_path):
    state = TWO_NODES + "\n".join(
        f"  - {{id: g-{i}, queue: A, requests: {{cpu: 24}}, submitted: {i}, gang: {{id: g2, cardinality: 2}}}}"
        for i in (1, 2)) + "\n"
    out = run_once(tmp_path, config(), state)
    assert placements(out) == {"g-1": "node-1", "g-2": "node-2"}


def test_weights_one_to_two_give_one_third_and_two_thirds(tmp_path):
    state = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 10}}
      - {name: node-2, resources: {cpu: 10}}
      - {name: node-3, resources: {cpu: 10}}
jobs:
""" + jobs("a", 30, "A") + "\n" + jobs("b", 30, "B", submitted=100) + "\n"
    out = run_once(tmp_path, config(queues="queues: [{name: A, weight: 1}, {name: B, weight: 2}]"), state)
    scheduled = placements(out)
    assert sorted(j for j in scheduled if j.startswith("a-")) == sorted(f"a-{i}" for i in range(1, 11))
    assert sorted(j for j in scheduled if j.startswith("b-")) == sorted(f"b-{i}" for i in range(1, 21))
    assert out["queues"]["A"] == {"fairShare": 0.333333, "share": 0.333333, "allocated": {"cpu": "10"}}
    assert out["queues"]["B"] == {"fairShare": 0.666667, "share": 0.666667, "allocated": {"cpu": "20"}}


def test_per_queue_best_fit_own_nodes_then_unused_then_smallest(tmp_path):
    state = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 8}}
      - {name: node-2, resources: {cpu: 16}}
      - {name: node-3, resources: {cpu: 32}}
jobs:
  - {id: a-0, queue: A, priorityClass: armada-default, requests: {cpu: 2}, state: running, node: node-3}
  - {id: a-1, queue: A, priorityClass: armada-default, requests: {cpu: 4}, submitted: 1}
  - {id: b-1, queue: B, priorityClass: armada-default, requests: {cpu: 4}, submitted: 2}
  - {id: b-2, queue: B, priorityClass: armada-default, requests: {cpu: 6}, submitted: 3}
"""
    out = run_once(tmp_path, config(), state)
    assert out["scheduled"] == [
        {"job": "b-1", "cluster": "c1", "node": "node-1"},
        {"job": "a-1", "cluster": "c1", "node": "node-3"},
        {"job": "b-2", "cluster": "c1", "node": "node-2"},
    ]


def test_queue_limit_caps_a_queue_and_says_so(tmp_path):
    state = TWO_NODES + jobs("b", 30, "B") + "\n"
    out = run_once(tmp_path, config(queues="queues: [{name: A}, {name: B, limits: {cpu: 0.25}}]"), state)
    assert sorted(placements(out)) == sorted(f"b-{i}" for i in range(1, 17))
    assert out["queued"] == [f"b-{i}" for i in range(17, 31)]
    assert out["reasons"]["b-17"] == "queue B at its cpu limit 0.25"
    assert out["queues"]["B"]["share"] == 0.25


def test_taints_and_selectors(tmp_path):
    state = """
clusters:
  - name: c1
    nodes:
      - {name: cpu-1, resources: {cpu: 32}, labels: {kind: cpu}}
      - name: gpu-1
        resources: {cpu: 32, nvidia.com/gpu: 8}
        labels: {kind: gpu}
        taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
jobs:
  - {id: s-1, queue: A, requests: {cpu: 4, nvidia.com/gpu: 1}, nodeSelector: {kind: gpu}, submitted: 1}
  - id: t-1
    queue: A
    requests: {cpu: 4, nvidia.com/gpu: 1}
    nodeSelector: {kind: gpu}
    tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
    submitted: 2
  - {id: c-1, queue: A, requests: {cpu: 4}, submitted: 3}
  - {id: c-2, queue: A, requests: {cpu: 40}, submitted: 4}
"""
    out = run_once(tmp_path, config(), state)
    assert placements(out) == {"t-1": "gpu-1", "c-1": "cpu-1"}
    assert out["queued"] == ["c-2", "s-1"]
    assert out["reasons"]["s-1"] == ("0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
                                     "1 node(s) had untolerated taint {nvidia.com/gpu: present}")
    # The full node and the tainted one are both counted (kube-scheduler's wording and counts).
    assert out["reasons"]["c-2"] == \
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {nvidia.com/gpu: present}"


def test_unschedulable_job_at_the_head_of_a_queue_blocks_nothing(tmp_path):
    state = TWO_NODES + "  - {id: big-1, queue: A, requests: {cpu: 64}, submitted: 0}\n" + jobs("a", 5, "A") + "\n"
    out = run_once(tmp_path, config(), state)
    assert sorted(placements(out)) == [f"a-{i}" for i in range(1, 6)]
    assert out["queued"] == ["big-1"]
    assert out["reasons"]["big-1"] == "0/2 nodes are available: 2 Insufficient cpu"


def test_lookahead_gives_up_on_a_queue_and_says_so(tmp_path):
    state = TWO_NODES + "\n".join(
        f"  - {{id: big-{i}, queue: A, requests: {{cpu: 64}}, submitted: {i}}}" for i in range(1, 4)
    ) + "\n" + jobs("a", 2, "A", submitted=10) + "\n"
    out = run_once(tmp_path, config(extra="allocate: {lookahead: 2}"), state)
    assert out["scheduled"] == []
    assert out["reasons"]["a-1"] == "lookahead 2 reached in queue A"


URGENCY = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 32}}
      - {name: node-2, resources: {cpu: 32}}
jobs:
  - {id: p-1, queue: A, priorityClass: armada-preemptible, requests: {cpu: 8}, state: running, node: node-1, submitted: 1}
  - {id: p-2, queue: A, priorityClass: armada-preemptible, requests: {cpu: 8}, state: running, node: node-1, submitted: 2}
  - {id: p-3, queue: A, priorityClass: armada-preemptible, requests: {cpu: 8}, state: running, node: node-1, submitted: 3}
  - {id: p-4, queue: A, priorityClass: armada-preemptible, requests: {cpu: 8}, state: running, node: node-1, submitted: 4}
  - {id: q-1, queue: A, priorityClass: armada-preemptible, requests: {cpu: 16}, state: running, node: node-2, submitted: 5}
  - {id: q-2, queue: A, priorityClass: armada-preemptible, requests: {cpu: 8}, state: running, node: node-2, submitted: 6}
  - {id: q-3, queue: A, priorityClass: armada-preemptible, requests: {cpu: 8}, state: running, node: node-2, submitted: 7}
"""


def test_urgent_job_preempts_the_fewest_lower_priority_jobs(tmp_path):
    state = URGENCY + "  - {id: u-1, queue: B, priorityClass: armada-default, requests: {cpu: 16}, submitted: 9}\n"
    out = run_once(tmp_path, config(extra="evict: {probability: 0}"), state)
    assert placements(out) == {"u-1": "node-2"}
    assert out["preempted"] == ["q-1"]


def test_lower_or_equal_priority_job_never_preempts(tmp_path):
    state = URGENCY + "  - {id: u-1, queue: B, priorityClass: armada-preemptible, requests: {cpu: 8}, submitted: 9}\n"
    out = run_once(tmp_path, config(extra="evict: {probability: 0}"), state)
    assert out["scheduled"] == [] and out["preempted"] == [] and out["queued"] == ["u-1"]


def test_no_preemption_when_the_job_would_still_not_fit(tmp_path):
    state = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 32}}
jobs:
  - {id: d-1, queue: A, priorityClass: armada-default, requests: {cpu: 20}, state: running, node: node-1}
  - {id: p-1, queue: A, priorityClass: armada-preemptible, requests: {cpu: 12}, state: running, node: node-1}
  - {id: u-1, queue: B, priorityClass: armada-default, requests: {cpu: 16}, submitted: 9}
"""
    out = run_once(tmp_path, config(extra="evict: {probability: 0}"), state)
    assert out["scheduled"] == [] and out["preempted"] == [] and out["queued"] == ["u-1"]


def test_same_inputs_and_seed_give_byte_identical_output(tmp_path):
    from tests.support.scenario import invoke

    state = (EXAMPLES / "two-queues.yaml").read_text()
    cfg = config(extra="evict: {probability: 0.5}")
    first = invoke(tmp_path, cfg, state, seed=7).stdout
    second = invoke(tmp_path, cfg, state, seed=7).stdout
    assert first == second and first
    # The draws matter: with probability 0.5 some seed keeps a node's jobs un-evicted.
    outputs = {invoke(tmp_path, cfg, state, seed=s).stdout for s in range(6)}
    assert len(outputs) > 1


def test_preempt_enabled_false_turns_urgency_preemption_off(tmp_path):
    state = URGENCY + "  - {id: u-1, queue: B, priorityClass: armada-default, requests: {cpu: 16}, submitted: 9}\n"
    out = run_once(tmp_path, config(extra="evict: {probability: 0}\npreempt: {enabled: false}"), state)
    assert out["scheduled"] == [] and out["preempted"] == [] and out["queued"] == ["u-1"]
