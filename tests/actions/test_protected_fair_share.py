"""Protected fair share (``evict.protectedFractionOfFairShare``): preemption to fair share has a floor.

A queue at or below the fraction of its fair share keeps every job (Armada's rule); a queue above it loses at
most what leaves it at that floor (Volcano's reclaim rule), the rest of its evicted jobs staying on their nodes.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.support.scenario import config, run_once

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
STATE = (EXAMPLES / "policies" / "protected-fair-share-state.yaml").read_text()


def cycle(config_yaml: str | None, state_yaml: str):
    """One cycle through the Scheduler, for its counters as well as its decisions."""
    from flotilla.config import load_config, parse_config, parse_state
    from flotilla.scheduler import Scheduler

    cfg = parse_config(config_yaml, "c.yaml") if config_yaml is not None else load_config(None)
    return Scheduler(cfg).run_cycle(parse_state(textwrap.dedent(state_yaml), "s.yaml", cfg))


def test_a_small_job_no_longer_evicts_the_only_job_of_a_queue_it_would_leave_at_nothing():
    """The default config: A's 3-core preemptible job waits; B keeps its 20-core job; nothing is evicted."""
    decisions = cycle(None, STATE)
    assert decisions.scheduled == [] and decisions.preempted == []
    assert decisions.reasons == {"a-2": "0/1 nodes are available: 1 Insufficient cpu"}
    assert (decisions.counters.get("evicted", 0), decisions.counters.get("protected", 0)) == (0, 1)
    assert {name: q.allocated for name, q in decisions.queues.items()} == {"A": {"cpu": "10"}, "B": {"cpu": "20"}}


def test_without_the_floor_the_small_job_takes_the_big_jobs_room(tmp_path):
    out = run_once(tmp_path, config(extra="evict: {protectedFractionOfFairShare: 0}"), STATE)
    assert out["scheduled"] == [{"job": "a-2", "cluster": "sim", "node": "node-1"}]
    assert out["preempted"] == ["b-1"]
    assert out["queues"]["B"]["share"] == 0.0


TWO_OF_B = """
clusters:
  - name: sim
    nodes:
      - {name: node-1, resources: {cpu: 32}}
jobs:
  - {id: a-1, queue: A, requests: {cpu: 2}, submitted: 1, state: running, node: node-1}
  - {id: b-1, queue: B, priorityClass: armada-preemptible, requests: {cpu: 10}, submitted: 2, state: running, node: node-1}
  - {id: b-2, queue: B, priorityClass: armada-preemptible, requests: {cpu: 10}, submitted: 3, state: running, node: node-1}
  - {id: a-2, queue: A, priorityClass: armada-preemptible, requests: {cpu: 11}, submitted: 4}
"""


@pytest.mark.parametrize("fraction, scheduled, preempted, protected", [
    # B's floor is 16 cores: losing either job would leave it at 10, so it keeps both.
    (1, [], [], 2),
    # B's floor is 8 cores: it keeps b-1, the first it would take back; b-2 makes room for a-2.
    (0.5, ["a-2"], ["b-2"], 1),
    (0, ["a-2"], ["b-2"], 0),
])
def test_a_queue_above_its_floor_loses_at_most_what_leaves_it_there(fraction, scheduled, preempted, protected):
    decisions = cycle(config(extra=f"evict: {{protectedFractionOfFairShare: {fraction}}}"), TWO_OF_B)
    assert [p.job.id for p in decisions.scheduled] == scheduled
    assert [j.id for j in decisions.preempted] == preempted
    assert decisions.counters.get("protected", 0) == protected


def test_the_seed_example_is_unchanged_and_a_keeps_its_first_32_from_the_start():
    decisions = cycle(None, (EXAMPLES / "two-queues.yaml").read_text())
    assert [(p.job.id, p.node) for p in decisions.scheduled] == [(f"b-{i}", "node-2") for i in range(1, 33)]
    assert [j.id for j in decisions.preempted] == [f"a-{i}" for i in range(33, 41)]
    assert {name: q.allocated for name, q in decisions.queues.items()} == {"A": {"cpu": "32"}, "B": {"cpu": "32"}}
    # A (40 cores, fair share 32) takes back a-1..a-32 and only a-33..a-40 are evicted.
    assert (decisions.counters.get("evicted", 0), decisions.counters.get("protected", 0)) == (8, 32)


def test_with_the_floor_even_packing_that_ignores_queues_keeps_b_off_as_nodes(tmp_path):
    """Without bestfit, B's jobs would spill onto node-1 (test_seed_examples); a-1..a-32 are not evicted there."""
    plugins = """
    plugins:
      - name: assetfairness
      - name: gang
      - name: priorityclass
      - name: predicates
    """
    out = run_once(tmp_path, config(plugins=plugins), (EXAMPLES / "two-queues.yaml").read_text())
    assert {p["node"] for p in out["scheduled"]} == {"node-2"} and len(out["scheduled"]) == 32
    assert out["preempted"] == [f"a-{i}" for i in range(33, 41)]


