"""nominalquota in real cycles, through Flotilla's pytest fixtures (flotilla.testing): exact victims."""

import pytest

from flotilla.testing import SetupError

BUILT_INS = ["assetfairness", "bestfit", "gang", "priorityclass"]


def state(a_running: int, b_queued: int) -> str:
    """One 32-core node; queue A runs ``a_running`` one-core preemptible jobs, B has ``b_queued`` waiting."""
    running = "".join(f"  - {{id: a-{i}, queue: A, priorityClass: armada-preemptible, requests: {{cpu: 1}}, "
                      f"submitted: {i}, state: running, node: node-1}}\n" for i in range(1, a_running + 1))
    queued = "".join(f"  - {{id: b-{i}, queue: B, priorityClass: armada-preemptible, requests: {{cpu: 1}}, "
                     f"submitted: {100 + i}}}\n" for i in range(1, b_queued + 1))
    return "clusters:\n  - name: c1\n    nodes:\n      - {name: node-1, resources: {cpu: 32}}\njobs:\n" + running + queued


def quota(cpu: float) -> dict:
    return {"name": "nominalquota", "args": {"quotas": {"A": {"cpu": cpu}}}}


def test_without_the_policy_a_is_reclaimed_to_its_fair_share(flotilla_cycle):
    result = flotilla_cycle(state(20, 16), plugins=BUILT_INS)
    assert result.preempted == ["a-17", "a-18", "a-19", "a-20"]
    assert result.scheduled == {f"b-{i}": "node-1" for i in range(1, 17)}
    assert result.shares == {"A": 0.5, "B": 0.5}


def test_a_queue_within_its_nominal_quota_is_never_reclaimed_below_it(flotilla_cycle):
    # A runs 20 cores, its quota: nothing of it is reclaimed; B takes the 12 free cores only.
    result = flotilla_cycle(state(20, 16), plugins=BUILT_INS + [quota(20)])
    assert result.preempted == []
    assert result.scheduled == {f"b-{i}": "node-1" for i in range(1, 13)}
    assert result.shares == {"A": 0.625, "B": 0.375}


def test_a_queue_above_its_nominal_quota_is_reclaimed_down_to_it(flotilla_cycle):
    # The core's floor off: the quota alone protects. B weighs 3, so A's fair share is 8 cores; A runs 24 with a
    # quota of 12: it loses 12 (the highest ids), not 16.
    config = {"queues": [{"name": "A"}, {"name": "B", "weight": 3}], "evict": {"protectedFractionOfFairShare": 0}}
    result = flotilla_cycle(state(24, 24), plugins=BUILT_INS + [quota(12)], config=config)
    assert result.preempted == [f"a-{i}" for i in range(13, 25)]
    assert result.scheduled == {f"b-{i}": "node-1" for i in range(1, 21)}
    assert result.shares == {"A": 0.375, "B": 0.625}
    # Without the quota, A goes down to its fair share.
    result = flotilla_cycle(state(24, 24), plugins=BUILT_INS, config=config)
    assert result.preempted == [f"a-{i}" for i in range(9, 25)]
    assert result.shares == {"A": 0.25, "B": 0.75}


def test_with_the_cores_floor_too_both_must_agree(flotilla_cycle):
    # The core keeps A at its fair share (16), above its quota of 12: A loses 8, not 12.
    result = flotilla_cycle(state(24, 20), plugins=BUILT_INS + [quota(12)])
    assert result.preempted == [f"a-{i}" for i in range(17, 25)]
    assert result.shares == {"A": 0.5, "B": 0.5}


@pytest.mark.parametrize("quotas, message", [
    ({"A": {"cpu": -1}}, "quotas.A.cpu must be a finite, non-negative number, got -1"),
    ({"A": 4}, "quotas.A must map resource names to amounts, got 4"),
])
def test_a_bad_quota_is_a_config_error(flotilla_cycle, quotas, message):
    with pytest.raises(SetupError, match=message):
        flotilla_cycle(state(1, 0), plugins=BUILT_INS + [{"name": "nominalquota", "args": {"quotas": quotas}}])
