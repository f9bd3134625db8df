"""``flotilla simulate``: the real scheduler on a simulated clock, with exact expectations.

Every run here checks, after every cycle, that no node is over-allocated and
that no gang runs partially (:func:`check_invariants`).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from flotilla.config import load_config
from flotilla.contrib.decayedusage import DecayedUsage
from flotilla.scheduler_main import main
from flotilla.simulate import NoProgress, Simulation, check_invariants, load_workload
from flotilla.simulate.cli import EXIT_NO_PROGRESS
from tests.support.simulate import config_yaml, setup, simulate

ROOT = Path(__file__).resolve().parents[2]
TWO_QUEUES = ROOT / "examples" / "workloads" / "two-queues.yaml"


# -- the seed's two-queue story ------------------------------------------------------
def test_two_queue_story_in_time():
    config = load_config(None)  # two 32-core nodes, A and B of weight 1, evict probability 1
    workload = load_workload(TWO_QUEUES, config)
    sim, report, watch = simulate(config, workload)
    times = [c[0] for c in watch.cycles]
    # t=0 A starts; t=60 B arrives; t=600 A's first 32 finish; t=660 B's first 32 finish; t=1200 the rest.
    # After each changing cycle comes one more (t+1s) that changes nothing; then the clock jumps.
    assert times == [0, 1, 60, 61, 600, 601, 660, 1200]

    t, decisions, shares, waiting = watch.cycles[2]
    assert t == 60
    scheduled = {p.job.id: p.node for p in decisions.scheduled}
    assert len(scheduled) == 32 and all(job_id.startswith("B-") for job_id in scheduled)
    assert set(scheduled.values()) == {"node-2"}          # all of B on node-2 (per-queue best fit)
    assert sorted(job.id for job in decisions.preempted) == [f"A-{i}" for i in range(33, 41)]
    assert {job.node for job in decisions.preempted} == {"node-2"}
    assert shares == {"A": 0.5, "B": 0.5}                  # 32 and 32
    assert waiting == {"A": 8, "B": 18}

    # Every job eventually finishes; A's 8 were preempted once each.
    assert report["queues"]["A"]["finished"] == 40 and report["queues"]["B"]["finished"] == 50
    assert report["queues"]["A"]["preemptions"] == 8 and report["queues"]["B"]["preemptions"] == 0
    # B's wait by hand: its first 32 start in the cycle they arrive (t=60, wait 0). The other 18
    # wait until the first free cores: A's first 32 jobs (started t=0, 10m each) finish at t=600,
    # freeing node-1; that cycle A's 8 preempted jobs restart there and B's 18 take the other 24
    # cores' worth. So 18 jobs wait 600 - 60 = 540 s: mean (32 * 0 + 18 * 540) / 50 = 194.4 s,
    # p95 (the 48th of 50 sorted waits) = 540 s.
    assert report["queues"]["B"]["waitMean"] == 194.4
    assert report["queues"]["B"]["waitP95"] == 540
    assert report["queues"]["A"]["waitMean"] == 0        # first start: A's restarts count as preemptions
    assert report["queues"]["A"]["share"] == [[0, 0.625], [60, 0.5], [600, 0.125], [1200, 0]]
    assert report["queues"]["B"]["share"] == [[60, 0.5], [600, 0.78125], [660, 0.28125], [1200, 0]]
    assert report["simulatedSeconds"] == 1200
    assert report["cycles"] == 8
    # Busy core-seconds: A 32x600 + 8x60 (preempted) + 8x600 (restarted); B 50x600.
    assert report["utilisation"] == pytest.approx((32 * 600 + 8 * 60 + 8 * 600 + 50 * 600) / (64 * 1200))
    # Goodput leaves out the 8 x 60 core-seconds thrown away by the preemption.
    assert report["goodput"] == pytest.approx((32 * 600 + 8 * 600 + 50 * 600) / (64 * 1200))


# -- fairness over the run --------------------------------------------------------------
def backlogged_cycles(watch, queues=("A", "B")):
    """Cycles after which every one of ``queues`` still had jobs waiting."""
    return [c for c in watch.cycles if all(c[3][q] > 0 for q in queues)]


def test_equal_weights_converge_to_equal_shares(tmp_path):
    # A fills the pool with non-preemptible jobs before B arrives, so nothing can be preempted:
    # the shares converge as A's jobs finish and the freed cores are shared out.
    config, workload = setup(tmp_path, config_yaml(), """
        submissions:
          - {at: 0s, queue: A, count: 64, requests: {cpu: 1}, duration: 10m}
          - {at: 0s, queue: A, count: 200, requests: {cpu: 1}, duration: 7m}
          - {at: 2m, queue: B, count: 200, requests: {cpu: 1}, duration: 7m}
        """)
    _, report, watch = simulate(config, workload)
    both = backlogged_cycles(watch)
    assert both[0][0] == 120 and both[0][2] == {"A": 1.0, "B": 0.0}   # B arrives to a full pool
    converged = [c for c in both if c[0] >= 600]
    assert converged, "both queues should still be backlogged after A's first jobs finish"
    for t, _, shares, _ in converged:
        assert abs(shares["A"] - shares["B"]) <= 1 / 64 + 1e-9, (t, shares)
    assert report["queues"]["A"]["finished"] == 264 and report["queues"]["B"]["finished"] == 200


def test_weights_one_to_three_converge_to_quarter_and_three_quarters(tmp_path):
    config, workload = setup(tmp_path, config_yaml(queues="[{name: A, weight: 1}, {name: B, weight: 3}]"), """
        submissions:
          - {at: 0s, queue: A, count: 300, priorityClass: armada-preemptible, requests: {cpu: 1}, duration: 5m}
          - {at: 30s, queue: B, count: 600, priorityClass: armada-preemptible, requests: {cpu: 1}, duration: 5m}
        """)
    _, report, watch = simulate(config, workload)
    both = backlogged_cycles(watch)
    assert both and both[0][0] == 30
    for t, _, shares, _ in both:  # from the first cycle in which both are backlogged on
        assert abs(shares["A"] - 0.25) <= 1 / 64 and abs(shares["B"] - 0.75) <= 1 / 64, (t, shares)
    assert report["queues"]["A"]["fairShare"] == pytest.approx(0.25, abs=0.1)
    assert all(q["finished"] == q["submitted"] for q in report["queues"].values())


# -- decayed usage ------------------------------------------------------------------------
@pytest.mark.parametrize("ran, expected_a, expected_b, expected_priority", [
    # A ran the whole 64-core pool for one half-time: P_A = 1 + (0 - 1) * 0.5 = 0.5. Both queues then
    # backlogged with 1-core jobs on the idle pool; allocate serves the smaller of P_A + (a+1)/64 and
    # (b+1)/64 (equal weights) until 64 are placed: a = 16, b = 48 (0.5 + 16/64 = 48/64), whatever the
    # order of ties. A is held back by exactly P_A of the pool: b - a = 0.5 * 64 = 32 cores.
    ("1h", 16, 48, 0.5),
    # Half a half-time: P_A = 1 - 0.5 ** 0.5 = 0.29289. From (22, 41): A's next costs 0.29289 + 23/64
    # = 0.652 < B's 42/64 = 0.656, so A; from (23, 40): B's 41/64 = 0.641 < A's 0.668, so B. Either
    # way (23, 41): b - a = 18, the largest whole number of cores below 0.29289 * 64 = 18.7.
    ("30m", 23, 41, 1 - 0.5 ** 0.5),
])
def test_decayed_usage_holds_back_the_queue_that_used_the_pool(tmp_path, ran, expected_a, expected_b,
                                                             expected_priority):
    fairness = "- {name: decayedusage, args: {priorityHalftime: 1h}}"
    config, workload = setup(tmp_path, config_yaml(fairness=fairness), f"""
        submissions:
          - {{at: 0s, queue: A, count: 64, requests: {{cpu: 1}}, duration: {ran}}}
          - {{at: {ran}, queue: A, count: 100, requests: {{cpu: 1}}, duration: 1h}}
          - {{at: {ran}, queue: B, count: 100, requests: {{cpu: 1}}, duration: 1h}}
        """)
    sim, _, watch = simulate(config, workload)
    plugin = next(p for p in sim.scheduler.pm.get_plugins() if isinstance(p, DecayedUsage))
    seconds = {"1h": 3600, "30m": 1800}[ran]
    t, decisions, shares, _ = next(c for c in watch.cycles if c[0] == seconds)
    placed = {"A": 0, "B": 0}
    for p in decisions.scheduled:
        placed[p.job.queue] += 1
    assert placed == {"A": expected_a, "B": expected_b}
    assert shares == {"A": expected_a / 64, "B": expected_b / 64}
    assert plugin.halftime == 3600


def test_decayed_usage_priority_is_kept_across_cycles(tmp_path):
    fairness = "- {name: decayedusage, args: {priorityHalftime: 1h}}"
    config, workload = setup(tmp_path, config_yaml(fairness=fairness), """
        submissions:
          - {at: 0s, queue: A, count: 64, requests: {cpu: 1}, duration: 1h}
          - {at: 1h, queue: B, count: 1, requests: {cpu: 1}, duration: 1m}
        """)
    seen = {}

    def on_cycle(sim, info):
        check_invariants(sim, info)
        plugin = next(p for p in sim.scheduler.pm.get_plugins() if isinstance(p, DecayedUsage))
        seen[info.time] = dict(plugin.priority)

    Simulation(config, workload, on_cycle=on_cycle).run()
    # Cycles at 0 (A starts), 1 (nothing changes), 3600 (A finishes, B starts): A held the whole pool
    # from 0 to 3600, so its priority at 3600 is 1 + (0 - 1) * 0.5 ** (3600 / 3600) = 0.5.
    assert seen[0] == {}
    assert seen[1]["A"] == pytest.approx(1 - 0.5 ** (1 / 3600))
    assert seen[3600]["A"] == pytest.approx(0.5, abs=1e-12)
    # A then holds nothing: one minute later it has decayed half-way per hour towards 0.
    assert seen[3660]["A"] == pytest.approx(0.5 * 0.5 ** (60 / 3600), abs=1e-12)


def test_decayed_usage_compares_against_assetfairness_on_the_same_workload(tmp_path):
    workload_text = """
        submissions:
          - {at: 0s, queue: A, count: 64, requests: {cpu: 1}, duration: 1h}
          - {at: 1h, queue: A, count: 64, requests: {cpu: 1}, duration: 1h}
          - {at: 1h, queue: B, count: 64, requests: {cpu: 1}, duration: 1h}
        """
    waits = {}
    for fairness in ("- name: assetfairness", "- {name: decayedusage, args: {priorityHalftime: 1h}}"):
        config, workload = setup(tmp_path, config_yaml(fairness=fairness), workload_text)
        _, report, _ = simulate(config, workload)
        waits[fairness.split("name: ")[1].split(",")[0].strip("}")] = report["queues"]["B"]["waitMean"]
    # B waits less when A's earlier hour counts against A.
    assert waits["decayedusage"] < waits["assetfairness"]


# -- gangs ------------------------------------------------------------------------------------
def test_gangs_never_run_partially(tmp_path):
    nodes = "- {count: 4, namePrefix: node, resources: {cpu: 16, memory: 64Gi}}"
    config, workload = setup(tmp_path, config_yaml(nodes=nodes), """
        submissions:
          - {at: 0s, queue: A, count: 40, priorityClass: armada-preemptible, requests: {cpu: 1}, duration: 3m}
          - {at: 10s, queue: B, count: 24, priorityClass: armada-preemptible, requests: {cpu: 2}, duration: 4m,
             gang: {cardinality: 8}}
          - {at: 20s, queue: A, count: 6, priorityClass: armada-preemptible, requests: {cpu: 8}, duration: 2m,
             gang: {cardinality: 3}}
          - {at: 1m, queue: B, count: 4, requests: {cpu: 16}, duration: 1m, gang: {cardinality: 4}}
          - {at: 90s, queue: A, count: 60, priorityClass: armada-preemptible, requests: {cpu: 1}, duration: 2m}
        """)
    _, report, watch = simulate(config, workload)   # the invariants are checked after every cycle
    assert report["queues"]["A"]["finished"] == 106 and report["queues"]["B"]["finished"] == 28
    gang_starts = [p.job for c in watch.cycles for p in c[1].scheduled if p.job.gang is not None]
    assert len(gang_starts) >= 34                     # every gang member started at least once


def test_gang_too_big_for_any_cluster_stops_with_no_progress(tmp_path):
    config, workload = setup(tmp_path, config_yaml(), """
        submissions:
          - {at: 0s, queue: A, count: 3, requests: {cpu: 32}, duration: 1m, gang: {cardinality: 3}}
        """)
    with pytest.raises(NoProgress, match=r"no progress at t=0s: 3 job\(s\) can never start .*A-1: gang A-g1"):
        simulate(config, workload)


# -- the command ---------------------------------------------------------------------------------
def cli(tmp_path: Path, config_text: str | None, workload_text: str, *args: str):
    if config_text is not None:
        (tmp_path / "flotilla.yaml").write_text(config_text)
    (tmp_path / "workload.yaml").write_text(textwrap.dedent(workload_text))
    argv = ["simulate", "--workload", str(tmp_path / "workload.yaml"), *args]
    if config_text is not None:
        argv += ["--config", str(tmp_path / "flotilla.yaml")]
    return CliRunner().invoke(main, argv)


def test_cli_report_table_and_plot(tmp_path):
    out = tmp_path / "out.json"
    png = tmp_path / "out.png"
    result = CliRunner().invoke(main, ["simulate", "--workload", str(TWO_QUEUES), "--json", str(out),
                                       "--plot", str(png)])
    assert result.exit_code == 0, result.output + result.stderr
    report = json.loads(out.read_text())
    assert set(report) >= {"queues", "utilisation", "cycles", "simulatedSeconds", "wallSeconds"}
    assert set(report["queues"]["A"]) >= {"weight", "fairShare", "meanShare", "finished", "preemptions",
                                          "waitMean", "waitP95", "share"}
    assert report["queues"]["A"]["meanShare"] == pytest.approx((0.625 * 60 + 0.5 * 540 + 0.125 * 600) / 1200)
    for word in ("Queue", "Fair share", "Mean share", "Wait p95", "Preemptions", "utilisation", "cycles"):
        assert word in result.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "simulated" not in result.stderr   # no progress bar when stderr is not a terminal


def strip_wall(report):
    if "policies" in report:
        return {"policies": {name: strip_wall(r) for name, r in report["policies"].items()}}
    return {key: value for key, value in report.items() if key != "wallSeconds"}


def test_same_seed_same_report(tmp_path):
    # evict.probability 0.5: the seeded draws decide which nodes are evicted each cycle.
    config_text = config_yaml(extra="evict: {probability: 0.5}\n")
    workload = """
        submissions:
          - {at: 0s, queue: A, count: 100, priorityClass: armada-preemptible, requests: {cpu: 1}, duration: 4m}
          - {at: 1m, queue: B, count: 100, priorityClass: armada-preemptible, requests: {cpu: 1}, duration: 3m}
          - {at: 2m, queue: A, count: 8, priorityClass: armada-preemptible, requests: {cpu: 4}, duration: 5m,
             gang: {cardinality: 4}}
        """
    reports = []
    for i in range(2):
        result = cli(tmp_path, config_text, workload, "--seed", "7", "--json", str(tmp_path / f"r{i}.json"))
        assert result.exit_code == 0, result.output
        reports.append(json.loads((tmp_path / f"r{i}.json").read_text()))
    assert strip_wall(reports[0]) == strip_wall(reports[1])
    assert reports[0]["seed"] == 7


def test_compare_policies_one_table_one_plot(tmp_path):
    out, png = tmp_path / "cmp.json", tmp_path / "cmp.png"
    result = CliRunner().invoke(main, ["simulate", "--workload", str(TWO_QUEUES), "--compare",
                                       "assetfairness,drf,decayedusage", "--json", str(out), "--plot", str(png)])
    assert result.exit_code == 0, result.output + result.stderr
    report = json.loads(out.read_text())
    assert list(report["policies"]) == ["assetfairness", "drf", "decayedusage"]
    for name, r in report["policies"].items():
        assert r["policy"] == name and r["queues"]["B"]["finished"] == 50
    # cpu-only jobs: asset fairness and drf measure the same thing and decide the same.
    assert strip_wall(report["policies"]["assetfairness"])["queues"] == \
        strip_wall(report["policies"]["drf"])["queues"]
    assert result.stdout.count("Preemptions") == 1 and all(p in result.stdout for p in report["policies"])
    assert png.exists()


def test_compare_unknown_policy(tmp_path):
    result = CliRunner().invoke(main, ["simulate", "--workload", str(TWO_QUEUES), "--compare", "assetfairness,fair"])
    assert result.exit_code == 2
    assert "unknown plugin 'fair'" in result.stderr
    result = CliRunner().invoke(main, ["simulate", "--workload", str(TWO_QUEUES), "--compare", "bestfit"])
    assert result.exit_code == 2
    assert "'bestfit' cannot be the fairness policy" in result.stderr


def test_until_stops_early(tmp_path):
    out = tmp_path / "u.json"
    result = CliRunner().invoke(main, ["simulate", "--workload", str(TWO_QUEUES), "--until", "5m",
                                       "--json", str(out), "-q"])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["simulatedSeconds"] == 300 and report["stoppedAt"] == "until"
    assert report["queues"]["A"]["finished"] == 0 and report["queues"]["A"]["unfinished"] == 40


def test_no_progress_exits_with_a_clear_message(tmp_path):
    result = cli(tmp_path, None, """
        submissions:
          - {at: 0s, queue: A, count: 2, requests: {cpu: 1}, duration: 1m}
          - {at: 30s, queue: B, count: 1, requests: {cpu: 48}, duration: 1m}
        """, "--json", str(tmp_path / "r.json"))
    assert result.exit_code == EXIT_NO_PROGRESS
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("error: no progress at t=1m: 1 job(s) can never start")
    assert "B-1: 0/2 nodes are available: 2 Insufficient cpu" in line
    partial = json.loads((tmp_path / "r.json").read_text())
    assert partial["queues"]["A"]["finished"] == 2 and "no progress" in partial["error"]


# -- errors: file, field path, expectation, non-zero exit ---------------------------------------
@pytest.mark.parametrize("workload, expected", [
    ("submissions:\n  - {at: 0s, queue: A, count: 1, requests: {cpu: 1}, duration: 1m}\n"
     "  - {at: 0s, queue: C, count: 1, requests: {cpu: 1}, duration: 1m}\n",
     ":3: submissions[1].queue: unknown queue 'C': expected one of the config's queues (A, B)"),
    ("submissions:\n  - at: 0s\n    queue: A\n    duration: soon\n",
     ":4: submissions[0].duration: expected a duration such as 30s, 5m, 2h, 3d or seconds"),
    ("submissions:\n  - {queue: A, requests: {cpu: 1x}, duration: 1m}\n",
     ":2: submissions[0].requests.cpu: expected a quantity such as 500m, 2 or 64Mi, got '1x'"),
    ("submissions:\n  - {queue: A, requests: {cpu: 1}}\n",
     ":2: submissions[0].duration: required field missing"),
    ("submissions:\n  - queue: A\n    cout: 3\n    duration: 1m\n",
     ":3: submissions[0].cout: unknown field 'cout'"),
    ("submissions:\n  - {queue: A, count: 0, duration: 1m}\n",
     ":2: submissions[0].count: Input should be greater than or equal to 1"),
    ("submissions:\n  - {queue: A, count: 5, duration: 1m, gang: {cardinality: 2}}\n",
     ":2: submissions[0].gang.cardinality: count 5 is not a multiple of the gang cardinality 2"),
    ("submissions:\n  - {queue: A, duration: 1m, priorityClass: urgent}\n",
     ":2: submissions[0].priorityClass: unknown priority class 'urgent' (known: armada-default, armada-preemptible)"),
    ("submissions:\n  - {queue: A, duration: 1m, times: 3}\n",
     ":2: submissions[0]: times > 1 needs every"),
    ("submissions: [1, 2\n", ": invalid YAML"),
])
def test_workload_errors_name_file_path_and_expectation(tmp_path, workload, expected):
    result = cli(tmp_path, None, workload)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    line = result.stderr.strip()
    assert line.startswith(f"error: {tmp_path / 'workload.yaml'}"), line
    assert expected in line, line


def test_config_errors_name_file_path_and_expectation(tmp_path):
    workload = "submissions:\n  - {queue: A, duration: 1m}\n"
    result = cli(tmp_path, config_yaml(extra="cycle: {period: 0}\n").replace("cycle: {period: 1s}\n", ""), workload)
    assert result.exit_code == 2 and "flotilla.yaml" in result.stderr and "cycle.period: expected a positive" \
        in result.stderr, result.stderr
    no_sim = config_yaml().split("clusters:")[0] + "clusters:\n  - {name: k, kind: kubernetes}\n"
    result = cli(tmp_path, no_sim, workload)
    assert result.exit_code == 2 and "clusters: simulate needs at least one cluster of kind: simulated" \
        in result.stderr, result.stderr
    result = cli(tmp_path, config_yaml(extra="actions: [evict, allocate]\n").replace(
        "actions: [evict, allocate, preempt, lease]\n", ""), workload)
    assert result.exit_code == 2 and "actions: simulate needs the lease action" in result.stderr, result.stderr
    result = cli(tmp_path, config_yaml(fairness="- {name: decayedusage, args: {priorityHalftime: -1}}"), workload)
    assert result.exit_code == 2 and "plugins[0].args: plugin 'decayedusage': priorityHalftime" in result.stderr, \
        result.stderr


def test_large_example_loads_and_starts():
    config = load_config(ROOT / "examples" / "simulate-large.yaml")
    workload = load_workload(ROOT / "examples" / "workloads" / "large.yaml", config)
    assert workload.total_jobs == 200_000 and len(workload.queues) == 100
    assert len({q.weight for q in workload.queues}) > 1
    assert workload.last_submission < 7 * 86400
    sim, report, _ = simulate(config, workload, until=1800)
    assert sum(len(b.nodes) for b in sim.backends.values()) == 1000
    assert report["simulatedSeconds"] == 1800 and report["stoppedAt"] == "until"
    assert sum(q["finished"] for q in report["queues"].values()) > 0


def test_json_to_stdout_puts_the_table_on_stderr():
    result = CliRunner().invoke(main, ["simulate", "--workload", str(TWO_QUEUES), "--json", "-"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["queues"]["B"]["waitMean"] == 194.4
    assert "Preemptions" in result.stderr


def test_max_skip_caps_the_clock_jumps():
    config = load_config(None)
    workload = load_workload(TWO_QUEUES, config)
    _, report, watch = simulate(config, workload, max_skip=120)
    times = [c[0] for c in watch.cycles]
    assert max(b - a for a, b in zip(times, times[1:])) == 120
    assert report["queues"]["B"]["waitMean"] == 194.4     # same decisions, more cycles


def test_same_report_whatever_the_hash_seed(tmp_path):
    import os
    import subprocess
    import sys

    (tmp_path / "flotilla.yaml").write_text(config_yaml(extra="evict: {probability: 0.5}\n"))
    (tmp_path / "workload.yaml").write_text(textwrap.dedent("""
        submissions:
          - {at: 0s, queue: A, count: 60, priorityClass: armada-preemptible, requests: {cpu: 1}, duration: 4m}
          - {at: 1m, queue: B, count: 60, priorityClass: armada-preemptible, requests: {cpu: 2}, duration: 3m,
             gang: {cardinality: 3}}
        """))
    reports = []
    for hash_seed in ("1", "2"):
        out = tmp_path / f"r{hash_seed}.json"
        subprocess.run([sys.executable, "-m", "flotilla.scheduler_main", "simulate", "--config",
                        str(tmp_path / "flotilla.yaml"), "--workload", str(tmp_path / "workload.yaml"),
                        "--seed", "3", "--json", str(out), "-q"], check=True,
                       env={**os.environ, "PYTHONHASHSEED": hash_seed}, cwd=ROOT)
        reports.append(strip_wall(json.loads(out.read_text())))
    assert reports[0] == reports[1]


# -- the simulator's own upkeep changes nothing it reports ---------------------------------
MIXED_CONFIG = config_yaml(
    queues="[{name: A, weight: 1}, {name: B, weight: 2}, {name: C, weight: 1}]",
    nodes="- {count: 4, namePrefix: small, resources: {cpu: 16, memory: 64Gi}}\n"
          "      - {count: 2, namePrefix: big, resources: {cpu: 32, memory: 128Gi}}",
    # No floor under fair share: the pinned figures below are of the plain evict rule.
    extra="evict: {probability: 0.5, protectedFractionOfFairShare: 0}\n").replace("period: 1s", "period: 30s")
# Preemptible and not, gangs, jobs ending at the same time and between cycles, queues coming and going.
MIXED_WORKLOAD = """
    submissions:
      - {at: 0s, queue: A, count: 40, priorityClass: armada-preemptible, requests: {cpu: 1, memory: 2Gi},
         duration: 7m, every: 5m, times: 8}
      - {at: 2m, queue: B, count: 16, priorityClass: armada-preemptible, requests: {cpu: 2, memory: 4Gi},
         duration: 11m, gang: {cardinality: 4}, every: 9m, times: 5}
      - {at: 3m, queue: C, count: 12, requests: {cpu: 3, memory: 8Gi}, duration: 4m, every: 6m, times: 6}
      - {at: 10m, queue: C, count: 30, priorityClass: armada-preemptible, requests: {cpu: 1}, duration: 90s,
         every: 4m, times: 10}
      - {at: 20m, queue: B, count: 50, priorityClass: armada-preemptible, requests: {cpu: 1}, duration: 5m}
    """


def traced_run(config, workload, **kwargs):
    """The report (without wall time) and every cycle's decisions: (time, [(job, node)], [preempted])."""
    trace = []

    def on_cycle(sim, info):
        check_invariants(sim, info)
        decisions = info.decisions
        trace.append([info.time, sorted((p.job.id, p.node) for p in decisions.scheduled),
                      sorted(job.id for job in decisions.preempted)])

    report = Simulation(config, workload, seed=11, on_cycle=on_cycle, **kwargs).run()
    return strip_wall(report), trace


