"""Topology-aware gangs (armadaproject.io/gangNodeUniformityLabel): every member in one domain of a node label."""

from __future__ import annotations

import textwrap
from dataclasses import replace

from flotilla.config import parse_config, parse_state
from flotilla.core.model import JobState
from flotilla.scheduler import Scheduler
from tests.support.scenario import config, invoke, placements, run_once

LABEL = "armadaproject.io/gangNodeUniformityLabel"


def nodes(free: dict[str, int]) -> str:
    """Eight 16-core nodes, n1-n4 in rack r1 and n5-n8 in rack r2, and running jobs (not preemptible) that leave
    ``free[node]`` cores free on each (16 where not given)."""
    lines = ["clusters:", "  - name: sim", "    nodes:"]
    for i in range(1, 9):
        lines.append(f"      - {{name: n{i}, resources: {{cpu: 16}}, labels: {{rack: r{1 if i <= 4 else 2}}}}}")
    lines.append("jobs:")
    for i in range(1, 9):
        used = 16 - free.get(f"n{i}", 16)
        if used:
            lines.append(f"  - {{id: x{i}, queue: B, requests: {{cpu: {used}}}, state: running, node: n{i}}}")
    return "\n".join(lines) + "\n"


def gang(label: str | None = "rack", size: int = 4, cpu: int = 8, gang_id: str = "g", prefix: str = "g") -> str:
    annotations = f", annotations: {{{LABEL}: {label}}}" if label else ""
    return "\n".join(f"  - {{id: {prefix}-{i}, queue: A, requests: {{cpu: {cpu}}}, submitted: {i}, "
                     f"gang: {{id: {gang_id}, cardinality: {size}}}{annotations}}}" for i in range(1, size + 1)) + "\n"


# r1 could hold three of the four (n1 two, n2 one); r2 holds all four (n5 and n6 two each).
ONE_RACK_FITS = {"n1": 16, "n2": 8, "n3": 0, "n4": 0, "n5": 16, "n6": 16, "n7": 0, "n8": 0}
# Room for two 8-core jobs in each rack: four in all, but no rack holds the gang.
SPLIT = {"n1": 16, "n2": 0, "n3": 0, "n4": 0, "n5": 8, "n6": 8, "n7": 0, "n8": 0}


def test_topology_gang_lands_wholly_in_the_one_rack_where_it_fits(tmp_path):
    out = run_once(tmp_path, config(), nodes(ONE_RACK_FITS) + gang())
    assert placements(out) == {"g-1": "n5", "g-2": "n5", "g-3": "n6", "g-4": "n6"}
    assert out["queued"] == []


def test_without_the_label_the_same_gang_spans_both_racks(tmp_path):
    # The control: per member, the queue's usual tiers (unused nodes first, then its own) and best fit put it in
    # both racks, so the label is what keeps it whole.
    out = run_once(tmp_path, config(), nodes(ONE_RACK_FITS) + gang(label=None))
    assert placements(out) == {"g-1": "n1", "g-2": "n1", "g-3": "n5", "g-4": "n5"}


def test_room_split_across_racks_waits_with_a_reason_that_names_the_label(tmp_path):
    out = run_once(tmp_path, config(), nodes(SPLIT) + gang())
    assert out["scheduled"] == []
    reason = "gang g of 4 does not fit in any single rack domain: 0/2 domains fit: 2 insufficient cpu"
    assert out["reasons"] == {f"g-{i}": reason for i in range(1, 5)}
    # Without the label the four fit, two per rack.
    out = run_once(tmp_path, config(), nodes(SPLIT) + gang(label=None))
    assert placements(out) == {"g-1": "n1", "g-2": "n1", "g-3": "n5", "g-4": "n6"}


