"""The node wishlist: per node template, the waiting jobs it would unblock and how many nodes would run them."""

from __future__ import annotations

import json

from click.testing import CliRunner

from flotilla.scheduler_main import main
from tests.support.scenario import config, invoke


def wishlist(tmp_path):
    """``flotilla wishlist`` on the files ``invoke`` wrote."""
    return CliRunner().invoke(main, ["wishlist", "--config", str(tmp_path / "flotilla.yaml"),
                                     "--state", str(tmp_path / "state.yaml")])

TEMPLATES = """
nodeTemplates:
  - {name: cpu-16, cluster: c1, resources: {cpu: 16, memory: 64Gi}}
  - {name: cpu-64, cluster: c1, resources: {cpu: 64, memory: 256Gi}}
  - {name: gpu-8, cluster: c1, resources: {cpu: 32, memory: 128Gi, nvidia.com/gpu: 8}, labels: {kind: gpu},
     taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]}
"""

# A full 4-core node. Waiting: ten 4-core jobs, one 32-core job, a gang of three 12-core jobs, two 1-gpu jobs
# that tolerate the gpu taint and select kind=gpu, and one job too big for every template.
STATE = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 4, memory: 16Gi}}
jobs:
  - {id: r-1, queue: A, requests: {cpu: 4}, state: running, node: node-1}
""" + "\n".join(f"  - {{id: s-{i}, queue: A, requests: {{cpu: 4}}, submitted: {i}}}" for i in range(1, 11)) + """
  - {id: big, queue: A, requests: {cpu: 32}, submitted: 20}
  - {id: g-1, queue: B, requests: {cpu: 12}, gang: {id: g, cardinality: 3}, submitted: 21}
  - {id: g-2, queue: B, requests: {cpu: 12}, gang: {id: g, cardinality: 3}, submitted: 21}
  - {id: g-3, queue: B, requests: {cpu: 12}, gang: {id: g, cardinality: 3}, submitted: 21}
  - {id: gpu-1, queue: B, requests: {cpu: 4, nvidia.com/gpu: 1}, nodeSelector: {kind: gpu}, submitted: 22,
     tolerations: [{key: nvidia.com/gpu, operator: Exists}]}
  - {id: gpu-2, queue: B, requests: {cpu: 4, nvidia.com/gpu: 1}, nodeSelector: {kind: gpu}, submitted: 23,
     tolerations: [{key: nvidia.com/gpu, operator: Exists}]}
  - {id: huge, queue: B, requests: {cpu: 128}, submitted: 24}
