"""The two correctness fixes of the seeds' rules: equal priority for preemption to fair share, third-party actions."""

from __future__ import annotations


from tests.support.scenario import config, placements, run_once
from tests.support.actions import ACTION_STATE, with_classes


# One 8-core node full of A's jobs: four 20000-priority ones (submitted first) and four 25000-priority ones.
# B queues eight 20000-priority jobs. Every preemptible job is evicted.
EQUAL_PRIORITY_STATE = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 8}}
jobs:
""" + "\n".join(
    [f"  - {{id: a-{i}, queue: A, priorityClass: armada-preemptible, requests: {{cpu: 1}}, submitted: {i}, "
     f"state: running, node: node-1}}" for i in range(1, 5)]
    + [f"  - {{id: a-{i}, queue: A, priorityClass: armada-high, requests: {{cpu: 1}}, submitted: {i}, "
       f"state: running, node: node-1}}" for i in range(5, 9)]
    + [f"  - {{id: b-{i}, queue: B, priorityClass: armada-preemptible, requests: {{cpu: 1}}, submitted: {10 + i}}}"
       for i in range(1, 9)]) + "\n"


def test_fair_share_takes_back_only_the_room_of_equal_or_lower_priority_jobs(tmp_path):
    """armada-scheduler.txt: preemption to fair share only for jobs of equal priority-class priority.

    B's 20000 jobs may take only the room of A's evicted 20000 jobs (4 cores), which A's own 20000 jobs
    want back too; they alternate: a-1, b-1, a-2, b-2, then a-3 finds the rest of that room taken.
    A's four 25000 jobs all stay; before the fix they were the ones preempted (a-5..a-8, B took 4).
    """
    cfg = with_classes()
    assert "armada-high" in cfg
    out = run_once(tmp_path, cfg, EQUAL_PRIORITY_STATE)
    assert placements(out) == {"b-1": "node-1", "b-2": "node-1"}
    assert out["preempted"] == ["a-3", "a-4"]
    assert out["queued"] == [f"b-{i}" for i in range(3, 9)]


def test_higher_priority_jobs_take_back_the_room_of_lower_priority_ones(tmp_path):
    """B's 25000 jobs may take any evicted room; A's own returning 20000 jobs only that of its 20000 jobs.

    Alternating: a-1, b-1, a-2, b-2, then a-3 and a-4 would need the room of A's 25000 jobs, which B
    takes (b-3, b-4) beside a-5 and a-6. Urgency preemption is off so only fair share acts, and so is the
    protected fraction of fair share, which would keep A's 25000 jobs first (tests/actions/test_protected_fair_share.py).
    """
    state = EQUAL_PRIORITY_STATE.replace("queue: B, priorityClass: armada-preemptible", "queue: B, priorityClass: armada-high")
    out = run_once(tmp_path, with_classes("preempt: {enabled: false}\nevict: {protectedFractionOfFairShare: 0}"), state)
    assert placements(out) == {f"b-{i}": "node-1" for i in range(1, 5)}
    assert out["preempted"] == ["a-3", "a-4", "a-7", "a-8"]


def test_third_party_action_from_an_entry_point_runs_in_the_cycle(tmp_path, installed_action):
    # The action runs first and puts B's jobs on node-1; allocate then places a-1 where bestfit says
    # (node-2: unused beats used).
    out = run_once(tmp_path, config(extra="actions: [firstnode, allocate]"), ACTION_STATE)
    assert placements(out) == {"b-1": "node-1", "b-2": "node-1", "a-1": "node-2"}
    from flotilla.actions import available_actions
    assert available_actions() == ["enqueue", "evict", "reserve", "allocate", "preempt", "lease", "firstnode"]


def test_an_action_nobody_installed_is_still_refused(tmp_path):
    from tests.support.scenario import invoke

    result = invoke(tmp_path, config(extra="actions: [backfil, allocate]"), ACTION_STATE)
    assert result.exit_code == 2
    assert "actions[0]: unknown action 'backfil' (known: enqueue, evict, reserve, allocate, preempt, lease)" in result.stderr