def test_a_domain_with_the_room_in_total_but_not_per_node_is_counted_as_such(tmp_path):
    # r1: four nodes with 8 free, but the members ask 12 each; r2 holds 2 (n5, n6 free), short of room for 4.
    state = nodes({"n1": 12, "n2": 12, "n3": 12, "n4": 4, "n5": 16, "n6": 16, "n7": 0, "n8": 0})
    out = run_once(tmp_path, config(), state + gang(cpu=10))
    reason = "gang g of 4 does not fit in any single rack domain: 0/2 domains fit: 1 fits 3 of 4 members, " \
             "1 insufficient cpu"
    assert out["reasons"]["g-1"] == reason


def test_of_two_racks_that_fit_the_tightest_is_taken(tmp_path):
    # r1 has 48 cores free (two empty nodes, two half nodes), r2 40: both hold 32, r2 leaves the least room.
    state = nodes({"n1": 16, "n2": 16, "n3": 8, "n4": 8, "n5": 16, "n6": 16, "n7": 8, "n8": 0})
    out = run_once(tmp_path, config(), state + gang())
    assert placements(out) == {"g-1": "n5", "g-2": "n5", "g-3": "n6", "g-4": "n6"}


def test_two_topology_gangs_fill_one_rack_each(tmp_path):
    state = nodes({}) + gang(gang_id="g", prefix="g", size=4, cpu=16) + gang(gang_id="h", prefix="h", size=4, cpu=16)
    out = run_once(tmp_path, config(), state)
    got = placements(out)
    racks = {job: "r1" if int(node[1:]) <= 4 else "r2" for job, node in got.items()}
    assert len(got) == 8
    assert {racks[f"g-{i}"] for i in range(1, 5)} == {"r1"}
    assert {racks[f"h-{i}"] for i in range(1, 5)} == {"r2"}


def test_nodes_without_the_label_are_in_no_domain(tmp_path):
    state = textwrap.dedent("""
        clusters:
          - name: sim
            nodes:
              - {name: n1, resources: {cpu: 64}}
        jobs:
        """) + gang()
    out = run_once(tmp_path, config(), state)
    assert out["reasons"]["g-1"] == "gang g of 4 does not fit in any single rack domain: no node has label rack"


def test_members_must_agree_on_the_label(tmp_path):
    state = nodes({}) + gang().replace("{id: g-3, queue: A, requests: {cpu: 8}, submitted: 3, gang: {id: g, "
                                       f"cardinality: 4}}, annotations: {{{LABEL}: rack}}}}",
                                       "{id: g-3, queue: A, requests: {cpu: 8}, submitted: 3, gang: {id: g, "
                                       f"cardinality: 4}}, annotations: {{{LABEL}: zone}}}}")
    result = invoke(tmp_path, config(), state)
    assert result.exit_code == 2
    assert (f"jobs[2].annotations.{LABEL}: gang 'g' members disagree on the uniformity label: zone here, rack at "
            "jobs[0]") in result.stderr


def test_a_bad_label_key_and_a_label_without_a_gang_are_refused_with_their_path(tmp_path):
    result = invoke(tmp_path, config(), nodes({}) + gang(label="'-rack'"))
    assert result.exit_code == 2
    assert f"jobs[0].annotations.{LABEL}: expected a node label key" in result.stderr
    assert "got '-rack'" in result.stderr
    lone = nodes({}) + f"  - {{id: j, queue: A, requests: {{cpu: 1}}, annotations: {{{LABEL}: rack}}}}\n"
    result = invoke(tmp_path, config(), lone)
    assert result.exit_code == 2
    assert (f"jobs[0].annotations.{LABEL}: only a gang runs in one domain of a label; set armadaproject.io/gangId too"
            in result.stderr)


