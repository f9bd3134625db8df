"""A plugin that fails is isolated, named and counted: the job or queue it was asked about waits with the reason
``plugin NAME failed at POINT: ExcType: message``; everything else in the cycle proceeds."""

from __future__ import annotations

import sys

import pytest

from tests.support.scenario import config, install_distribution, invoke, placements, run_once

QUEUES = "queues: [{name: Q1, weight: 1}, {name: Q2, weight: 1}, {name: Q3, weight: 1}]"

PLUGINS = """
plugins:
  - name: bestfit
  - name: badfair
  - name: gang
  - name: priorityclass
"""

#: A fairness policy (asset fairness by cpu) that fails for some queues, as its ``fail`` arg says per queue.
POLICY = '''
from flotilla.plugin import hookimpl


class BadFair:
    def __init__(self, args):
        self.fail = dict(args.get("fail", {}))
        self.point = args.get("point", "queue_order")
        self.opened = args.get("open", False)

    @hookimpl
    def flotilla_session_open(self, session):
        if self.opened and session.snapshot.queued:   # an empty snapshot (the check at load) opens
            raise RuntimeError("cannot reach the quota service")
        fail = self.fail

        def key(queue, extra):
            how = fail.get(queue.name)
            if how == "raise":
                raise KeyError(queue.name)
            if how == "nan":
                return float("nan")
            if how == "none":
                return None
            if how == "tuple":
                return (1.0, 0.0)
            used = queue.allocated[0] + (extra[0] if extra is not None else 0)
            return used / queue.fair_share

        def valid(job):
            how = fail.get(job.id)
            if how == "raise":
                raise ValueError(f"no quota record for {job.id}")
            if how == "int":
                return 7
            return None

        def score(job, node):
            if fail.get(job.id) == "score":
                return float("inf")
            return 0.0

        def order(job):
            if fail.get(job.id) == "order":
                raise IndexError("no rank")
            return ()

        def tiers(queue):
            return ["own", "unsued"] if fail.get(queue.name) == "tiers" else ["any"]

        def allocated(job, node):
            if fail.get(job.id) == "event":
                raise RuntimeError("ledger closed")

        session.add_queue_order(key)
        session.add_job_valid(valid)
        session.add_node_score(score)
        session.add_job_order(order)
        session.set_node_tiers(tiers)
        session.add_event_handler(on_allocate=allocated)
'''


@pytest.fixture
def badfair(tmp_path, monkeypatch):
    install_distribution(tmp_path / "site", "badfair_plugin", POLICY, "flotilla.plugins",
                         "badfair = badfair_plugin:BadFair")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    yield
    sys.modules.pop("badfair_plugin", None)


def state(queues=("Q1", "Q2", "Q3"), per_queue=4, nodes=2) -> str:
    lines = ["clusters:", "  - name: c1", "    nodes:",
             *[f"      - {{name: n{i}, resources: {{cpu: 4}}}}" for i in range(1, nodes + 1)], "jobs:"]
    for q in queues:
        for i in range(1, per_queue + 1):
            lines.append(f"  - {{id: {q.lower()}-{i}, queue: {q}, requests: {{cpu: 1}}, submitted: {i}}}")
    return "\n".join(lines) + "\n"


def plugins(args: str) -> str:
    return PLUGINS.replace("  - name: badfair\n", f"  - name: badfair\n    args: {args}\n")


def test_a_job_order_failing_for_one_job_a_node_tiers_failing_for_a_queue_and_an_event_handler(tmp_path, badfair):
    # q1-2's order fails: it waits, its queue is ordered without it. Q2's tiers name an unknown tier: Q2 is out.
    # q3-1's on_allocate handler raises after it is placed: the placement stands.
    out = run_once(tmp_path, config(QUEUES, plugins("{fail: {q1-2: order, Q2: tiers, q3-1: event}}")),
                   state(nodes=3))
    assert sorted(placements(out)) == ["q1-1", "q1-3", "q1-4", "q3-1", "q3-2", "q3-3", "q3-4"]
    q2 = "plugin badfair failed at node_tiers: TypeError: answered ['own', 'unsued'], not a sequence of own, unused, " \
         "used, any"
    assert out["reasons"] == {"q1-2": "plugin badfair failed at job_order: IndexError: no rank",
                              **{f"q2-{i}": q2 for i in range(1, 5)}}


