"""jobcap in a real cycle and a short simulation, through Flotilla's pytest fixtures (flotilla.testing)."""

import pytest

from flotilla.testing import SetupError

#: One 8-core node; queue A already runs a-0; four more of A and four of B wait.
STATE = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 8}}
jobs:
  - {id: a-0, queue: A, requests: {cpu: 1}, state: running, node: node-1}
  - {id: a-1, queue: A, requests: {cpu: 1}, submitted: 1}
  - {id: a-2, queue: A, requests: {cpu: 1}, submitted: 2}
  - {id: a-3, queue: A, requests: {cpu: 1}, submitted: 3}
  - {id: a-4, queue: A, requests: {cpu: 1}, submitted: 4}
  - {id: b-1, queue: B, requests: {cpu: 1}, submitted: 1}
  - {id: b-2, queue: B, requests: {cpu: 1}, submitted: 2}
  - {id: b-3, queue: B, requests: {cpu: 1}, submitted: 3}
  - {id: b-4, queue: B, requests: {cpu: 1}, submitted: 4}
"""

BUILT_INS = ["assetfairness", "bestfit", "gang", "priorityclass", "predicates"]


def test_running_jobs_are_capped_per_queue(flotilla_cycle):
    result = flotilla_cycle(STATE, plugins=BUILT_INS + [{"name": "jobcap", "args": {"maxRunning": 3,
                                                                                      "perQueue": {"B": 1}}}])
    # A runs a-0 already: two more; B one. The rest wait with jobcap's reason.
    assert result.scheduled == {"a-1": "node-1", "a-2": "node-1", "b-1": "node-1"}
    assert result.preempted == []
    assert result.queued == {
        "a-3": "queue A runs its 3 jobs (jobcap)",
        "a-4": "queue A runs its 3 jobs (jobcap)",
        "b-2": "queue B runs its 1 jobs (jobcap)",
        "b-3": "queue B runs its 1 jobs (jobcap)",
        "b-4": "queue B runs its 1 jobs (jobcap)",
    }
    assert result.shares == {"A": 0.375, "B": 0.125}


def test_without_a_cap_for_the_queue_nothing_is_held_back(flotilla_cycle):
    result = flotilla_cycle(STATE, plugins=BUILT_INS + [{"name": "jobcap", "args": {"perQueue": {"A": 1}}}])
    assert result.scheduled == {"b-1": "node-1", "b-2": "node-1", "b-3": "node-1", "b-4": "node-1"}
    assert result.queued == {f"a-{i}": "queue A runs its 1 jobs (jobcap)" for i in range(1, 5)}


def test_a_typo_in_its_args_is_a_config_error(flotilla_cycle):
    with pytest.raises(SetupError) as refused:
        flotilla_cycle(STATE, plugins=BUILT_INS + [{"name": "jobcap", "args": {"maxRuning": 3}}])
    assert str(refused.value) == \
        "plugins[5].args: plugin 'jobcap': unknown argument(s) maxRuning; expected maxRunning, perQueue"


def test_a_cap_must_be_a_whole_number(flotilla_cycle):
    with pytest.raises(SetupError) as refused:
        flotilla_cycle(STATE, plugins=BUILT_INS + [{"name": "jobcap", "args": {"perQueue": {"A": 1.5}}}])
    assert str(refused.value) == "plugins[5].args: plugin 'jobcap': perQueue.A must be a whole number, got 1.5"


def test_the_cap_holds_through_a_simulation(flotilla_simulate):
    # The built-in default cluster (two 32-core nodes); 6 one-core jobs of A, 10 minutes each, at most 4 at once.
    result = flotilla_simulate("""
        submissions:
          - {at: 0s, queue: A, count: 6, requests: {cpu: 1}, duration: 10m}
        """, plugins=BUILT_INS + [{"name": "jobcap", "args": {"maxRunning": 4}}])
    assert [(cycle.time, sorted(cycle.scheduled), cycle.preempted) for cycle in result.cycles] == [
        (0.0, ["A-1", "A-2", "A-3", "A-4"], []),
        (600.0, ["A-5", "A-6"], []),
    ]
    assert result.queues["A"]["finished"] == 6
    assert result.queues["A"]["waitMean"] == 200
