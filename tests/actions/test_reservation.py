"""Reservation and backfill: a 64-core gang behind a steady stream of 1-core jobs, a simulated day."""

from __future__ import annotations

import pytest

from tests.support.simulate import config_yaml, setup, simulate

NODES = "- {count: 4, namePrefix: node, resources: {cpu: 32, memory: 128Gi}}"
QUEUES = "[{name: stream, weight: 1}, {name: fill, weight: 1}, {name: big, weight: 1}]"
# The stream: 13 one-core jobs every 2 minutes, 20 minutes each (130 cores wanted, 128 there), all day.
# Backfill: preemptible one-core jobs of an hour, 4 every 10 minutes. The gang: two 32-core jobs at 30 minutes,
# when the stream has filled the pool.
WORKLOAD = """
submissions:
  - {at: 0s, queue: stream, count: 13, requests: {cpu: 1}, duration: 20m, every: 2m, times: 720}
  - {at: 0s, queue: fill, count: 4, priorityClass: armada-preemptible, requests: {cpu: 1}, duration: 1h,
     every: 10m, times: 144}
  - {at: 30m, queue: big, count: 2, requests: {cpu: 32}, duration: 30m, gang: {cardinality: 2}}
"""
ARRIVAL = 30 * 60
# Only reservation and backfill at work: no preemption to fair share, no urgency preemption (the stream's
# jobs would displace the backfill jobs, and that is another policy).
FIXED = "evict: {probability: 0}\npreempt: {enabled: false}\n"


def run(tmp_path, extra: str, actions: str = "[evict, allocate, preempt, lease]"):
    text = config_yaml(queues=QUEUES, nodes=NODES, extra=extra).replace(
        "actions: [evict, allocate, preempt, lease]", f"actions: {actions}")
    config, workload = setup(tmp_path, text, WORKLOAD)
    return simulate(config, workload)


def gang_start(watch):
    for t, decisions, _, _ in watch.cycles:
        started = [p for p in decisions.scheduled if p.job.queue == "big"]
        if started:
            return t, started, decisions
    return None, [], None


def test_without_reservation_the_gang_never_starts(tmp_path):
    _, report, watch = run(tmp_path, FIXED)
    # Not all day: only when the stream has stopped (its last jobs arrive at 23:58 and end 20 minutes later).
    t, started, _ = gang_start(watch)
    assert t > 86400


def test_with_reservation_it_starts_within_thirty_minutes_and_backfill_is_preempted(tmp_path):
    _, report, watch = run(tmp_path, FIXED + "reservation: {after: 10m}\n",
                           "[evict, reserve, allocate, preempt, lease]")
    t, started, decisions = gang_start(watch)
    assert t is not None and t - ARRIVAL <= 35 * 60   # reserved 10m after it arrived; its nodes drain in 20m
    nodes = {p.node for p in started}
    assert len(nodes) == 2
    preempted = decisions.preempted
    assert preempted and all(job.queue == "fill" and job.node in nodes for job in preempted)
    assert report["queues"]["big"]["finished"] == 2


STATE = """
now: 3600
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 32}}
      - {name: node-2, resources: {cpu: 32}}
      - {name: node-3, resources: {cpu: 32}}
jobs:
  - {id: d-1, queue: S, requests: {cpu: 8}, state: running, node: node-1}
  - {id: d-2, queue: S, requests: {cpu: 4}, state: running, node: node-2}
  - {id: d-3, queue: S, requests: {cpu: 30}, state: running, node: node-3}
  - {id: g-1, queue: G, requests: {cpu: 32}, gang: {id: g, cardinality: 2}, submitted: 0}
  - {id: g-2, queue: G, requests: {cpu: 32}, gang: {id: g, cardinality: 2}, submitted: 0}
  - {id: s-1, queue: S, requests: {cpu: 2}, submitted: 3500}
  - {id: s-2, queue: S, requests: {cpu: 2}, submitted: 3501}
  - {id: f-1, queue: F, priorityClass: armada-preemptible, requests: {cpu: 16}, submitted: 3502}
"""