def test_a_policy_raising_for_q2_and_nan_for_q3_leaves_them_out_in_schedule_once(tmp_path, badfair):
    out = run_once(tmp_path, config(QUEUES, plugins("{fail: {Q2: raise, Q3: nan}}")), state())
    alone = run_once(tmp_path, config(QUEUES, plugins("{fail: {}}")), state(queues=("Q1",)))
    # Q1 is placed as if Q2 and Q3 were absent: all four of its jobs, on the same nodes.
    assert placements(out) == placements(alone) == {"q1-1": "n1", "q1-2": "n1", "q1-3": "n1", "q1-4": "n1"}
    q2 = "plugin badfair failed at queue_order: KeyError: 'Q2'"
    q3 = "plugin badfair failed at queue_order: ValueError: answered nan, not a finite number"
    assert out["reasons"] == {**{f"q2-{i}": q2 for i in range(1, 5)}, **{f"q3-{i}": q3 for i in range(1, 5)}}


@pytest.mark.parametrize("how, reason", [
    ("none", "TypeError: answered None, not a number"),
    ("tuple", "TypeError: answered (1.0, 0.0) where earlier answers were numbers"),
])
def test_a_queue_order_answering_none_or_mixing_kinds_is_that_queues_failure(tmp_path, badfair, how, reason):
    out = run_once(tmp_path, config(QUEUES, plugins(f"{{fail: {{Q3: {how}}}}}")), state(queues=("Q1", "Q2", "Q3")))
    assert sorted(placements(out)) == ["q1-1", "q1-2", "q1-3", "q1-4", "q2-1", "q2-2", "q2-3", "q2-4"]
    assert out["reasons"] == {f"q3-{i}": f"plugin badfair failed at queue_order: {reason}" for i in range(1, 5)}


TREE = "queues: [{name: org, weight: 1}, {name: Q1, weight: 1, parent: org}, {name: Q2, weight: 1, parent: org}, " \
       "{name: Q3, weight: 1, parent: org}]"


@pytest.mark.parametrize("fail, reasons", [
    ("{Q2: raise, Q3: nan}", {"Q2": "KeyError: 'Q2'", "Q3": "ValueError: answered nan, not a finite number"}),
    ("{Q3: none}", {"Q3": "TypeError: answered None, not a number"}),
    ("{Q3: tuple}", {"Q3": "TypeError: answered (1.0, 0.0) where earlier answers were numbers"}),
])
def test_in_a_queue_tree_a_failing_key_leaves_its_queue_out(tmp_path, badfair, fail, reasons):
    # The tree picker asks the policy's key per queue on a unit's path and checks each answer as the guard does.
    out = run_once(tmp_path, config(TREE, plugins(f"{{fail: {fail}}}")), state())
    placed = [q for q in ("Q1", "Q2", "Q3") if q not in reasons]
    assert sorted(placements(out)) == [f"{q.lower()}-{i}" for q in placed for i in range(1, 5)]
    assert out["reasons"] == {f"{q.lower()}-{i}": f"plugin badfair failed at queue_order: {why}"
                              for q, why in reasons.items() for i in range(1, 5)}


def test_a_job_point_failing_leaves_that_job_waiting_and_the_rest_placed(tmp_path, badfair):
    out = run_once(tmp_path, config(QUEUES, plugins("{fail: {q1-2: raise, q2-1: int, q3-3: score}}")),
                   state(nodes=3))
    assert sorted(placements(out)) == ["q1-1", "q1-3", "q1-4", "q2-2", "q2-3", "q2-4", "q3-1", "q3-2", "q3-4"]
    assert out["reasons"] == {
        "q1-2": "plugin badfair failed at job_valid: ValueError: no quota record for q1-2",
        "q2-1": "plugin badfair failed at job_valid: TypeError: answered 7, not None or a string",
        "q3-3": "plugin badfair failed at node_score: ValueError: answered inf, not a finite number",
    }