THREE_CLASSES_STATE = """
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
    + [f"  - {{id: b-{i}, queue: B, priorityClass: {{pc}}, requests: {{cpu: 1}}, submitted: {10 + i}}}"
       for i in range(1, 9)]) + "\n"


def three_classes() -> str:
    return config(extra="preempt: {enabled: false}").replace(
        "  - {name: armada-preemptible, priority: 20000, preemptible: true}\n",
        "  - {name: armada-high, priority: 25000, preemptible: true}\n"
        "  - {name: armada-preemptible, priority: 20000, preemptible: true}\n")


def test_a_queue_keeps_its_higher_class_jobs_first(tmp_path):
    """A (8 cores, fair share 4) keeps its four 25000 jobs; B's 25000 jobs take the room of A's 20000 ones."""
    out = run_once(tmp_path, three_classes(), THREE_CLASSES_STATE.replace("{pc}", "armada-high"))
    assert [p["job"] for p in out["scheduled"]] == ["b-1", "b-2", "b-3", "b-4"]
    assert out["preempted"] == ["a-1", "a-2", "a-3", "a-4"]


def test_jobs_no_other_queue_could_displace_count_as_kept(tmp_path):
    """B's jobs are 20000: A's 25000 jobs return for certain, so A (at its floor with them) keeps back nothing
    and loses two of its 20000 jobs as without the floor (test_policy_fixes)."""
    out = run_once(tmp_path, three_classes(), THREE_CLASSES_STATE.replace("{pc}", "armada-preemptible"))
    assert [p["job"] for p in out["scheduled"]] == ["b-1", "b-2"]
    assert out["preempted"] == ["a-3", "a-4"]


GANG = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 16}}
      - {name: node-2, resources: {cpu: 16}}
jobs:
  - {id: a-1, queue: A, requests: {cpu: 6}, submitted: 1, state: running, node: node-1}
  - {id: b-1, queue: B, priorityClass: armada-preemptible, requests: {cpu: 10}, gang: {id: g, cardinality: 2}, submitted: 2, state: running, node: node-1}
  - {id: b-2, queue: B, priorityClass: armada-preemptible, requests: {cpu: 10}, gang: {id: g, cardinality: 2}, submitted: 2, state: running, node: node-2}
  - {id: a-2, queue: A, priorityClass: armada-preemptible, requests: {cpu: 8}, submitted: 3}
"""


@pytest.mark.parametrize("fraction, scheduled, preempted, protected", [
    (1, [], [], 2),          # B (20 cores, floor 16) takes its gang back whole
    (0, ["a-2"], ["b-1", "b-2"], 0),
])
def test_a_gang_is_taken_back_whole(fraction, scheduled, preempted, protected):
    decisions = cycle(config(extra=f"evict: {{protectedFractionOfFairShare: {fraction}}}"), GANG)
    assert [p.job.id for p in decisions.scheduled] == scheduled
    assert [j.id for j in decisions.preempted] == preempted
    assert decisions.counters.get("protected", 0) == protected


def test_a_queue_at_its_fair_share_is_not_evicted():
    """B holds exactly its fair share (16 of 32): none of its 16 jobs is evicted, as Armada's rule says."""
    state = textwrap.dedent("""
        clusters:
          - name: c1
            nodes:
              - {name: node-1, resources: {cpu: 32}}
        jobs:
          - {id: a-1, queue: A, requests: {cpu: 16}, submitted: 1, state: running, node: node-1}
          - {id: a-2, queue: A, priorityClass: armada-preemptible, requests: {cpu: 1}, submitted: 2}
        """) + "".join(f"  - {{id: b-{i}, queue: B, priorityClass: armada-preemptible, requests: {{cpu: 1}}, "
                       f"submitted: {2 + i}, state: running, node: node-1}}\n" for i in range(1, 17))
    decisions = cycle(None, state)
    assert (decisions.counters.get("evicted", 0), decisions.counters.get("protected", 0)) == (0, 16)
    assert decisions.scheduled == [] and decisions.preempted == []


@pytest.mark.parametrize("value, message", [
    ("-0.5", "evict.protectedFractionOfFairShare: Input should be greater than or equal to 0"),
    ("11", "evict.protectedFractionOfFairShare: Input should be less than or equal to 10"),
])
def test_the_fraction_is_bounded(tmp_path, value, message):
    from tests.support.scenario import invoke

    result = invoke(tmp_path, config(extra=f"evict: {{protectedFractionOfFairShare: {value}}}"), STATE)
    assert result.exit_code == 2
    assert message in result.stderr