"""


def test_exact_counts_per_template(tmp_path):
    invoke(tmp_path, config(extra=TEMPLATES), STATE)  # writes the two files (and runs schedule-once on them)
    result = wishlist(tmp_path)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["templates"] == {
        # The gang (3 x 12) and the ten 4-core jobs; not the 32-core one. Largest first: 12+4 on each of
        # three nodes, then the seven other 4s four to a node: 3 + 2 = 5 nodes.
        "cpu-16": {"cluster": "c1", "jobs": 13, "nodes": 5},
        # Everything but the gpu jobs and huge: 32+12+12 (+4+4) on one node, 12 and eight 4s on the next.
        "cpu-64": {"cluster": "c1", "jobs": 14, "nodes": 2},
        # Only the two gpu jobs select and tolerate it.
        "gpu-8": {"cluster": "c1", "jobs": 2, "nodes": 1},
    }
    assert out["unfit"] == {"huge": "fits no node: cpu 128 > largest 64"}


def test_no_templates_is_a_clear_error(tmp_path):
    invoke(tmp_path, config(), STATE)
    result = wishlist(tmp_path)
    assert result.exit_code != 0
    assert "the config lists no nodeTemplates: nothing to wish for" in result.stderr


def test_the_service_publishes_the_wishlist_and_its_metrics(tmp_path):
    from fastapi.testclient import TestClient

    from flotilla.scheduler import Scheduler
    from flotilla.service.loop import service_backends
    from flotilla.service.server import build_service
    from tests.support.service import config as service_config, headers, job, job_file
    from tests.support.metrics import Clock, only, scrape

    cfg = service_config("""
        nodeTemplates:
          - {name: cpu-16, cluster: c2, resources: {cpu: 16, memory: 64Gi}}
          - {name: cpu-8, cluster: c2, resources: {cpu: 8, memory: 32Gi}}
        """)
    service = build_service(cfg, Scheduler(cfg), store_url=f"sqlite:///{tmp_path}/w.db",
                            backends=service_backends(cfg, clock=Clock()), seed=0)
    client = TestClient(service.app)
    # 32 cores of 8-core nodes: A's six 8-core jobs, B's 4-core job, a 16-core one and a 64-core one.
    client.post("/v1/submit", json=job_file("A", "s1", [job(f"a{i}", cpu="8") for i in range(6)]),
                headers=headers("alice"))
    answer = client.post("/v1/submit", json=job_file("B", "s2", [job("b0", cpu="4"), job("b1", cpu="16"),
                                                                 job("b2", cpu="64")]), headers=headers("bob"))
    huge = answer.json()["jobs"][2]["id"]
    assert service.runner.cycle()
    response = client.get("/v1/wishlist", headers=headers("root"))
    assert response.status_code == 200
    # Waiting: three 8-core jobs, the 16-core one, the 64-core one. cpu-16: 16 | 8 8 | 8 -> 3 nodes.
    assert response.json() == {
        "templates": {"cpu-16": {"cluster": "c2", "jobs": 4, "nodes": 3}, "cpu-8": {"cluster": "c2", "jobs": 3, "nodes": 3}},
        "unfit": {huge: "fits no node: cpu 64 > largest 16"}}
    # A tenant sees only their queues' jobs: alice A's three 8-core jobs (8 8 | 8 on cpu-16), bob B's 16-core one
    # and his unfit job; dave, who may act in no queue, nothing.
    assert client.get("/v1/wishlist", headers=headers("alice")).json() == {
        "templates": {"cpu-16": {"cluster": "c2", "jobs": 3, "nodes": 2}, "cpu-8": {"cluster": "c2", "jobs": 3, "nodes": 3}},
        "unfit": {}}
    assert client.get("/v1/wishlist", headers=headers("bob")).json() == {
        "templates": {"cpu-16": {"cluster": "c2", "jobs": 1, "nodes": 1}, "cpu-8": {"cluster": "c2", "jobs": 0, "nodes": 0}},
        "unfit": {huge: "fits no node: cpu 64 > largest 16"}}
    assert client.get("/v1/wishlist", headers=headers("dave")).json() == {
        "templates": {"cpu-16": {"cluster": "c2", "jobs": 0, "nodes": 0}, "cpu-8": {"cluster": "c2", "jobs": 0, "nodes": 0}},
        "unfit": {}}
    samples = scrape(client)
    assert only(samples, "flotilla_wishlist_jobs") == {(("cluster", "c2"), ("template", "cpu-16")): 4.0,
                                                       (("cluster", "c2"), ("template", "cpu-8")): 3.0}
    assert only(samples, "flotilla_wishlist_nodes") == {(("cluster", "c2"), ("template", "cpu-16")): 3.0,
                                                        (("cluster", "c2"), ("template", "cpu-8")): 3.0}
    service.close()


def test_the_example_files(tmp_path):
    from pathlib import Path

    examples = Path(__file__).resolve().parents[2] / "examples"
    result = CliRunner().invoke(main, ["wishlist", "--config", str(examples / "wishlist.yaml"),
                                       "--state", str(examples / "wishlist-state.yaml")])
    assert json.loads(result.stdout) == {
        "templates": {"cpu-16": {"cluster": "sim", "jobs": 6, "nodes": 2}, "cpu-64": {"cluster": "sim", "jobs": 7, "nodes": 1}},
        "unfit": {"huge": "fits no node: cpu 100 > largest 64"}}


FREE_ROOM_TEMPLATES = """
nodeTemplates:
  - {name: cpu-16, cluster: c1, resources: {cpu: 16, memory: 64Gi}}
"""

# node-1 has 6 of its 16 cores free: room for one member of a gang of three 6-core jobs, not for all three.
FREE_ROOM_STATE = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 16, memory: 64Gi}}
jobs:
  - {id: r-1, queue: A, requests: {cpu: 10}, state: running, node: node-1}
  - {id: g-1, queue: B, requests: {cpu: 6}, gang: {id: g, cardinality: 3}, submitted: 1}
  - {id: g-2, queue: B, requests: {cpu: 6}, gang: {id: g, cardinality: 3}, submitted: 1}
  - {id: g-3, queue: B, requests: {cpu: 6}, gang: {id: g, cardinality: 3}, submitted: 1}
"""