def test_an_elastic_topology_gang_adds_its_members_in_its_rack_only(tmp_path):
    # Minimum 2 of 4: the core goes to r2 (n5, the tightest rack with room); the others follow in r2 only, though
    # r1 has room.
    state = nodes({"n1": 16, "n2": 16, "n3": 16, "n4": 16, "n5": 16, "n6": 0, "n7": 0, "n8": 0})
    members = gang().replace(f"annotations: {{{LABEL}: rack}}",
                             f"annotations: {{{LABEL}: rack, flotilla.io/gang-min-available: '2'}}")
    cfg = parse_config(config(), "c.yaml")
    scheduler = Scheduler(cfg)
    snapshot = parse_state(state + members, "s.yaml", cfg)
    first = scheduler.run_cycle(snapshot)
    assert {p.job.id: p.node for p in first.scheduled} == {"g-1": "n5", "g-2": "n5"}
    # Searched in r2 only: its four nodes, none with room.
    assert first.reasons["g-3"] == "0/4 nodes are available: 4 Insufficient cpu"

    # Next cycle: x6 has finished, so n6 (r2) has room; g-3 and g-4 go there.
    running = [replace(p.job, state=JobState.RUNNING, cluster=p.cluster, node=p.node) for p in first.scheduled]
    snapshot.clusters[0].running = [j for j in snapshot.clusters[0].running if j.id != "x6"] + running
    snapshot.queued = [job for job in snapshot.queued if job.id in ("g-3", "g-4")]
    second = scheduler.run_cycle(snapshot)
    assert {p.job.id: p.node for p in second.scheduled} == {"g-3": "n6", "g-4": "n6"}


# -- submitted through the service ------------------------------------------------------------------------------

def service_setup(tmp_path):
    from flotilla.service.loop import ServiceLoop, service_backends
    from flotilla.service.settings import from_config
    from flotilla.service.store import Store
    from tests.support.service import CONFIG

    racks = CONFIG[:CONFIG.index("clusters:")] + textwrap.dedent("""\
        clusters:
          - name: c1
            kind: simulated
            nodes:
              - {count: 2, namePrefix: r1-node, resources: {cpu: 8, memory: 32Gi}, labels: {rack: r1}}
              - {count: 2, namePrefix: r2-node, resources: {cpu: 8, memory: 32Gi}, labels: {rack: r2}}
        """)
    cfg = parse_config(racks, "racks.yaml")
    settings = from_config(cfg)
    now = [1_000_000.0]
    store = Store(f"sqlite:///{tmp_path}/loop.db")
    store.sync_queues(settings.queues)
    loop = ServiceLoop(store, settings, Scheduler(cfg), service_backends(cfg, clock=lambda: now[0]),
                       clock=lambda: now[0], seed=0)
    return settings, store, loop, now


def test_a_submitted_topology_gang_starts_in_one_rack(tmp_path):
    from flotilla.service.jobspec import prepare
    from tests.support.service import job, job_file

    settings, store, loop, now = service_setup(tmp_path)
    # Alice's 2-core job on r1-node-1 makes that node hers: per member, her own node and then the unused ones
    # would come first and the gang would span both racks. r1 has 14 cores free, short of 16: it goes to r2.
    _, first = prepare(job_file("A", "one", [job("a0", cpu="2", duration="1h")]), settings)
    store.submit("A", "one", "alice", first, now=now[0])
    loop.run_cycle()
    assert [j.nodes for j in store.load_active().values()] == [["r1-node-1"]]
    members = []
    for i in range(4):
        spec = job(f"g{i}", cpu="4", duration="1h", gang=("g", 4))
        spec["annotations"][LABEL] = "rack"
        members.append(spec)
    _, new = prepare(job_file("A", "gang", members), settings)
    ids = [s.id for s in store.submit("A", "gang", "alice", new, now=now[0])]
    now[0] += 1
    loop.run_cycle()
    assert sorted(store.get_job(i)["node"] for i in ids) == ["r2-node-1", "r2-node-1", "r2-node-2", "r2-node-2"]
    store.close()