def test_the_policies_guide_examples_run_as_written_with_the_outcomes_it_states(tmp_path, monkeypatch):
    import json

    from click.testing import CliRunner

    from tests.support.docs import commands, run_documented, section
    from flotilla.scheduler_main import main

    text = section("policies.md", "Protected fair share")
    once, simulate = commands(text)
    assert once == ["schedule-once", "--state", "examples/policies/protected-fair-share-state.yaml"]
    out = run_documented(once)
    assert (out["scheduled"], out["preempted"]) == ([], [])
    assert out["reasons"] == {"a-2": "0/1 nodes are available: 1 Insufficient cpu"}
    assert out["queues"]["B"]["share"] == 0.625
    monkeypatch.chdir(ROOT)
    assert "`a-2` waits\nwith `0/1 nodes are available: 1 Insufficient cpu`" in text

    # The table's two rows: the example's config as written, then with the floor off.
    floor_off = tmp_path / "floor-off.yaml"
    floor_off.write_text((EXAMPLES / "policies" / "protected-fair-share.yaml").read_text().replace(
        "protectedFractionOfFairShare: 1", "protectedFractionOfFairShare: 0"))
    rows = []
    for args in (simulate, [a if a != "examples/policies/protected-fair-share.yaml" else str(floor_off)
                            for a in simulate]):
        report_file = tmp_path / "report.json"
        result = CliRunner().invoke(main, [*args, "--quiet", "--json", str(report_file)])
        assert result.exit_code == 0, result.output
        report = json.loads(report_file.read_text())
        b = report["queues"]["B"]
        rows.append(f"| {report['utilisation']:.1%} | {b['meanShare']:g} | {b['preemptions']} |")
    assert rows == ["| 93.8% | 0.625 | 0 |", "| 67.2% | 0.3125 | 1 |"]
    assert f"| `protectedFractionOfFairShare: 1` {rows[0]}" in text
    assert f"| `protectedFractionOfFairShare: 0` {rows[1]}" in text


def gang_and_singles(order: list[str]) -> str:
    """One 24-core node, all of it B's: a gang of three 6-core members and six 1-core jobs, submitted in ``order``;
    A has twelve 1-core jobs waiting. Fair shares 12 and 12."""
    lines = {f"g-{i}": f"{{id: g-{i}, queue: B, priorityClass: armada-preemptible, requests: {{cpu: 6}}, "
                       f"gang: {{id: g, cardinality: 3}}" for i in range(1, 4)}
    lines.update({f"s-{i}": f"{{id: s-{i}, queue: B, priorityClass: armada-preemptible, requests: {{cpu: 1}}"
                  for i in range(1, 7)})
    running = "".join(f"  - {lines[job]}, submitted: {n}, state: running, node: node-1}}\n"
                      for n, job in enumerate(order, start=1))
    queued = "".join(f"  - {{id: a-{i}, queue: A, priorityClass: armada-preemptible, requests: {{cpu: 1}}, "
                     f"submitted: {100 + i}}}\n" for i in range(1, 13))
    return "clusters:\n  - name: c1\n    nodes:\n      - {name: node-1, resources: {cpu: 24}}\njobs:\n" + running + queued


GANG_FIRST = ["g-1", "g-2", "g-3", "s-1", "s-2", "s-3", "s-4", "s-5", "s-6"]


@pytest.mark.parametrize("order", [GANG_FIRST, GANG_FIRST[3:] + GANG_FIRST[:3],
                                   ["s-6", "g-3", "s-1", "g-1", "s-4", "s-2", "g-2", "s-5", "s-3"]],
                         ids=["gang first", "singles first", "shuffled"])
def test_the_floor_takes_the_same_victims_whatever_the_submission_order(order):
    # B (24 cores, floor 12) is weighed largest unit first: without the gang (18) it would hold 6, below its floor,
    # so the gang stays; each single leaves it at or above 12, so all six go: A gets 6, in every order.
    decisions = cycle(config(), gang_and_singles(order))
    assert [j.id for j in decisions.preempted] == [f"s-{i}" for i in range(1, 7)]
    assert [p.job.id for p in decisions.scheduled] == [f"a-{i}" for i in range(1, 7)]
    assert {name: q.share for name, q in decisions.queues.items()} == {"A": 0.25, "B": 0.75}
    assert decisions.counters.get("protected", 0) == 3


@pytest.mark.parametrize("queues, preempted", [
    # B's own floor of 0.5 (8 cores) in place of the global 1: as the global 0.5 above.
    ("queues: [{name: A}, {name: B, protectedFractionOfFairShare: 0.5}]", ["b-2"]),
    # A's own floor says nothing of B's: B keeps the global floor of 1 and both its jobs.
    ("queues: [{name: A, protectedFractionOfFairShare: 0}, {name: B}]", []),
    # The global floor off, B's own at 1: B keeps both.
    ("queues: [{name: A}, {name: B, protectedFractionOfFairShare: 1}]\nevict: {protectedFractionOfFairShare: 0}", []),
])
def test_a_queue_may_set_its_own_floor(queues, preempted):
    decisions = cycle(config(queues=queues), TWO_OF_B)
    assert [j.id for j in decisions.preempted] == preempted