def wish(tmp_path, state, templates=FREE_ROOM_TEMPLATES, queues="queues: [{name: A}, {name: B}]"):
    result = CliRunner().invoke(main, ["wishlist", "--config", str(write(tmp_path, config(queues, extra=templates))),
                                       "--state", str(write(tmp_path, state, "state.yaml"))])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def write(tmp_path, text, name="flotilla.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_gang_counts_the_free_room_on_existing_nodes(tmp_path):
    # One member on node-1's 6 free cores, two on one new 16-core node (without the free room: 6+6, 6 on two).
    assert wish(tmp_path, FREE_ROOM_STATE) == {"templates": {"cpu-16": {"cluster": "c1", "jobs": 3, "nodes": 1}},
                                               "unfit": {}}


def test_the_free_room_is_what_the_cycle_leaves(tmp_path):
    # s-1 starts on node-1 in the cycle (4 cores): 2 are left, no member fits there; 6+6 and 6 need two nodes.
    state = FREE_ROOM_STATE + "  - {id: s-1, queue: A, requests: {cpu: 4}, submitted: 0}\n"
    assert wish(tmp_path, state) == {"templates": {"cpu-16": {"cluster": "c1", "jobs": 3, "nodes": 2}}, "unfit": {}}


def test_a_job_that_fits_the_free_room_is_not_credited_but_takes_it(tmp_path):
    # A's limit (half the 16-core pool) holds s-2 back although node-1 has room: no template would help it.
    # It is ahead of the gang (queue A before B), so the gang's members find only 4 free cores: two nodes.
    state = FREE_ROOM_STATE + "  - {id: s-2, queue: A, requests: {cpu: 2}, submitted: 0}\n"
    out = wish(tmp_path, state, queues="queues: [{name: A, limits: {cpu: 0.5}}, {name: B}]")
    assert out == {"templates": {"cpu-16": {"cluster": "c1", "jobs": 3, "nodes": 2}}, "unfit": {}}


def test_free_room_the_job_may_not_use_is_not_counted(tmp_path):
    # The 6 free cores are on another cluster (a gang never spans clusters), or behind a taint the gang does
    # not tolerate: two new nodes either way.
    other = FREE_ROOM_STATE.replace("jobs:", "  - name: c2\n    nodes:\n"
                                             "      - {name: node-9, resources: {cpu: 6, memory: 64Gi}}\njobs:")
    other = other.replace("{name: node-1, resources: {cpu: 16,", "{name: node-1, resources: {cpu: 10,")
    other = other.replace("node: node-1}", "node: node-1, cluster: c1}")
    assert wish(tmp_path, other) == {"templates": {"cpu-16": {"cluster": "c1", "jobs": 3, "nodes": 2}}, "unfit": {}}
    tainted = FREE_ROOM_STATE.replace("memory: 64Gi}}", "memory: 64Gi}, taints: [{key: team, value: x}]}", 1)
    tainted = tainted.replace("  - {id: r-1, queue: A,", "  - {id: r-1, queue: A, tolerations: [{key: team, operator: Exists}],")
    assert wish(tmp_path, tainted) == {"templates": {"cpu-16": {"cluster": "c1", "jobs": 3, "nodes": 2}}, "unfit": {}}


def test_the_documented_free_room_example():
    from tests.support.docs import commands, run_documented, section

    argv = [a for a in commands(section("policies.md", "The node wishlist")) if a[-1].endswith("wishlist-gang-state.yaml")]
    assert len(argv) == 1
    assert run_documented(argv[0]) == {"templates": {"cpu-16": {"cluster": "sim", "jobs": 3, "nodes": 1},
                                                     "cpu-64": {"cluster": "sim", "jobs": 3, "nodes": 1}},
                                       "unfit": {}}


def test_first_fit_decreasing_packs_as_plain_first_fit_decreasing():
    import random

    from flotilla.core.wishlist import first_fit_decreasing

    def plain(vectors, capacity):
        nodes = []
        for vec in sorted(vectors, reverse=True):
            for free in nodes:
                if all(a <= f for a, f in zip(vec, free)):
                    break
            else:
                free = list(capacity)
                nodes.append(free)
            for r, amount in enumerate(vec):
                free[r] -= amount
        return len(nodes)

    rng = random.Random(7)
    shapes = [(1000, 4), (2000, 8), (4000, 16), (500, 1), (8000, 2), (3000, 30)]
    for _ in range(200):
        vectors = [rng.choice(shapes) for _ in range(rng.randrange(1, 80))]
        capacity = (rng.choice([8000, 16000]), rng.choice([32, 64]))
        assert first_fit_decreasing(vectors, capacity) == plain(vectors, capacity)
    assert first_fit_decreasing([(6, 0)] * 3, (16, 0)) == 2
