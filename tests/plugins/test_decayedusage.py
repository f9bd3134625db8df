"""``decayedusage``: queue priority as usage decayed with a half-life (armada-design.txt), cycle by cycle.

These tests drive ``Scheduler.run_cycle`` directly on hand-made snapshots at
chosen times, so every number can be checked against the formula
``P' = U + (P - U) * 0.5 ** (dt / priorityHalftime)``.
"""

from __future__ import annotations

import random
import textwrap
from pathlib import Path

import pytest

from flotilla.config import parse_config
from flotilla.contrib.decayedusage import DecayedUsage
from flotilla.scheduler import Scheduler
from flotilla.core.model import ClusterSnapshot, Job, JobState, Node, Snapshot

from tests.support.scenario import config as scenario_config, run_once

PREEMPTIBLE = "armada-preemptible"
CPU = {"cpu": 1000}


def make_scheduler(args: str = "{priorityHalftime: 1h}", queues: str = "[{name: A}, {name: B}]") -> Scheduler:
    text = textwrap.dedent(f"""\
        plugins:
          - {{name: decayedusage, args: {args}}}
          - name: bestfit
          - name: gang
          - name: priorityclass
          - name: predicates
        queues: {queues}
        """)
    return Scheduler(parse_config(text, "test.yaml"), actions=["evict", "allocate", "preempt"])


def nodes():
    return [Node(f"node-{i}", "c1", {"cpu": 32000}) for i in (1, 2)]


def snapshot(scheduler, now, running=(), queued=(), queues=None):
    cluster = ClusterSnapshot("c1", nodes(), list(running))
    return Snapshot([cluster], list(queued), queues or scheduler.queues(), scheduler.priority_classes(),
                    "armada-default", now=now)


def running_jobs(queue, n, pc="armada-default"):
    return [Job(f"{queue}-r{i}", queue, priority_class=pc, requests=CPU, state=JobState.RUNNING, cluster="c1",
                node="node-1" if i < 32 else "node-2") for i in range(n)]


def queued_jobs(queue, n, pc="armada-default", submitted=0.0):
    return [Job(f"{queue}-{i:03d}", queue, priority_class=pc, requests=CPU, submitted=submitted) for i in range(n)]


def plugin_of(scheduler) -> DecayedUsage:
    return next(p for p in scheduler.pm.get_plugins() if isinstance(p, DecayedUsage))


def placed(decisions):
    out = {"A": 0, "B": 0}
    for p in decisions.scheduled:
        out[p.job.queue] += 1
    return out


def test_formula_follows_the_design_text():
    plugin = DecayedUsage({"priorityHalftime": "1h"})
    plugin.priority, plugin.usage, plugin.updated = {"A": 0.2}, {"A": 1.0}, 0.0
    assert plugin.priorities_at(0)["A"] == pytest.approx(0.2)
    # After one half-time, half-way from 0.2 to 1: A + (B - A) / 2 = 0.6.
    assert plugin.priorities_at(3600)["A"] == pytest.approx(0.6)
    # After two: 1 + (0.2 - 1) * 0.25 = 0.8. (armada-overview.txt's version, P (1 - beta) + U beta, gives
    # 0.2 * 0.75 + 1 * 0.25 = 0.4 here; the two agree only at dt = halftime. We follow the design text.)
    assert plugin.priorities_at(7200)["A"] == pytest.approx(0.8)
    # Updates compose: decaying 1 s then 3599 s is decaying 3600 s when the usage does not change.
    plugin.priority = plugin.priorities_at(1)
    plugin.updated = 1
    assert plugin.priorities_at(3600)["A"] == pytest.approx(0.6, abs=1e-12)


