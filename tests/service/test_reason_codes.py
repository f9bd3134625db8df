"""Reasons as data: metrics and the dashboard count a reason's code, so changing its words moves no job.

Issue 29: changing "Insufficient cpu" broke tests in eight modules, and a rolling upgrade would have mixed
categories. Here the words of two causes change (as a new release might) and every category stays the same.
"""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from flotilla.core.reasons import WORDINGS, Reason, code_of, make, nodes_available
from flotilla.scheduler import Scheduler
from flotilla.service.loop import service_backends
from flotilla.service.server import build_service
from tests.support.service import config, headers, job, job_file

#: Two causes worded otherwise, as a later release might word them.
REWORDED = {"insufficient": "short of {0} here", "node_selector": "node(s) with other labels"}

STATE = """
clusters:
  - name: c1
    nodes:
      - {name: n1, resources: {cpu: 4, memory: 16Gi}, labels: {zone: a}}
      - name: n2
        resources: {cpu: 4, memory: 16Gi}
        labels: {zone: a}
        taints: [{key: dedicated, value: infra, effect: NoSchedule}]
queues:
  - {name: A, limits: {cpu: 0.5}}
  - {name: B}
jobs:
  - {id: run-1, queue: A, requests: {cpu: 4}, state: running, cluster: c1, node: n1}
  - {id: big-1, queue: B, requests: {cpu: 2}, submitted: 1}
  - {id: sel-1, queue: B, requests: {cpu: 1}, nodeSelector: {zone: b}, submitted: 2}
  - {id: cap-1, queue: A, requests: {cpu: 1}, tolerations: [{key: dedicated, operator: Exists}], submitted: 3}
"""


def reword(monkeypatch) -> None:
    for cause, words in REWORDED.items():
        monkeypatch.setitem(WORDINGS, cause, words)


@pytest.mark.parametrize("reworded", [False, True])
def test_a_cycle_codes_its_reasons_whatever_their_words(flotilla_cycle, monkeypatch, reworded):
    if reworded:
        reword(monkeypatch)
    result = flotilla_cycle(STATE)
    assert result.scheduled == {}
    short, selector = ("short of cpu here", "node(s) with other labels") if reworded else \
        ("Insufficient cpu", "node(s) didn't match Pod's node affinity/selector")
    taint = "node(s) had untolerated taint {dedicated: infra}"
    assert result.queued == {
        "big-1": f"0/2 nodes are available: 1 {short}, 1 {taint}" if not reworded else
                 f"0/2 nodes are available: 1 {taint}, 1 {short}",
        "cap-1": "queue A at its cpu limit 0.5",
        # Equal counts list in the words' order ("node(s) with ..." sorts after "node(s) had ..."); the code
        # follows the causes' fixed order and stays node_selector.
        "sel-1": f"0/2 nodes are available: 1 {selector}, 1 {taint}" if not reworded else
                 f"0/2 nodes are available: 1 {taint}, 1 {selector}"}
    assert result.codes == {"big-1": "insufficient_resources", "cap-1": "queue_limit", "sel-1": "node_selector"}


def test_equal_counts_take_the_code_of_the_causes_fixed_order_not_of_the_words(monkeypatch):
    # One node short of cpu, one unschedulable: "Insufficient" sorts first in the words and in the fixed order.
    causes = {make("unschedulable"): 1, make("insufficient", "cpu"): 1}
    before = nodes_available(0, causes)
    monkeypatch.setitem(WORDINGS, "insufficient", "zz short of {0}")   # now sorts after "node(s) were ..."
    after = nodes_available(0, causes)
    assert (str(after), after.code) == ("0/2 nodes are available: 1 node(s) were unschedulable, 1 zz short of cpu",
                                        "insufficient_resources")
    assert after == before and before.code == "insufficient_resources"


def test_a_reason_is_a_value_and_words_are_other():
    a, b = make("queue_limit", "A", "cpu", 0.5), make("queue_limit", "A", "cpu", 0.5)
    assert (a == b, hash(a) == hash(b), a == "queue A at its cpu limit 0.5") == (True, True, False)
    assert (code_of(a), code_of("a plugin's words"), code_of(None)) == ("queue_limit", "other", "other")
    assert isinstance(make("no_nodes"), Reason) and str(make("no_nodes")) == "no nodes"


# -- the service: /metrics and the dashboard read the codes -----------------------------------------------
def _categories(tmp_path, name: str) -> tuple[dict, list, list]:
    """After one cycle: the reason metric's samples, bob's categories on queue A's page and alice's words there."""
    cfg = config()
    service = build_service(cfg, Scheduler(cfg), store_url=f"sqlite:///{tmp_path}/{name}.db",
                            backends=service_backends(cfg), seed=0)
    client = TestClient(service.app)
    # 32 cores (c1: 2 x 8 with GPUs, c2: 2 x 8): A's four 8-core jobs fill them, the fifth waits for room; a job
    # selecting a zone no node has waits for a node; a 16-core job waits too (larger than any node).
    jobs = [job(f"a{i}", cpu="8") for i in range(5)] + [job("big", cpu="16")]
    selected = job("sel", cpu="1")
    selected["podSpec"]["nodeSelector"] = {"zone": "nowhere"}
    assert client.post("/v1/submit", json=job_file("A", "s", jobs + [selected]),
                       headers=headers("alice")).status_code == 200
    assert service.runner.cycle()
    samples = {tuple(sorted(sample.labels.items())): sample.value
               for family in text_string_to_metric_families(client.get("/metrics").text)
               for sample in family.samples if sample.name == "flotilla_queue_queued_jobs_by_reason"}
    client.cookies.set("flotilla_token", "bob-token")
    bob = re.findall(r"<tr><td>([^<]*)</td><td class=\"num\">(\d+)</td></tr>", client.get("/ui/queues/A").text)
    client.cookies.set("flotilla_token", "alice-token")
    alice = re.findall(r"<tr><td>([^<]*)</td><td class=\"num\">(\d+)</td></tr>", client.get("/ui/queues/A").text)
    return samples, bob, alice


@pytest.mark.parametrize("reworded", [False, True])
def test_metrics_and_dashboard_categories_do_not_move_when_words_change(tmp_path, monkeypatch, reworded):
    if reworded:
        reword(monkeypatch)
    samples, bob, alice = _categories(tmp_path, "reworded" if reworded else "as-is")
    assert samples == {(("queue", "A"), ("reason", "insufficient_resources")): 2.0,
                       (("queue", "A"), ("reason", "node_selector")): 1.0}
    assert sorted(bob) == [("insufficient_resources", "2"), ("node_selector", "1")]
    # The owner reads the words, which did change.
    short, selector = ("short of cpu here", "node(s) with other labels") if reworded else \
        ("Insufficient cpu", "node(s) didn&#39;t match Pod&#39;s node affinity/selector")
    assert sorted(alice) == sorted([(f"0/4 nodes are available: 4 {short}", "2"),
                                    (f"0/4 nodes are available: 4 {selector}", "1")])