def test_a_session_open_failure_fails_the_cycle_closed(tmp_path, badfair):
    result = invoke(tmp_path, config(QUEUES, plugins("{open: true}")), state())
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.splitlines()[-1] == (
        "error: the cycle failed closed (nothing decided): plugin badfair failed at flotilla_session_open: "
        "RuntimeError: cannot reach the quota service")


def test_a_session_open_failure_at_load_is_a_config_error(tmp_path, badfair):
    policy = POLICY.replace("if self.opened and session.snapshot.queued:", "if self.opened:")
    install_distribution(tmp_path / "site2", "badfair_plugin2", policy, "flotilla.plugins",
                         "badfair2 = badfair_plugin2:BadFair")
    sys.path.insert(0, str(tmp_path / "site2"))
    try:
        result = invoke(tmp_path, config(QUEUES, plugins("{open: true}").replace("badfair", "badfair2")), state())
    finally:
        sys.path.remove(str(tmp_path / "site2"))
        sys.modules.pop("badfair_plugin2", None)
    assert result.exit_code == 2
    assert result.stderr == (f"error: {tmp_path / 'flotilla.yaml'}:4: plugins[1].name: plugin badfair2 failed at "
                             "flotilla_session_open: RuntimeError: cannot reach the quota service\n")


SERVE_CONFIG = """
priorityClasses:
  - {name: armada-default, priority: 30000, preemptible: false}
defaultPriorityClass: armada-default
queues: [{name: Q1, weight: 1}, {name: Q2, weight: 1}, {name: Q3, weight: 1}]
plugins:
  - name: badfair
    args: {fail: {Q2: raise, Q3: nan}}
  - name: bestfit
  - name: gang
  - name: priorityclass
evict: {probability: 0}
cycle: {period: 0.2s, unreadyAfterFailedCycles: 2}
clusters:
  - name: c1
    kind: simulated
    nodes: [{count: 2, namePrefix: n, resources: {cpu: 4, memory: 16Gi}}]
"""


