"""Issue 22's web findings: bounded metrics, reasons behind authorization, the dashboard's protections, the schema.

Each test states the finding it closes, with the exact status and message, and that nothing was stored.
"""

from __future__ import annotations

import http.client
import random
import re
import string

import pytest
from prometheus_client.parser import text_string_to_metric_families

from flotilla.service.metrics.labels import (METHODS, REASON_CATEGORIES, method_label, reason_categories,
                                             reason_category)
from flotilla.service.roles.status import NOT_COUNTED
from serve_process import Server, wait_for
from test_service_e2e import CONFIG


# -- metrics: bounded labels (findings 5 and 6) ------------------------------------------------------------
#: One reason as each producer words it (the file that makes it), and the category it counts under.
PRODUCED_REASONS = [
    ("0/4 nodes fit: 4 insufficient cpu", "insufficient_resources"),                   # core/session.py
    ("2/4 nodes fit: room taken by other jobs this cycle", "insufficient_resources"),  # core/session.py
    ("fits no node: cpu 64 > largest 8", "insufficient_resources"),                     # actions/enqueue.py
    ("0/4 nodes match: 4 didn't match nodeSelector project=secret-x", "node_selector"),  # core/feasibility.py
    ("0/4 nodes match: 3 had untolerated taint gpu=yes:NoSchedule, 1 unschedulable", "taint"),
    ("0/4 nodes match: 4 unschedulable", "unschedulable"),
    ("no nodes", "no_nodes"),                                                           # core/session.py
    ("queue A at its cpu limit 0.5", "queue_limit"),                                    # core/limits.py
    ("queue A is cordoned: it schedules nothing new", "queue_cordoned"),                # core/session.py
    ("gang g1: 1 of 3 members queued", "gang"),                                         # plugins/gang.py
    ("gang g1: 2 of 3 members fit", "gang"),                                            # actions/allocate.py
    ("gang g1: j1: unknown priority class x", "gang"),                                  # actions/allocate.py
    ("unknown priority class urgent", "priority_class"),                                # plugins/priorityclass.py
    ("waiting for 2 reserved nodes (n1, n2)", "reserved_nodes"),                        # actions/reserve.py
    ("lookahead 1000 reached in queue A", "not_reached"),                               # actions/allocate.py
    ("not reached this cycle", "not_reached"),                                          # core/session.py
    (NOT_COUNTED, "not_counted"),                                                       # roles/status.py
    ("a third-party plugin's own words", "other"),
    ("", "other"),
]


@pytest.mark.parametrize("reason, category", PRODUCED_REASONS)
def test_every_produced_reason_has_its_category(reason, category):
    assert reason_category(reason) == category


def test_categories_are_the_fixed_set_and_sum_counts():
    assert {category for _, category in PRODUCED_REASONS} == set(REASON_CATEGORIES)
    assert reason_categories({"0/4 nodes match: 4 didn't match nodeSelector p=a": 2,
                              "0/4 nodes match: 4 didn't match nodeSelector p=b": 3,
                              "0/4 nodes fit: 4 insufficient cpu": 1}) == {"node_selector": 5,
                                                                          "insufficient_resources": 1}


def test_methods_reduce_to_the_known_ones_and_other():
    assert {method_label(m) for m in METHODS} == METHODS
    assert method_label("X" * 4000) == "other"
    assert method_label("get") == "other"     # methods are case-sensitive (RFC 9110)


def _random_method(rng: random.Random) -> str:
    if rng.random() < 0.2:
        return rng.choice(sorted(METHODS - {"CONNECT"}))
    return "".join(rng.choices(string.ascii_letters, k=rng.randint(1, 4000)))


def _send(conn_box: list, port: int, method: str, path: str) -> int:
    """One request on a kept-alive loopback connection (reopened when the server closed it); its status."""
    for _ in range(2):
        if conn_box[0] is None:
            conn_box[0] = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn = conn_box[0]
        try:
            conn.request(method, path, headers={"Authorization": "Bearer alice-token"})
            response = conn.getresponse()
            response.read()
            if response.getheader("connection", "").lower() == "close":
                conn.close()
                conn_box[0] = None
            return response.status
        except (http.client.HTTPException, ConnectionError):
            conn.close()
            conn_box[0] = None
    raise AssertionError(f"no answer to {method[:20]!r} {path}")


def test_metrics_stay_small_and_quote_no_job_spec_after_hostile_methods_and_selectors(tmp_path):
    """5,000 requests with random methods and 1,500 unplaceable jobs of distinct nodeSelectors: /metrics < 1 MB."""
    srv = Server(tmp_path, CONFIG).start()
    try:
        alice, bob = srv.http("alice"), srv.http("bob")
        jobs = [{"clientId": f"j{i}", "podSpec": {"nodeSelector": {"project": f"secret-x-{i}"}, "containers": [
            {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}}
            for i in range(1500)]
        submitted = alice.post("/v1/submit", json={"queue": "A", "jobSetId": "s1", "jobs": jobs})
        assert submitted.status_code == 200, submitted.text

        rng = random.Random(22)
        conn_box: list = [None]
        paths = ["/v1/queues", "/v1/jobs/nope", "/ui", "/metrics", "/nowhere"]
        weird = 0
        for _ in range(5000):
            method = _random_method(rng)
            weird += method not in METHODS
            _send(conn_box, srv.port, method, rng.choice(paths))
        if conn_box[0] is not None:
            conn_box[0].close()

        # allocate examines the queue up to its lookahead (1,000 jobs); the 500 after it were not reached.
        pattern = re.compile(r'^flotilla_queue_queued_jobs_by_reason\{queue="A",reason="node_selector"\} 1000\.0$',
                             re.M)
        def scraped() -> str | None:
            text = alice.get("/metrics").text
            return text if pattern.search(text) else None

        body = wait_for(scraped)
        assert len(body.encode()) < 1_000_000, len(body.encode())
        assert "secret-x" not in body
        requests = [sample.labels for family in text_string_to_metric_families(body) for sample in family.samples
                    if sample.name == "flotilla_api_requests_total"]
        assert {labels["method"] for labels in requests} <= METHODS | {"other"}
        assert sum(sample.value for family in text_string_to_metric_families(body) for sample in family.samples
                   if sample.name == "flotilla_api_requests_total" and sample.labels["method"] == "other") == weird
        assert {labels["route"] for labels in requests} <= {
            "/v1/queues", "/v1/jobs/{job_id}", "/ui", "/metrics", "/v1/submit", "/v1/health", "unmatched"}
        assert re.findall(r"^flotilla_queue_queued_jobs_by_reason\{(.*)\} (\S+)$", body, re.M) == [
            ('queue="A",reason="node_selector"', "1000.0"), ('queue="A",reason="not_reached"', "500.0")]

        # The dashboard's queue page: the owner reads the reasons, another user only their categories.
        alice.cookies.set("flotilla_token", "alice-token")
        bob.cookies.set("flotilla_token", "bob-token")
        alice_page = alice.get("/ui/queues/A")
        assert alice_page.status_code == 200
        assert "didn&#39;t match nodeSelector project=secret-x-" in alice_page.text
        bob_page = bob.get("/ui/queues/A")
        assert bob_page.status_code == 200
        assert "secret-x" not in bob_page.text
        assert re.findall(r"<tr><td>(\w+)</td><td class=\"num\">(\d+)</td></tr>", bob_page.text) == [
            ("node_selector", "1000"), ("not_reached", "500")]
    finally:
        srv.kill()