RECLAIM_ORDER = '''
from flotilla.plugin import hookimpl, take_args


class OldestFirst:
    """Reclaims the jobs submitted first, first (a policy's own victim order)."""

    def __init__(self, args):
        take_args(args)

    @hookimpl
    def flotilla_session_open(self, session):
        session.add_reclaim_order(lambda job: (job.submitted,))
'''


def test_a_reclaim_order_plugin_ranks_the_victims(tmp_path, monkeypatch):
    from tests.support.scenario import install_distribution

    install_distribution(tmp_path / "site", "oldestfirst_order", RECLAIM_ORDER, "flotilla.plugins",
                         "oldestfirst = oldestfirst_order:OldestFirst")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    plugins = "plugins:\n  - name: assetfairness\n  - name: bestfit\n  - name: gang\n  - name: priorityclass\n"
    extra = "evict: {protectedFractionOfFairShare: 0.5}"
    # Without it: b-2 goes (equal size, the highest id first); with it, b-1, submitted first.
    assert cycle(config(plugins=plugins, extra=extra), TWO_OF_B).preempted[0].id == "b-2"
    decisions = cycle(config(plugins=plugins + "  - name: oldestfirst\n", extra=extra), TWO_OF_B)
    assert [j.id for j in decisions.preempted] == ["b-1"]
    assert [p.job.id for p in decisions.scheduled] == ["a-2"]


def _random_state(rng) -> tuple[str, list[str]]:
    """A random cluster: running jobs of two priority classes and four sizes on up to six nodes, some queued."""
    nodes = rng.randint(1, 6)
    queues = ["A", "B", "C", "D"][:rng.randint(2, 4)]
    lines = ["clusters:", "  - name: sim", "    nodes:"]
    lines += [f"      - {{name: node-{i}, resources: {{cpu: {rng.choice([8, 16, 32])}}}}}" for i in range(nodes)]
    lines.append("jobs:")
    n = 0
    for i in range(nodes):
        for _ in range(rng.randint(0, 6)):
            n += 1
            queue, pc = rng.choice(queues), rng.choice(["armada-preemptible", "armada-preemptible", "armada-default"])
            lines.append(f"  - {{id: {queue.lower()}-{rng.randint(1, 40)}-{n}, queue: {queue}, priorityClass: {pc}, "
                         f"requests: {{cpu: {rng.choice([1, 2, 3, 4])}}}, submitted: {n}, state: running, node: node-{i}}}")
    for _ in range(rng.randint(1, 10)):
        n += 1
        queue, pc = rng.choice(queues), rng.choice(["armada-preemptible", "armada-default"])
        lines.append(f"  - {{id: {queue.lower()}-{n}, queue: {queue}, priorityClass: {pc}, "
                     f"requests: {{cpu: {rng.choice([1, 2, 4, 8])}}}, submitted: {n}}}")
    return "\n".join(lines) + "\n", queues


def test_the_floor_of_one_job_units_weighs_as_the_general_path_does(monkeypatch):
    """Without reclaim plugins or gangs, evict weighs one-job units in a path of its own; on random clusters it
    evicts, protects and places exactly what the general path (units, then the victim order) does."""
    import random

    import flotilla.actions.evict as evict

    own_path, answered = evict._protect_one_job_units, []

    def counted(*args):
        kept = own_path(*args)
        answered.append(kept is not None)
        return kept
    protected = 0
    for seed in range(60):
        rng = random.Random(seed)
        state, queues = _random_state(rng)
        weights = "".join(f"\n  - {{name: {q}, weight: {rng.choice([1, 2, 3])}}}" for q in queues)
        config_yaml = (f"evict: {{probability: 1.0, protectedFractionOfFairShare: {rng.choice([0.25, 0.5, 1, 1.5])}}}"
                       f"\nqueues:{weights}\n")
        outcomes = []
        for path in (counted, lambda *args: None):
            monkeypatch.setattr(evict, "_protect_one_job_units", path)
            decisions = cycle(config_yaml, state)
            outcomes.append((sorted((p.job.id, p.node) for p in decisions.scheduled),
                             sorted(j.id for j in decisions.preempted), decisions.counters.get("protected", 0),
                             decisions.counters.get("evicted", 0)))
        assert outcomes[0] == outcomes[1], seed
        protected += outcomes[0][2] > 0
    # The floor took jobs back in most of them, and the path of its own answered every time it was asked.
    assert protected >= 50 and answered and all(answered)