class Clock:
    def __init__(self, now: float = 1_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def serve(tmp_path, text: str):
    from fastapi.testclient import TestClient

    from flotilla.config import parse_config
    from flotilla.scheduler import Scheduler
    from flotilla.service.loop import service_backends
    from flotilla.service.server import build_service

    cfg = parse_config(text, "flotilla.yaml")
    clock = Clock()
    scheduler = Scheduler(cfg)
    scheduler.clock = clock
    service = build_service(cfg, scheduler, store_url=f"sqlite:///{tmp_path}/s.db",
                            backends=service_backends(cfg, scheduler.pm), seed=0)
    return service, TestClient(service.app, base_url="http://127.0.0.1"), clock


def submit(client, queue: str, count: int) -> list[str]:
    from tests.support.service import job, job_file

    body = job_file(queue, "s", [job(f"{queue.lower()}-{i}") for i in range(1, count + 1)])
    response = client.post("/v1/submit", json=body)
    assert response.status_code == 200, response.text
    return [item["id"] for item in response.json()["jobs"]]


def plugin_samples(client) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            if sample.name == "flotilla_plugin_errors_total":
                out[(sample.labels["plugin"], sample.labels["point"])] = sample.value
    return out


def test_serve_isolates_the_failing_queues_counts_logs_once_a_minute_and_shows_the_plugin(tmp_path, badfair):
    import structlog

    service, client, clock = serve(tmp_path, SERVE_CONFIG)
    ids = {queue: submit(client, queue, 3) for queue in ("Q1", "Q2", "Q3")}
    with structlog.testing.capture_logs() as logs:
        for _ in range(3):
            assert service.runner.cycle()
            clock.now += 1
    states = {job_id: client.get(f"/v1/jobs/{job_id}").json() for queue in ids.values() for job_id in queue}
    # Q1's jobs run where they would were Q2 and Q3 absent: the first node, bestfit's least free space.
    assert {job_id: (states[job_id]["state"], states[job_id]["node"]) for job_id in ids["Q1"]} == \
        dict.fromkeys(ids["Q1"], ("running", "n-1"))
    q2 = "plugin badfair failed at queue_order: KeyError: 'Q2'"
    q3 = "plugin badfair failed at queue_order: ValueError: answered nan, not a finite number"
    assert {job_id: (states[job_id]["state"], states[job_id]["reason"]) for job_id in ids["Q2"] + ids["Q3"]} == {
        **{job_id: ("queued", q2) for job_id in ids["Q2"]}, **{job_id: ("queued", q3) for job_id in ids["Q3"]}}
    # Each cycle asks the policy once for Q2 and once for Q3 (their first offers), and both fail.
    assert plugin_samples(client) == {("badfair", "queue_order"): 6.0}
    status = client.get("/v1/status").json()["plugins"]
    assert status == {"failedCycles": 0, "failing": [
        {"plugin": "badfair", "point": "queue_order", "error": "KeyError: 'Q2'", "failures": 1},
        {"plugin": "badfair", "point": "queue_order", "error": "ValueError: answered nan, not a finite number",
         "failures": 1}]}
    # One line per distinct error within the minute, whatever the number of cycles.
    failed = [entry for entry in logs if entry["event"] == "plugin.failed"]
    assert [(entry["error"], entry["failures"]) for entry in failed] == [
        ("KeyError: 'Q2'", 1), ("ValueError: answered nan, not a finite number", 1)]
    # A minute on, each is logged again with the failures it stands for.
    clock.now += 60
    with structlog.testing.capture_logs() as logs:
        assert service.runner.cycle()
    failed = [entry for entry in logs if entry["event"] == "plugin.failed"]
    assert [(entry["error"], entry["failures"]) for entry in failed] == [
        ("KeyError: 'Q2'", 3), ("ValueError: answered nan, not a finite number", 3)]
    assert client.get("/readyz").status_code == 200
    # The dashboard's queue page says which plugins fail, and how.
    page = client.get("/ui").text
    assert '<section id="plugins-failing" class="warning">' in page
    assert "<tr><td>badfair</td><td>queue_order</td><td class=\"num\">1</td><td>KeyError: &#39;Q2&#39;</td></tr>" in page
    assert cli_status(service) == [
        "plugins failing: 2",
        "PLUGIN   POINT        FAILURES  ERROR",
        "badfair  queue_order  1         KeyError: 'Q2'",
        "badfair  queue_order  1         ValueError: answered nan, not a finite number"]


def cli_status(service) -> list[str]:
    """``flotilla status`` (no job) against ``service`` served on a free port."""
    import threading

    import uvicorn
    from click.testing import CliRunner

    from flotilla.scheduler_main import main
    from tests.support.serve import free_port

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(service.app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            thread.join(0.05)
        result = CliRunner().invoke(main, ["status", "--url", f"http://127.0.0.1:{port}"])
        assert result.exit_code == 0, result.output
        return result.output.splitlines()
    finally:
        server.should_exit = True
        thread.join(10)


def test_serve_fails_closed_on_a_session_open_failure_and_readyz_follows(tmp_path, badfair):
    service, client, clock = serve(tmp_path, SERVE_CONFIG.replace("args: {fail: {Q2: raise, Q3: nan}}",
                                                                  "args: {open: true}"))
    ids = submit(client, "Q1", 2)
    assert not service.runner.cycle()
    assert client.get("/readyz").status_code == 200     # one failed cycle of the two allowed
    assert not service.runner.cycle()
    ready = client.get("/readyz")
    assert ready.status_code == 503
    reason = "plugin badfair failed at flotilla_session_open: RuntimeError: cannot reach the quota service"
    assert ready.json()["reason"] == f"2 cycles in a row failed closed: {reason}"
    assert {client.get(f"/v1/jobs/{job_id}").json()["state"] for job_id in ids} == {"queued"}
    assert plugin_samples(client) == {("badfair", "flotilla_session_open"): 2.0}
    assert client.get("/v1/status").json()["plugins"] == {
        "failedCycles": 2, "cycleFailed": reason, "failing": [
            {"plugin": "badfair", "point": "flotilla_session_open",
             "error": "RuntimeError: cannot reach the quota service", "failures": 1}]}
