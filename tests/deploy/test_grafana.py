"""deploy/grafana/flotilla.json names only metrics a real ``flotilla serve`` exposes at ``/metrics``.

The test runs a serve process with two queues on one simulated cluster, submits more than fits (so jobs run, wait
for a reason and are counted per state), makes the API answer an error, and scrapes ``/metrics`` once every
series the dashboard uses has samples; it parses the scrape with prometheus_client and the dashboard's PromQL
with a small tokenizer (metric names are the identifiers left once strings, label matchers, ranges, grouping
clauses, functions and keywords are taken out)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support.serve import Server, wait_for

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "flotilla.json"

CONFIG = """
queues:
  - {name: A, weight: 1, owners: [alice]}
  - {name: B, weight: 1, owners: [alice]}
lease: {timeout: 60s, maxRetries: 3}
cycle: {period: 0.2s}
server: {listen: "127.0.0.1:PORT"}
store: {url: "sqlite:///DB"}
auth:
  tokens:
    - {token: alice-token, user: alice}
clusters:
  - name: c1
    kind: simulated
    nodes: [{count: 2, namePrefix: node, resources: {cpu: 8, memory: 32Gi}}]
"""

#: PromQL words that are not metric names.
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
            "offset", "inf", "nan"}


def expressions(dashboard: dict) -> list[str]:
    """Every PromQL expression of the dashboard: panel targets (rows' nested panels too) and query variables."""
    found = []

    def panels(items):
        for panel in items:
            yield panel
            yield from panels(panel.get("panels", []))

    for panel in panels(dashboard["panels"]):
        found += [target["expr"] for target in panel.get("targets", []) if target.get("expr")]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            found.append(query["query"] if isinstance(query, dict) else query)
    return found


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)                                 # strings
    text = re.sub(r"\{[^}]*\}", " ", text)                                          # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)                                         # ranges
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)  # grouping labels
    text = re.sub(r"\$\w+", " ", text)                                              # Grafana variables
    if text.lstrip().startswith("label_values("):                                  # label_values(metric, label)
        text = text.split(",")[0].replace("label_values(", " ")
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        following = text[match.end():].lstrip()[:1]
        word = match.group()
        if following == "(" or word.lower() in KEYWORDS or re.fullmatch(r"\d", text[match.start() - 1:match.start()] or "x"):
            continue
        names.add(word)
    return names


def test_the_name_parser_reads_promql():
    assert metric_names('histogram_quantile(0.95, sum by (phase, le) (rate(flotilla_cycle_phase_seconds_bucket'
                        '[$__rate_interval])))') == {"flotilla_cycle_phase_seconds_bucket"}
    assert metric_names('sum(rate(a_total[5m])) / sum(rate(b_total{code=~"5.."}[5m])) > bool 0.1') == \
        {"a_total", "b_total"}
    assert metric_names('max by (queue) (x{queue=~"$queue", resource="cpu"}) and on (queue) y offset 5m') == {"x", "y"}
    assert metric_names("time() - max(flotilla_last_cycle_timestamp_seconds)") == \
        {"flotilla_last_cycle_timestamp_seconds"}
    assert metric_names("label_values(flotilla_queue_fair_share, queue)") == {"flotilla_queue_fair_share"}


def exposed(body: str) -> set[str]:
    """Every sample name of a scrape (counters' ``_total``, histograms' ``_bucket``/``_sum``/``_count``)."""
    return {sample.name for family in text_string_to_metric_families(body) for sample in family.samples}


def test_every_dashboard_expression_names_an_exposed_metric(tmp_path):
    dashboard = json.loads(DASHBOARD.read_text())
    used = {name: expr for expr in expressions(dashboard) for name in metric_names(expr)}
    titles = [panel["title"] for panel in dashboard["panels"]]
    for title in ("Cycle latency by phase (p95)", "Queue share against fair share", "Queued jobs by reason",
                  "Lease renewals and expiries", "API errors by route and code"):
        assert title in titles
    assert sorted(used) == [
        "flotilla_api_errors_total", "flotilla_api_request_seconds_bucket", "flotilla_api_requests_total",
        "flotilla_cluster_up", "flotilla_cycle_jobs_considered_total", "flotilla_cycle_jobs_evicted_total",
        "flotilla_cycle_jobs_preempted_total", "flotilla_cycle_jobs_scheduled_total",
        "flotilla_cycle_phase_seconds_bucket", "flotilla_cycle_seconds_bucket", "flotilla_cycle_seconds_count",
        "flotilla_cycle_seconds_sum", "flotilla_cycles_total", "flotilla_last_cycle_timestamp_seconds",
        "flotilla_leases_expired_total", "flotilla_leases_renewed_total", "flotilla_queue_allocated",
        "flotilla_queue_fair_share", "flotilla_queue_jobs", "flotilla_queue_queued_jobs_by_reason",
        "flotilla_queue_share", "flotilla_scheduler_fenced_writes_total", "flotilla_scheduler_leader",
        "flotilla_store_commit_seconds_bucket"]

    srv = Server(tmp_path, CONFIG).start()
    try:
        with srv.http("alice") as http:
            job = {"podSpec": {"containers": [{"name": "c", "image": "busybox",
                                                "resources": {"limits": {"cpu": "8", "memory": "1Gi"}}}]},
                   "annotations": {"flotilla.io/simulated-duration": "1h"}}
            for queue in ("A", "B"):
                response = http.post("/v1/submit", json={"queue": queue, "jobSetId": "s", "jobs": [job] * 2})
                assert response.status_code == 200, response.text
            assert http.get("/v1/jobs/no-such-job").status_code == 404

            def scrape() -> str | None:
                body = httpx.get(f"{srv.url}/metrics", timeout=10).text
                families = {f.name: f for f in text_string_to_metric_families(body)}
                reasons = families.get("flotilla_queue_queued_jobs_by_reason")
                running = sum(s.value for s in families["flotilla_queue_jobs"].samples
                              if s.labels["state"] == "running")
                return body if reasons and sum(s.value for s in reasons.samples) == 2 and running == 2 else None

            body = wait_for(scrape)
    finally:
        srv.kill()
    names = exposed(body)
    assert {name: expr for name, expr in used.items() if name not in names} == {}
    families = {f.name: f for f in text_string_to_metric_families(body)}
    # The series the panels plot carry the values this workload gives them.
    assert {s.labels["queue"]: s.value for s in families["flotilla_queue_fair_share"].samples} == {"A": 0.5, "B": 0.5}
    # Two of the four 8-core jobs fit the two 8-core nodes (which queue's, depends on when the cycles fall).
    per_state: dict[str, float] = {}
    for sample in families["flotilla_queue_jobs"].samples:
        per_state[sample.labels["state"]] = per_state.get(sample.labels["state"], 0) + sample.value
    assert per_state == {"queued": 2, "leased": 0, "pending": 0, "running": 2}
    assert {(s.labels["route"], s.labels["code"]) for s in families["flotilla_api_errors"].samples
            if s.name.endswith("_total")} == {("/v1/jobs/{job_id}", "404")}