def test_reserved_nodes_take_only_backfill_and_the_reason_names_them(tmp_path):
    import textwrap
    from dataclasses import replace

    from flotilla.config import parse_config, parse_state
    from flotilla.scheduler import Scheduler
    from flotilla.core.model import JobState
    from tests.support.scenario import config

    cfg = parse_config(config(queues="queues: [{name: G}, {name: S}, {name: F}]", extra=textwrap.dedent("""
        actions: [evict, reserve, allocate, preempt, lease]
        evict: {probability: 0}
        reservation: {after: 10m}
        """)), "c.yaml")
    scheduler = Scheduler(cfg)
    snapshot = parse_state(textwrap.dedent(STATE), "s.yaml", cfg)
    first = scheduler.run_cycle(snapshot)
    # The two nodes with the least running (node-2: 4 cores, node-1: 8) are reserved for the gang. s-2 does
    # not fit beside s-1 on node-3 and may not start on a reserved node; f-1 is preemptible: it backfills.
    assert {p.job.id: p.node for p in first.scheduled} == {"s-1": "node-3", "f-1": "node-1"}
    assert first.reasons["g-1"] == first.reasons["g-2"] == "waiting for 2 reserved nodes (node-2, node-1)"
    assert "s-2" in first.reasons
    # d-1 and d-2 finish: the gang fits once the backfilled f-1 goes; it is preempted for it.
    running = [replace(p.job, state=JobState.RUNNING, cluster=p.cluster, node=p.node) for p in first.scheduled]
    snapshot.clusters[0].running = [j for j in snapshot.clusters[0].running if j.id == "d-3"] + running
    snapshot.queued = [j for j in snapshot.queued if j.id in ("g-1", "g-2", "s-2")]
    second = scheduler.run_cycle(snapshot)
    assert {p.job.id: p.node for p in second.scheduled} == {"g-1": "node-2", "g-2": "node-1"}
    assert [j.id for j in second.preempted] == ["f-1"]


def test_reserve_without_after_is_a_config_error(tmp_path):
    from tests.support.scenario import config, invoke

    result = invoke(tmp_path, config(extra="actions: [evict, reserve, allocate]"), STATE)
    assert result.exit_code == 2
    assert "actions[1]: the reserve action needs reservation.after" in result.stderr


TWO_GANGS = """
now: 3600
clusters:
  - name: c1
    nodes:
""" + "".join(f"      - {{name: node-{i}, resources: {{cpu: 32}}}}\n" for i in range(1, 5)) + """jobs:
""" + "".join(f"  - {{id: d-{i}, queue: S, requests: {{cpu: {i}}}, state: running, node: node-{i}}}\n"
              for i in range(1, 5)) + "".join(
    f"  - {{id: {g}-{m}, queue: {g.upper()}, requests: {{cpu: 32}}, gang: {{id: {g}, cardinality: 2}}, "
    f"submitted: {t}}}\n" for g, t in (("g", 0), ("h", 10)) for m in (1, 2))


@pytest.mark.parametrize("units, expected", [
    # One unit at a time: the longest waiting gang, g, holds the two least loaded nodes; h waits as any job.
    (1, {"g-1": "waiting for 2 reserved nodes (node-1, node-2)", "h-1": "gang h: 0 of 2 members fit"}),
    # Two: h gets the other two nodes; reserved nodes are never shared.
    (2, {"g-1": "waiting for 2 reserved nodes (node-1, node-2)",
         "h-1": "waiting for 2 reserved nodes (node-3, node-4)"}),
])
def test_max_units_limits_the_reservations_and_nodes_are_not_shared(tmp_path, units, expected):
    from tests.support.scenario import config, run_once

    cfg = config(queues="queues: [{name: G}, {name: H}, {name: S}]",
                 extra=f"actions: [evict, reserve, allocate, lease]\nreservation: {{after: 10m, maxUnits: {units}}}\n")
    out = run_once(tmp_path, cfg, TWO_GANGS)
    assert out["scheduled"] == []
    assert {job: out["reasons"][job] for job in expected} == expected