def test_the_service_refuses_a_bad_or_disagreeing_label_with_its_path(tmp_path):
    import pytest

    from flotilla.service.jobspec import SubmissionRejected, prepare
    from tests.support.service import job, job_file, settings as service_settings

    settings = service_settings()
    members = [job(f"g{i}", gang=("g", 2)) for i in range(2)]
    members[0]["annotations"][LABEL] = "rack"
    members[1]["annotations"][LABEL] = "zone"
    with pytest.raises(SubmissionRejected) as caught:
        prepare(job_file("A", "gang", members), settings)
    assert [(r.index, r.field, r.message) for r in caught.value.rejections] == [
        (k, f"annotations.{LABEL}", "gang 'g' members disagree on the uniformity label (job 0 says rack, job 1 says "
                                    "zone)") for k in (0, 1)]

    lone = job("j")
    lone["annotations"][LABEL] = "rack"
    bad = job("b", gang=("b", 1))
    bad["annotations"][LABEL] = "Rack/"
    with pytest.raises(SubmissionRejected) as caught:
        prepare(job_file("A", "s", [lone, bad]), settings)
    assert [(r.index, r.field, r.message) for r in caught.value.rejections] == [
        (0, f"annotations.{LABEL}", "only a gang or a job of several pods runs in one domain of a label; set "
                                    "armadaproject.io/gangId too"),
        (1, f"annotations.{LABEL}", "expected a node label key: an optional DNS subdomain prefix (lower-case letters, "
                                    "digits, '-' and '.', at most 253 characters) and '/', then 1-63 letters, "
                                    "digits, '-', '_' or '.', starting and ending with a letter or digit, got 'Rack/'")]


def test_the_policies_guide_example_gives_what_the_guide_says():
    from tests.support.docs import commands, run_documented, section

    text = section("policies.md", "Topology-aware gangs")
    (argv,) = commands(text)
    assert argv == ["schedule-once", "--state", "examples/policies/topology-state.yaml"]
    out = run_documented(argv)
    assert placements(out) == {"g-1": "n5", "g-2": "n5", "g-3": "n6", "g-4": "n6"}
    reason = "gang h of 4 does not fit in any single rack domain: 0/2 domains fit: 2 insufficient cpu"
    assert out["reasons"] == {f"h-{i}": reason for i in range(1, 5)}
    assert reason in text


def test_a_simulated_stream_of_topology_gangs_runs_each_gang_in_one_rack(tmp_path):
    """Simulated: 4 racks of 4 16-core nodes, gangs of 2 to 6 8-core jobs arriving all along, with evictions (no
    floor under fair share, so gangs are evicted and placed again). Every cycle, every running topology gang is in one rack (check_invariants); every gang runs in the end."""
    from flotilla.config import load_config
    from flotilla.simulate import Simulation, check_invariants, load_workload

    groups = "\n".join(f"      - {{count: 4, namePrefix: r{r}-node, resources: {{cpu: 16}}, labels: {{rack: r{r}}}}}"
                       for r in range(1, 5))
    (tmp_path / "flotilla.yaml").write_text(config(extra="evict: {probability: 0.5, protectedFractionOfFairShare: 0}\n"
                                                          "cycle: {period: 1m}\n"
                                                          "clusters:\n  - name: sim\n    kind: simulated\n"
                                                          "    nodes:\n" + groups + "\n"))
    (tmp_path / "workload.yaml").write_text(textwrap.dedent("""\
        submissions:
          - {at: 0s, queue: A, count: 12, requests: {cpu: 8}, duration: 20m, every: 5m, times: 8,
             priorityClass: armada-preemptible, gang: {cardinality: 6, nodeUniformityLabel: rack}}
          - {at: 1m, queue: B, count: 8, requests: {cpu: 8}, duration: 15m, every: 7m, times: 6,
             priorityClass: armada-preemptible, gang: {cardinality: 2, nodeUniformityLabel: rack}}
          - {at: 2m, queue: B, count: 4, requests: {cpu: 4}, duration: 10m, every: 3m, times: 10}
        """))
    cfg = load_config(tmp_path / "flotilla.yaml")
    workload = load_workload(tmp_path / "workload.yaml", cfg)
    seen = {"cycles": 0, "topology gangs running": 0}

    def on_cycle(sim, info):
        check_invariants(sim, info)
        seen["cycles"] += 1
        seen["topology gangs running"] += len({j.gang.id for j in sim.running_jobs() if j.gang is not None})

    report = Simulation(cfg, workload, on_cycle=on_cycle).run()
    assert report["queues"]["A"]["finished"] == 12 * 8
    assert report["queues"]["B"]["finished"] == 8 * 6 + 4 * 10
    # Evictions moved gangs (members preempted: A 6, B 16), and every gang, moved or not, stayed in one rack.
    assert (report["queues"]["A"]["preemptions"], report["queues"]["B"]["preemptions"]) == (6, 16)
    assert seen == {"cycles": 72, "topology gangs running": 530}