@pytest.mark.parametrize("args, message", [
    ({"priorityHalftime": "soon"}, "priorityHalftime: expected a duration"),
    ({"priorityHalftime": 0}, "priorityHalftime must be a positive duration"),
    ({"halftime": "1h"}, "unknown argument(s) halftime"),
    ({"resourceWeights": {"cpu": -1}}, "resourceWeights.cpu must be a finite, non-negative number"),
    ({"resourceWeights": {"cpu": float("nan")}}, "resourceWeights.cpu must be a finite, non-negative number"),
])
def test_bad_args(args, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        DecayedUsage(args)


def test_no_history_behaves_like_assetfairness(tmp_path):
    # One cycle from scratch: every priority is 0, the cost is the plain share: the seed example
    # (schedule-once on examples/two-queues.yaml) decides exactly as with assetfairness.
    state_text = (Path(__file__).resolve().parents[2] / "examples" / "two-queues.yaml").read_text()
    outs = []
    for plugin in ("assetfairness", "decayedusage"):
        cfg = scenario_config(plugins=f"plugins:\n  - name: {plugin}\n  - name: bestfit\n  - name: gang\n"
                                      "  - name: priorityclass\n  - name: predicates\n")
        outs.append(run_once(tmp_path, cfg, state_text))
    assert outs[0] == outs[1]
    assert len(outs[1]["preempted"]) == 8


def test_a_queue_that_used_the_pool_is_held_back_by_its_decayed_usage():
    scheduler = make_scheduler()
    # t=0: A holds the whole 64-core pool (non-preemptible, so evict leaves it alone).
    scheduler.run_cycle(snapshot(scheduler, 0, running=running_jobs("A", 64)), random.Random(0))
    plugin = plugin_of(scheduler)
    assert plugin.usage == {"A": 1.0} and plugin.priority == {} and plugin.updated == 0
    # t=1h: A's jobs are gone; A and B both have 100 one-core jobs waiting.
    decisions = scheduler.run_cycle(
        snapshot(scheduler, 3600, queued=queued_jobs("A", 100) + queued_jobs("B", 100)), random.Random(0))
    # P_A(1h) = 1 + (0 - 1) * 0.5 ** (3600 / 3600) = 0.5. Allocate serves the smaller of
    # 0.5 + (a + 1)/64 and (b + 1)/64 until 64 cores are placed: a = 16, b = 48 (0.5 + 16/64 = 48/64).
    assert plugin.priority["A"] == pytest.approx(0.5, abs=1e-12)
    assert placed(decisions) == {"A": 16, "B": 48}
    # After this cycle A holds a quarter, B three quarters: that is the usage they now decay towards.
    assert plugin.usage == {"A": 0.25, "B": 0.75}
    # The share reported is what the queues hold, measured by the core, not the policy's cost.
    assert decisions.queues["A"].share == 0.25
    assert decisions.queues["B"].share == 0.75


def test_the_priority_factor_is_the_inverse_of_the_weight():
    # A (weight 2) with P_A = 0.5 and B (weight 1) with no history: allocate orders by cost / fair share,
    # i.e. (0.5 + a/64) / (2/3) against (b/64) / (1/3): equal when 32 + a = 2b, so with 64 cores
    # a = b = 32: A's history exactly cancels its double weight.
    scheduler = make_scheduler(queues="[{name: A, weight: 2}, {name: B, weight: 1}]")
    scheduler.run_cycle(snapshot(scheduler, 0, running=running_jobs("A", 64)), random.Random(0))
    decisions = scheduler.run_cycle(
        snapshot(scheduler, 3600, queued=queued_jobs("A", 100) + queued_jobs("B", 100)), random.Random(0))
    assert placed(decisions) == {"A": 32, "B": 32}


def test_usage_between_cycles_is_the_allocation_after_the_earlier_cycle():
    scheduler = make_scheduler("{priorityHalftime: 10m}")
    plugin = plugin_of(scheduler)
    # t=0: B gets 16 cores (its queued jobs are placed by this cycle).
    scheduler.run_cycle(snapshot(scheduler, 0, queued=queued_jobs("B", 16)), random.Random(0))
    assert plugin.usage == {"B": 0.25}
    # t=20m, B still running its 16: P_B = 0.25 + (0 - 0.25) * 0.5 ** 2 = 0.1875.
    running = [Job(f"B-{i:03d}", "B", priority_class="armada-default", requests=CPU, state=JobState.RUNNING,
                   cluster="c1", node="node-1") for i in range(16)]
    scheduler.run_cycle(snapshot(scheduler, 1200, running=running), random.Random(0))
    assert plugin.priority["B"] == pytest.approx(0.1875)
    # t=30m, nothing running any more since 20m: P_B = 0.25 + (0.1875 - 0.25) * 0.5 = 0.21875, usage now 0.
    scheduler.run_cycle(snapshot(scheduler, 1800), random.Random(0))
    assert plugin.priority["B"] == pytest.approx(0.21875)
    assert plugin.usage == {}
    # t=40m: decays towards 0: 0.21875 / 2.
    scheduler.run_cycle(snapshot(scheduler, 2400), random.Random(0))
    assert plugin.priority["B"] == pytest.approx(0.109375)


def test_queue_limits_still_apply():
    scheduler = make_scheduler(queues="[{name: A, limits: {cpu: 0.25}}, {name: B}]")
    decisions = scheduler.run_cycle(snapshot(scheduler, 0, queued=queued_jobs("A", 40)), random.Random(0))
    assert placed(decisions) == {"A": 16, "B": 0}
    assert "at its cpu limit" in decisions.reasons["A-016"]