# -- churn: who may reserve --------------------------------------------------------------------------------------
def reserve_config(extra: str = ""):
    import textwrap

    from flotilla.config import parse_config
    from tests.support.scenario import config

    return parse_config(config(queues="queues: [{name: F}, {name: G}, {name: J}, {name: K}]", extra=textwrap.dedent("""
        actions: [evict, reserve, allocate, lease]
        evict: {probability: 0}
        reservation: {after: 10m}
        """) + extra), "c.yaml")


BACKFILL_HEAD = """
now: 3600
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 4}}
jobs:
  - {id: f-1, queue: F, priorityClass: armada-preemptible, requests: {cpu: 4}, state: running, node: node-1}
  - {id: g-1, queue: G, priorityClass: armada-preemptible, requests: {cpu: 4}, submitted: 0}
"""


def test_a_backfill_job_never_reserves_so_never_preempts_another_backfill_job():
    """g-1 (preemptible) has headed G for an hour and does not fit: it waits, f-1 keeps running."""
    import textwrap

    from flotilla.config import parse_state
    from flotilla.scheduler import Scheduler

    cfg = reserve_config()
    decisions = Scheduler(cfg).run_cycle(parse_state(textwrap.dedent(BACKFILL_HEAD), "s.yaml", cfg))
    assert decisions.scheduled == [] and decisions.preempted == []
    assert decisions.reasons == {"g-1": "0/1 nodes are available: 1 Insufficient cpu"}
    assert decisions.counters["reserved_units"] == 0


REQUEUED = """
now: 3600
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 8}}
jobs:
  - {id: j-1, queue: J, requests: {cpu: 8}, submitted: 0, state: running, node: node-1}
"""


def test_a_job_back_in_its_queue_waits_reservation_after_again_before_it_reserves():
    """j-1 (submitted at 0) runs; at 3660 its node is lost and it is queued again while k-1 took node-1.

    Waited since submission it would reserve at once; waited since it was queued again, it reserves only
    ten minutes later, at 4260.
    """
    import textwrap
    from dataclasses import replace

    from flotilla.config import parse_state
    from flotilla.core.model import Job, JobState
    from flotilla.scheduler import Scheduler

    cfg = reserve_config()
    scheduler = Scheduler(cfg)
    snapshot = parse_state(textwrap.dedent(REQUEUED), "s.yaml", cfg)
    assert scheduler.run_cycle(snapshot).scheduled == []
    j1 = snapshot.clusters[0].running[0]
    k1 = Job("k-1", "K", requests=dict(j1.requests), submitted=3650, state=JobState.RUNNING, cluster="c1",
             node="node-1")
    snapshot.clusters[0].running = [k1]
    snapshot.queued = [replace(j1, state=JobState.QUEUED, cluster=None, node=None)]
    reasons = {}
    for now in (3660, 3900, 4259, 4260):
        snapshot.now = now
        reasons[now] = scheduler.run_cycle(snapshot).reasons["j-1"]
    assert reasons == {3660: "0/1 nodes are available: 1 Insufficient cpu", 3900: "0/1 nodes are available: 1 Insufficient cpu",
                       4259: "0/1 nodes are available: 1 Insufficient cpu", 4260: "waiting for 1 reserved node (node-1)"}


# The reservation example's stream and gang, with twice its backfill: fill's head jobs wait past ``after``.
CHURN_WORKLOAD = WORKLOAD.replace("queue: fill, count: 4,", "queue: fill, count: 8,")


