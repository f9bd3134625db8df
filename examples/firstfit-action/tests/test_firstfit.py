"""firstfit in a real cycle, through Flotilla's pytest fixtures (flotilla.testing)."""

import pytest

from flotilla.testing import SetupError

#: node-1 is the big one, first in node order; node-2 is small and tainted, node-3 small.
STATE = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 4}}
      - {name: node-2, resources: {cpu: 2}, taints: [{key: gpu, value: "yes", effect: NoSchedule}]}
      - {name: node-3, resources: {cpu: 2}}
jobs:
  - {id: a-1, queue: A, requests: {cpu: 1}, submitted: 1}
  - {id: a-2, queue: A, requests: {cpu: 2}, submitted: 2}
  - {id: a-3, queue: A, requests: {cpu: 2}, submitted: 3}
  - {id: a-4, queue: A, requests: {cpu: 4}, submitted: 4}
  - {id: b-1, queue: B, requests: {cpu: 1}, submitted: 1}
"""


def config(args: str = "{}") -> str:
    return f"""
queues: [{{name: A}}, {{name: B}}]
actions: [{{name: firstfit, args: {args}}}]
"""


def test_jobs_go_to_the_first_node_that_takes_them(flotilla_cycle):
    result = flotilla_cycle(STATE, config=config())
    # a-1 and a-2 fill node-1 to 1 cpu; a-3 skips the tainted node-2; b-1 takes node-1's last cpu.
    assert result.scheduled == {"a-1": "node-1", "a-2": "node-1", "a-3": "node-3", "b-1": "node-1"}
    assert result.queued == {"a-4": "node node-3: Insufficient cpu"}
    # The refusal's why is what it waits with: its code is kept (words alone would count as other).
    assert result.codes == {"a-4": "insufficient_resources"}


def test_only_the_queues_named_and_at_most_max_jobs(flotilla_cycle):
    result = flotilla_cycle(STATE, config=config("{queues: [B], maxJobs: 1}"))
    assert result.scheduled == {"b-1": "node-1"}


def test_a_typo_in_its_args_is_a_config_error(flotilla_cycle):
    with pytest.raises(SetupError) as refused:
        flotilla_cycle(STATE, config=config("{queue: [A]}"))
    # The config is text here: the message names its line, as flotilla names a file's.
    assert str(refused.value) == \
        "<config>:3: actions[0].args: action 'firstfit': unknown argument(s) queue; expected maxJobs, queues"
