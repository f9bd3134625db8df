"""Hierarchical queues: fair shares down the tree, level-by-level filling, limits at every level."""

from __future__ import annotations

from tests.support.scenario import config, invoke, jobs, placements, run_once

# Two organisations weigh 1:1; org-a's teams weigh 1:3.
TREE = """
queues:
  - {name: org-a, weight: 1}
  - {name: org-b, weight: 1}
  - {name: team-1, weight: 1, parent: org-a}
  - {name: team-2, weight: 3, parent: org-a}
"""

NODES = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 32}}
      - {name: node-2, resources: {cpu: 32}}
jobs:
"""


def busy(prefix: str, queue: str, count: int = 64, **kwargs) -> str:
    return jobs(prefix, count, queue, **kwargs) + "\n"


def test_busy_tree_fills_to_one_half_one_eighth_three_eighths(tmp_path):
    state = NODES + busy("a", "team-1") + busy("b", "team-2") + busy("c", "org-b")
    out = run_once(tmp_path, config(queues=TREE), state)
    scheduled = placements(out)
    assert [sum(j.startswith(p) for j in scheduled) for p in "abc"] == [8, 24, 32]
    # Each queue's first jobs in submission order.
    assert {j for j in scheduled if j.startswith("a-")} == {f"a-{i}" for i in range(1, 9)}
    assert out["queues"] == {
        "org-a": {"fairShare": 0.5, "share": 0.5, "allocated": {"cpu": "32"}},
        "org-b": {"fairShare": 0.5, "share": 0.5, "allocated": {"cpu": "32"}},
        "team-1": {"fairShare": 0.125, "share": 0.125, "allocated": {"cpu": "8"}, "parent": "org-a"},
        "team-2": {"fairShare": 0.375, "share": 0.375, "allocated": {"cpu": "24"}, "parent": "org-a"},
    }


def test_inactive_sibling_leaves_its_share_inside_its_parent(tmp_path):
    # team-1 has nothing: team-2 gets all of org-a's half, not more.
    state = NODES + busy("b", "team-2") + busy("c", "org-b")
    out = run_once(tmp_path, config(queues=TREE), state)
    assert out["queues"]["team-2"]["fairShare"] == 0.5 and out["queues"]["team-1"]["fairShare"] == 0
    scheduled = placements(out)
    assert [sum(j.startswith(p) for j in scheduled) for p in "bc"] == [32, 32]


def running(prefix: str, queue: str, count: int, node: str, start: int = 1) -> str:
    return "\n".join(
        f"  - {{id: {prefix}-{i}, queue: {queue}, priorityClass: armada-preemptible, requests: {{cpu: 1}}, "
        f"submitted: {i}, state: running, node: {node}}}" for i in range(start, start + count)) + "\n"


def test_eviction_moves_no_job_when_the_shares_already_hold(tmp_path):
    state = (NODES + running("a", "team-1", 8, "node-1") + running("b", "team-2", 24, "node-1")
             + running("c", "org-b", 32, "node-2")
             + busy("qa", "team-1", 10, submitted=100) + busy("qb", "team-2", 10, submitted=100)
             + busy("qc", "org-b", 10, submitted=100))
    out = run_once(tmp_path, config(queues=TREE), state)
    assert out["scheduled"] == [] and out["preempted"] == []
    assert out["queues"]["team-1"]["share"] == 0.125 and out["queues"]["org-a"]["share"] == 0.5


def test_preemption_to_fair_share_follows_the_tree(tmp_path):
    # team-2 ran the whole of org-a's half and org-b's half is idle: team-1 arrives and takes back its
    # eighth from team-2 (its sibling), not from org-b.
    state = (NODES + running("b", "team-2", 32, "node-1") + running("c", "org-b", 32, "node-2")
             + busy("qa", "team-1", 20, submitted=100) + busy("qc", "org-b", 10, submitted=100))
    out = run_once(tmp_path, config(queues=TREE), state)
    assert placements(out) == {f"qa-{i}": "node-1" for i in range(1, 9)}
    assert out["preempted"] == [f"b-{i}" for i in range(25, 33)]


def test_limits_hold_at_every_level(tmp_path):
    queues = TREE.replace("{name: org-a, weight: 1}", "{name: org-a, weight: 1, limits: {cpu: 0.25}}")
    state = NODES + busy("a", "team-1") + busy("b", "team-2")
    out = run_once(tmp_path, config(queues=queues), state)
    scheduled = placements(out)
    assert len(scheduled) == 16  # a quarter of 64 cores, shared 1:3 inside org-a
    assert [sum(j.startswith(p) for j in scheduled) for p in "ab"] == [4, 12]
    assert out["reasons"]["a-5"] == "queue org-a at its cpu limit 0.25"


def test_jobs_go_to_leaf_queues_only(tmp_path):
    result = invoke(tmp_path, config(queues=TREE), NODES + busy("a", "org-a", 1))
    assert result.exit_code == 2
    assert "jobs[0].queue: queue 'org-a' has child queues; only leaf queues hold jobs" in result.stderr


def test_unknown_parent_and_cycles_are_config_errors(tmp_path):
    result = invoke(tmp_path, config(queues="queues: [{name: A, parent: B}]"), NODES)
    assert result.exit_code == 2
    assert "queues[0].parent: unknown parent queue 'B' (known: A)" in result.stderr
    result = invoke(tmp_path, config(queues="queues: [{name: A, parent: B}, {name: B, parent: A}]"), NODES)
    assert result.exit_code == 2
    assert "queues[0].parent: queue parents form a cycle: A -> B -> A" in result.stderr


def test_simulate_converges_to_the_tree_shares(tmp_path):
    from tests.support.simulate import config_yaml, setup, simulate

    queues = ("[{name: org-a, weight: 1}, {name: org-b, weight: 1}, {name: team-1, weight: 1, parent: org-a}, "
              "{name: team-2, weight: 3, parent: org-a}]")
    config, workload = setup(tmp_path, config_yaml(queues=queues), """
        submissions:
          - {at: 0s, queue: team-1, count: 300, priorityClass: armada-preemptible, requests: {cpu: 1}, duration: 5m}
          - {at: 30s, queue: team-2, count: 600, priorityClass: armada-preemptible, requests: {cpu: 1}, duration: 5m}
          - {at: 60s, queue: org-b, count: 600, priorityClass: armada-preemptible, requests: {cpu: 1}, duration: 5m}
        """)
    _, report, watch = simulate(config, workload)
    busy = [c for c in watch.cycles if all(c[3][q] > 0 for q in ("team-1", "team-2", "org-b"))]
    assert busy and busy[0][0] == 60
    expected = {"org-a": 0.5, "org-b": 0.5, "team-1": 0.125, "team-2": 0.375}
    for t, _, shares, _ in busy:  # from the first cycle in which all three are backlogged on
        assert all(abs(shares[q] - expected[q]) <= 0.03 for q in expected), (t, shares)
    # A parent's figures are its children's sums; each child names its parent.
    assert report["queues"]["org-a"]["submitted"] == 900 and "parent" not in report["queues"]["org-a"]
    assert report["queues"]["team-1"]["parent"] == "org-a"
    assert all(q["finished"] == q["submitted"] for q in report["queues"].values())


def test_the_service_schedules_and_lists_the_tree(tmp_path):
    """Config-file parents reach the service: the tree's shares, the queue list, jobs refused on a parent."""
    from fastapi.testclient import TestClient

    from flotilla.scheduler import Scheduler
    from flotilla.service.loop import service_backends
    from flotilla.service.server import build_service
    from tests.support.service import headers, job, job_file, tree_config
    from tests.support.metrics import Clock

    cfg = tree_config()
    service = build_service(cfg, Scheduler(cfg), store_url=f"sqlite:///{tmp_path}/t.db",
                            backends=service_backends(cfg, clock=Clock()), seed=0)
    client = TestClient(service.app)
    listed = {q["name"]: q["parent"] for q in client.get("/v1/queues", headers=headers("alice")).json()["queues"]}
    assert listed == {"A": None, "B": None, "A1": "A", "A2": "A"}
    refused = client.post("/v1/submit", json=job_file("A", "s", [job("x")]), headers=headers("alice"))
    assert refused.status_code == 422
    assert refused.json()["error"]["message"] == "queue 'A' has child queues; only leaf queues hold jobs"
    # 32 cores; everyone backlogged with 1-core jobs: B 16, A1 4, A2 12.
    for queue, user in (("A1", "alice"), ("A2", "alice"), ("B", "bob")):
        client.post("/v1/submit", json=job_file(queue, "s", [job(f"{queue}-{i}") for i in range(40)]),
                    headers=headers(user))
    assert service.runner.cycle()
    queues = service.loop.last_decisions.queues
    assert {name: (q.fair_share, q.parent) for name, q in queues.items()} == {
        "A": (0.5, None), "B": (0.5, None), "A1": (0.125, "A"), "A2": (0.375, "A")}
    assert {name: q.allocated for name, q in queues.items()} == {
        "A": {"cpu": "16"}, "B": {"cpu": "16"}, "A1": {"cpu": "4"}, "A2": {"cpu": "12"}}
    service.close()