def test_three_hours_of_backfill_preempt_backfill_only_for_jobs_that_are_not():
    """Every job preempted in three simulated hours is backfill, preempted in a cycle that placed a job that is
    not backfill on its node (the gang's or the stream's reservation); the gang still starts 26 minutes in."""
    import textwrap

    text = config_yaml(queues=QUEUES, nodes=NODES, extra=FIXED + "reservation: {after: 10m}\n").replace(
        "actions: [evict, allocate, preempt, lease]", "actions: [evict, reserve, allocate, preempt, lease]")
    from flotilla.config import parse_config
    from flotilla.simulate import parse_workload

    config = parse_config(text, "c.yaml")
    workload = parse_workload(textwrap.dedent(CHURN_WORKLOAD), "w.yaml", config)
    _, report, watch = simulate(config, workload, until=3 * 3600)
    preempted = backfill_for_backfill = 0
    for _, decisions, _, _ in watch.cycles:
        firm_nodes = {(p.cluster, p.node) for p in decisions.scheduled if p.job.priority_class != "armada-preemptible"}
        for job in decisions.preempted:
            assert job.priority_class == "armada-preemptible"
            preempted += 1
            backfill_for_backfill += (job.cluster, job.node) not in firm_nodes
    assert backfill_for_backfill == 0
    assert preempted == report["queues"]["fill"]["preemptions"] > 0
    t, started, _ = gang_start(watch)
    assert t - ARRIVAL == 26 * 60


BACKFILL_ONLY = """
now: 3600
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 8}}
      - {name: node-2, resources: {cpu: 8}}
jobs:
  - {id: d-1, queue: S, requests: {cpu: 2}, state: running, node: node-1}
  - {id: f-1, queue: F, priorityClass: armada-preemptible, requests: {cpu: 6}, state: running, node: node-2}
  - {id: j-1, queue: J, requests: {cpu: 8}, submitted: 0}
"""


def test_the_unit_starts_at_once_on_the_node_that_held_only_backfill():
    """node-1 holds less (2 cores) but of work that must end by itself; node-2 only backfill (6 cores): j-1
    reserves node-2 and starts there in the same cycle, f-1 preempted for it."""
    import textwrap

    from flotilla.config import parse_state
    from flotilla.scheduler import Scheduler

    from flotilla.config import parse_config
    from tests.support.scenario import config

    cfg = parse_config(config(queues="queues: [{name: S}, {name: F}, {name: J}]", extra=textwrap.dedent("""
        actions: [evict, reserve, allocate, lease]
        evict: {probability: 0}
        reservation: {after: 10m}
        """)), "c.yaml")
    decisions = Scheduler(cfg).run_cycle(parse_state(textwrap.dedent(BACKFILL_ONLY), "s.yaml", cfg))
    assert {p.job.id: p.node for p in decisions.scheduled} == {"j-1": "node-2"}
    assert [j.id for j in decisions.preempted] == ["f-1"]


def test_simulate_wakes_when_a_reservation_may_be_made(tmp_path):
    """A two-hour backfill job fills the one node; J's job arrives at 1m and may reserve from 11m. Nothing else
    happens until 2h, yet the clock stops at 11m: it reserves the node, the backfill job is preempted and it starts
    (without the wake, at 2h)."""
    text = config_yaml(queues="[{name: F}, {name: J}]", nodes="- {count: 1, namePrefix: node, resources: {cpu: 8}}",
                       extra=FIXED + "reservation: {after: 10m}\n").replace(
        "actions: [evict, allocate, preempt, lease]", "actions: [evict, reserve, allocate, lease]")
    workload = """
    submissions:
      - {at: 0s, queue: F, priorityClass: armada-preemptible, requests: {cpu: 8}, duration: 2h}
      - {at: 1m, queue: J, requests: {cpu: 8}, duration: 10m}
    """
    config, loaded = setup(tmp_path, text, workload)
    _, report, watch = simulate(config, loaded)
    starts = [(t, p.job.queue) for t, decisions, _, _ in watch.cycles for p in decisions.scheduled]
    preemptions = [(t, [job.queue for job in decisions.preempted]) for t, decisions, _, _ in watch.cycles
                   if decisions.preempted]
    # F starts again (from zero) when J ends, ten minutes later.
    assert starts == [(0, "F"), (660, "J"), (1260, "F")]
    assert preemptions == [(660, ["F"])]