def test_mixed_run_outcome_is_pinned(tmp_path):
    # Taken before the simulator kept completions in a heap and recorded figures only where they changed:
    # the same seed must give the same decisions and the same report, to the last digit.
    import hashlib

    config, workload = setup(tmp_path, MIXED_CONFIG, MIXED_WORKLOAD)
    report, trace = traced_run(config, workload)
    assert report["cycles"] == 96 and report["simulatedSeconds"] == 3450
    assert (report["utilisation"], report["goodput"]) == (0.866984, 0.755978)
    assert {name: (q["finished"], q["preemptions"], q["waitMean"]) for name, q in report["queues"].items()} == \
        {"A": (320, 107, 353.25), "B": (130, 88, 98.307692), "C": (372, 15, 50.887097)}
    assert (sum(len(c[1]) for c in trace), sum(len(c[2]) for c in trace)) == (1032, 210)
    text = json.dumps({"report": report, "trace": trace}, sort_keys=True)
    assert hashlib.sha256(text.encode()).hexdigest() == \
        "9376031da1a6a502a657fce1c0e7a01213f80cf99e79721c4b003e73f7e59303"


def test_simulated_cluster_runs_as_one_that_scans_every_run(tmp_path):
    # The simulated cluster finds completions in a heap and keeps its running jobs beside its runs; the oracle
    # below looks at every run at each call, as the cluster once did. Same events, same snapshots, so the
    # same decisions in every cycle and the same report.
    from flotilla.core.backend import ClusterUnavailable, SimulatedCluster
    from flotilla.core.model import ClusterSnapshot

    class ScanningCluster(SimulatedCluster):
        def snapshot(self):
            if not self.available:
                raise ClusterUnavailable(self.name)
            self._finish_due()
            return ClusterSnapshot(self.name, list(self.nodes.values()), [run.job for run in self._runs.values()])

        def next_completion(self):
            ends = [run.ends for run in self._runs.values() if run.ends is not None]
            return min(ends) if ends else None

        def running_jobs(self):
            return [run.job for run in self._runs.values()]

        def _finish_due(self):
            now = self.clock()
            due = sorted((run.ends, job_id) for job_id, run in self._runs.items()
                         if run.ends is not None and run.ends <= now)
            for ends, job_id in due:
                self._stop(job_id, "succeeded", ends, "")

    config, workload = setup(tmp_path, MIXED_CONFIG, MIXED_WORKLOAD)
    assert traced_run(config, workload) == traced_run(config, workload, cluster_class=ScanningCluster)