def test_reserve_holds_nodes_of_one_rack_for_a_topology_gang(tmp_path):
    # Two 16-core jobs, waiting an hour; nothing can be preempted. By load alone the least busy pair is n1 (2 cores
    # used) and n3 (4), in two racks; the gang reserves r2's n3 and n4 (8 used) over r1's n1 and n2 (12).
    state = textwrap.dedent("""
        now: 3600
        clusters:
          - name: sim
            nodes:
              - {name: n1, resources: {cpu: 16}, labels: {rack: r1}}
              - {name: n2, resources: {cpu: 16}, labels: {rack: r1}}
              - {name: n3, resources: {cpu: 16}, labels: {rack: r2}}
              - {name: n4, resources: {cpu: 16}, labels: {rack: r2}}
        jobs:
          - {id: x1, queue: B, requests: {cpu: 2}, state: running, node: n1}
          - {id: x2, queue: B, requests: {cpu: 10}, state: running, node: n2}
          - {id: x3, queue: B, requests: {cpu: 4}, state: running, node: n3}
          - {id: x4, queue: B, requests: {cpu: 4}, state: running, node: n4}
        """) + gang(size=2, cpu=16)
    cfg = config(extra="actions: [evict, reserve, allocate, preempt, lease]\nreservation: {after: 10m}\n")
    out = run_once(tmp_path, cfg, state)
    assert out["reasons"] == {f"g-{i}": "waiting for 2 reserved nodes (n3, n4)" for i in (1, 2)}
    out = run_once(tmp_path, cfg, state.replace(f", annotations: {{{LABEL}: rack}}", ""))
    assert out["reasons"]["g-1"] == "waiting for 2 reserved nodes (n1, n3)"


def test_preempt_displaces_within_one_rack_for_a_topology_gang(tmp_path):
    # Every node full. n1 runs a job that cannot be preempted, so r1 cannot hold two 16-core jobs even by
    # preempting; r2's preemptible jobs make way. Per member, without the label, n2 (r1) would go first.
    state = textwrap.dedent("""
        clusters:
          - name: sim
            nodes:
              - {name: n1, resources: {cpu: 16}, labels: {rack: r1}}
              - {name: n2, resources: {cpu: 16}, labels: {rack: r1}}
              - {name: n3, resources: {cpu: 16}, labels: {rack: r2}}
              - {name: n4, resources: {cpu: 16}, labels: {rack: r2}}
        jobs:
          - {id: x1, queue: B, requests: {cpu: 16}, state: running, node: n1}
          - {id: x2, queue: B, requests: {cpu: 16}, state: running, node: n2, priorityClass: armada-preemptible}
          - {id: x3, queue: B, requests: {cpu: 16}, state: running, node: n3, priorityClass: armada-preemptible}
          - {id: x4, queue: B, requests: {cpu: 16}, state: running, node: n4, priorityClass: armada-preemptible}
        """) + gang(size=2, cpu=16)
    cfg = config(extra="actions: [allocate, preempt, lease]\n")
    out = run_once(tmp_path, cfg, state)
    assert placements(out) == {"g-1": "n3", "g-2": "n4"}
    assert out["preempted"] == ["x3", "x4"]
    out = run_once(tmp_path, cfg, state.replace(f", annotations: {{{LABEL}: rack}}", ""))
    assert placements(out) == {"g-1": "n2", "g-2": "n3"}
    assert out["preempted"] == ["x2", "x3"]
