"""Issue 22's web findings: bounded metrics, reasons behind authorization, the dashboard's protections, the schema.

Each test states the finding it closes, with the exact status and message, and that nothing was stored.
"""

from __future__ import annotations

import http.client
import random
import re
import string

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from flotilla.config import parse_config
from flotilla.scheduler import Scheduler
from flotilla.service.jobspec import prepare
from flotilla.service.metrics.labels import METHODS, REASON_CATEGORIES, method_label, reason_category
from flotilla.service.roles.status import NOT_COUNTED, reason_codes
from flotilla.service.server import build_service
from tests.support.serve import Server, wait_for
from tests.support.service import CONFIG as FIXTURE, job, job_file
from tests.support.e2e import CONFIG


# -- metrics: bounded labels (findings 5 and 6) ------------------------------------------------------------
def _produced_reasons():
    """One reason as each producer makes it (the file that makes it), its words, and the category it counts under."""
    from flotilla.core import feasibility, podplacements, volumes
    from flotilla.core.reasons import insufficient, make, nodes_available, untolerated_taint
    cpu, taint = insufficient("cpu"), untolerated_taint("gpu", "yes")
    return [
        (nodes_available(0, {cpu: 4}), "0/4 nodes are available: 4 Insufficient cpu",
         "insufficient_resources"),                                                          # core/whynot.py
        (nodes_available(0, {cpu: 3, feasibility.UNSCHEDULABLE: 1}),
         "0/4 nodes are available: 3 Insufficient cpu, 1 node(s) were unschedulable", "insufficient_resources"),
        (nodes_available(2, {}), "2/2 nodes are available: room taken by other jobs this cycle",
         "insufficient_resources"),
        (make("fits_no_node", "cpu 64 > largest 8"), "fits no node: cpu 64 > largest 8",
         "insufficient_resources"),                                                          # core/feasibility.py
        (nodes_available(0, {feasibility.NOT_SELECTED: 4}),
         "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector", "node_selector"),
        (nodes_available(0, {taint: 3, feasibility.UNSCHEDULABLE: 1}),
         "0/4 nodes are available: 3 node(s) had untolerated taint {gpu: yes}, 1 node(s) were unschedulable", "taint"),
        (nodes_available(0, {feasibility.UNSCHEDULABLE: 4}), "0/4 nodes are available: 4 node(s) were unschedulable",
         "unschedulable"),
        # Equal counts: the words list them in their own order, the code is the first in the causes' fixed order.
        (nodes_available(0, {feasibility.PORTS_TAKEN: 1, cpu: 1}),
         "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't have free ports for the requested pod ports",
         "insufficient_resources"),
        (nodes_available(0, {feasibility.PORTS_TAKEN: 2}),
         "0/2 nodes are available: 2 node(s) didn't have free ports for the requested pod ports", "host_ports"),
        (nodes_available(0, {feasibility.FILTERED: 2}), "0/2 nodes are available: 2 node(s) were refused by a node filter",
         "other"),
        (nodes_available(0, {podplacements.ANTI_AFFINITY_NOT_MATCHED: 4}),
         "0/4 nodes are available: 4 node(s) didn't match pod anti-affinity rules", "pod_affinity"),   # podplacements
        (nodes_available(0, {podplacements.AFFINITY_NOT_MATCHED: 3, cpu: 1}),
         "0/4 nodes are available: 3 node(s) didn't match pod affinity rules, 1 Insufficient cpu", "pod_affinity"),
        (nodes_available(0, {podplacements.EXISTING_ANTI_AFFINITY: 4}),
         "0/4 nodes are available: 4 node(s) didn't satisfy existing pods anti-affinity rules", "pod_affinity"),
        (nodes_available(0, {podplacements.SPREAD_NOT_MATCHED: 2, cpu: 1}),
         "0/3 nodes are available: 2 node(s) didn't match pod topology spread constraints, 1 Insufficient cpu",
         "topology_spread"),
        (nodes_available(0, {podplacements.SPREAD_MISSING_LABEL: 2}),
         "0/2 nodes are available: 2 node(s) didn't match pod topology spread constraints (missing required label)",
         "topology_spread"),
        (nodes_available(0, {volumes.BIND_CONFLICT: 2}),
         "0/2 nodes are available: 2 node(s) didn't find available persistent volumes to bind", "volumes"),
        (make("no_nodes"), "no nodes", "no_nodes"),                                        # core/nodesearch.py
        (make("queue_limit", "A", "cpu", 0.5), "queue A at its cpu limit 0.5", "queue_limit"),   # core/limits.py
        (make("queue_cordoned", "A"), "queue A is cordoned: it schedules nothing new", "queue_cordoned"),  # units
        (make("gang_queued", "g1", 1, 3), "gang g1: 1 of 3 members queued", "gang"),        # plugins/gang.py
        (make("gang_fit", "g1", 2, 3), "gang g1: 2 of 3 members fit", "gang"),              # actions/allocate.py
        (make("gang_member", "g1", "j1", make("unknown_priority_class", "x")), "gang g1: j1: unknown priority class x",
         "gang"),                                                                          # core/placement.py
        (make("unknown_priority_class", "urgent"), "unknown priority class urgent", "priority_class"),  # priorityclass
        (make("reserved_nodes", 2, "s", "n1, n2"), "waiting for 2 reserved nodes (n1, n2)", "reserved_nodes"),
        (make("plugin_failed", "quota", "queue_order", "ValueError: boom"),
         "plugin quota failed at queue_order: ValueError: boom", "plugin"),                # core/extensions.py
        (make("lookahead", 1000, "A"), "lookahead 1000 reached in queue A", "not_reached"),  # actions/allocate.py
        (make("not_reached"), "not reached this cycle", "not_reached"),                    # core/whynot.py
        (make("not_counted"), NOT_COUNTED, "not_counted"),                                 # roles/status.py
        ("a third-party plugin's own words", "a third-party plugin's own words", "other"),
        ("", "", "other"),
    ]


def test_every_produced_reason_has_its_words_and_its_category():
    for reason, words, category in _produced_reasons():
        assert (str(reason), reason_category(reason)) == (words, category)


def test_categories_are_the_fixed_set_and_sum_counts():
    assert {category for _, _, category in _produced_reasons()} == set(REASON_CATEGORIES)
    body = {"reasons": {"A": {"0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector": 2,
                              "0/5 nodes are available: 5 node(s) didn't match Pod's node affinity/selector": 3,
                              "0/4 nodes are available: 4 Insufficient cpu": 1, "words with no code": 4}},
            "reasonCodes": {"A": {"0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector":
                                  "node_selector",
                                  "0/5 nodes are available: 5 node(s) didn't match Pod's node affinity/selector":
                                  "node_selector",
                                  "0/4 nodes are available: 4 Insufficient cpu": "insufficient_resources"}}}
    assert reason_codes(body, "A") == {"node_selector": 5, "insufficient_resources": 1, "other": 4}


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
        assert "0/4 nodes are available: 4 node(s) didn&#39;t match Pod&#39;s node affinity/selector" in alice_page.text
        with srv.http("root") as root:   # an administrator reads them too
            root.cookies.set("flotilla_token", "admin-token")
            assert "0/4 nodes are available: 4 node(s) didn&#39;t match Pod&#39;s node affinity/selector" in root.get("/ui/queues/A").text
        bob_page = bob.get("/ui/queues/A")
        assert bob_page.status_code == 200
        assert "secret-x" not in bob_page.text and "affinity/selector" not in bob_page.text
        assert re.findall(r"<tr><td>(\w+)</td><td class=\"num\">(\d+)</td></tr>", bob_page.text) == [
            ("node_selector", "1000"), ("not_reached", "500")]
    finally:
        srv.kill()


# -- the dashboard: headers, forms, notices, /docs (findings 8 and 9) --------------------------------------
def _dashboard(tmp_path, open_access: bool = False):
    """A service in-process with one queued job of queue A (it fits nowhere): (service, client, job id)."""
    text = FIXTURE[:FIXTURE.index("auth:")] + FIXTURE[FIXTURE.index("clusters:"):] if open_access else FIXTURE
    cfg = parse_config(text, "ui.yaml")
    service = build_service(cfg, Scheduler(cfg), store_url=f"sqlite:///{tmp_path}/ui.db")
    body = job_file("A", "s", [job("x", cpu="100")])
    job_id = service.store.submit("A", "s", "alice", prepare(body, service.settings)[1])[0].id
    client = TestClient(service.app, base_url="http://127.0.0.1:8080")
    if not open_access:
        client.cookies.set("flotilla_token", "alice-token")
    return service, client, job_id


def _form_token(client, path: str) -> str:
    """The form token on the page at ``path`` (the page also sets the session cookie)."""
    return re.search(r'name="csrf" value="([0-9a-f]{64})"', client.get(path).text).group(1)


def _stored(service, job_id) -> tuple:
    job = service.store.get_job(job_id)
    return job["state"], job["priority"], [e["kind"] for e in service.store.events("A", "s", 0, 100)]


@pytest.mark.parametrize("path", ["/ui", "/ui/login", "/ui/queues/A", "/ui/jobs?queue=A", "/ui/static/style.css",
                                  "/ui/nowhere", "/docs", "/v1/health", "/v1/queues"])
def test_every_response_sends_csp_nosniff_and_referrer_policy(tmp_path, path):
    service, client, _ = _dashboard(tmp_path)
    response = client.get(path, follow_redirects=False)
    csp = response.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp and "style-src 'self'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "same-origin"
    service.close()


def test_dashboard_pages_have_no_inline_script_or_style(tmp_path):
    service, client, job_id = _dashboard(tmp_path)
    for path in ("/ui", "/ui/queues/A", "/ui/jobs?queue=A", f"/ui/jobs/{job_id}", "/docs"):
        html = client.get(path).text
        assert not re.search(r"<script(?![^>]*\bsrc=)|\sstyle=|<style|\son[a-z]+=", html), path
    service.close()


@pytest.mark.parametrize("open_access", [False, True])
def test_a_form_from_another_origin_is_refused_and_changes_nothing(tmp_path, open_access):
    service, client, job_id = _dashboard(tmp_path, open_access)
    token = _form_token(client, f"/ui/jobs/{job_id}")
    before = _stored(service, job_id)
    for origin in ("http://127.0.0.1:9999", "http://localhost:8080", "https://attacker.example", "null"):
        response = client.post(f"/ui/jobs/{job_id}/cancel", data={"csrf": token}, headers={"Origin": origin},
                               follow_redirects=False)
        assert response.status_code == 403, origin
        if open_access and origin in ("https://attacker.example", "null"):   # the guard refuses these first
            assert response.json()["error"] == {
                "code": "cross_origin", "field": None, "errors": [],
                "message": f"without auth.tokens only loopback pages may change state (Origin {origin!r})"}
        else:
            assert re.search(r'<p class="error" id="error">([^<]*)</p>', response.text).group(1) == (
                f"form refused: it came from another site (Origin &#39;{origin}&#39;, not this dashboard&#39;s)")
        response = client.post(f"/ui/jobs/{job_id}/reprioritize", data={"priority": "5", "csrf": token},
                               headers={"Origin": origin}, follow_redirects=False)
        assert response.status_code == 403, origin
    assert _stored(service, job_id) == before
    service.close()


@pytest.mark.parametrize("open_access", [False, True])
def test_a_form_without_origin_needs_the_sessions_token(tmp_path, open_access):
    service, client, job_id = _dashboard(tmp_path, open_access)
    token = _form_token(client, f"/ui/jobs/{job_id}")
    before = _stored(service, job_id)
    refused = "form refused: no Origin header and no valid form token (reload the page and try again)"
    for data in ({}, {"csrf": ""}, {"csrf": "0" * 64}, {"csrf": token[:-1] + ("0" if token[-1] != "0" else "1")}):
        response = client.post(f"/ui/jobs/{job_id}/reprioritize", data={"priority": "5", **data},
                               follow_redirects=False)
        assert response.status_code == 403, data
        assert re.search(r'<p class="error" id="error">([^<]*)</p>', response.text).group(1) == refused
    # A token from another session (another browser of the same user) does not pass either.
    other = TestClient(service.app, base_url="http://127.0.0.1:8080", cookies=dict(client.cookies))
    other.cookies.delete("flotilla_csrf")
    assert _form_token(other, f"/ui/jobs/{job_id}") != token
    assert other.post(f"/ui/jobs/{job_id}/cancel", data={"csrf": token}, follow_redirects=False).status_code == 403
    assert _stored(service, job_id) == before
    response = client.post(f"/ui/jobs/{job_id}/reprioritize", data={"priority": "5", "csrf": token},
                           follow_redirects=False)
    assert (response.status_code, response.headers["location"]) == (303, f"/ui/jobs/{job_id}?done=priority")
    assert service.store.get_job(job_id)["priority"] == 5
    # The same origin needs no token.
    response = client.post(f"/ui/jobs/{job_id}/cancel", headers={"Origin": "http://127.0.0.1:8080"},
                           follow_redirects=False)
    assert (response.status_code, response.headers["location"]) == (303, f"/ui/jobs/{job_id}?done=cancel")
    assert service.store.get_job(job_id)["state"] == "cancelled"
    service.close()


def test_the_form_token_is_bound_to_the_user(tmp_path):
    service, client, job_id = _dashboard(tmp_path)
    alice_token = _form_token(client, f"/ui/jobs/{job_id}")
    client.cookies.set("flotilla_token", "carol-token")   # carol (group ml) may act in A too
    carol_token = _form_token(client, f"/ui/jobs/{job_id}")
    assert carol_token != alice_token
    response = client.post(f"/ui/jobs/{job_id}/cancel", data={"csrf": alice_token}, follow_redirects=False)
    assert response.status_code == 403
    assert service.store.get_job(job_id)["state"] == "queued"
    service.close()


def test_login_and_logout_forms_need_the_same_origin_or_the_token(tmp_path):
    service, client, _ = _dashboard(tmp_path)
    client.cookies.delete("flotilla_token")
    response = client.post("/ui/login", data={"token": "bob-token", "next": "/ui"},
                           headers={"Origin": "http://127.0.0.1:9999"}, follow_redirects=False)
    assert response.status_code == 403 and "set-cookie" not in {k.lower() for k in response.headers
                                                                 if response.headers[k].startswith("flotilla_token")}
    assert client.cookies.get("flotilla_token") is None
    token = _form_token(client, "/ui/login")
    response = client.post("/ui/login", data={"token": "bob-token", "next": "/ui", "csrf": token},
                           follow_redirects=False)
    assert (response.status_code, response.headers["location"]) == (303, "/ui")
    assert client.cookies.get("flotilla_token") == "bob-token"
    response = client.post("/ui/logout", headers={"Origin": "https://attacker.example"}, follow_redirects=False)
    assert response.status_code == 403
    assert client.cookies.get("flotilla_token") == "bob-token"
    service.close()


def test_notices_come_from_the_fixed_set_never_from_the_query_string(tmp_path):
    service, client, job_id = _dashboard(tmp_path)

    def shown(done: str) -> str | None:
        found = re.search(r'<p class="notice" id="notice">([^<]*)</p>', client.get(f"/ui/jobs/{job_id}",
                                                                                  params={"done": done}).text)
        return found.group(1) if found else None

    assert shown("cancel") == "cancel requested"
    assert shown("priority") == "priority set to 0"
    for hostile in ("Your account is suspended, call +1 555 0100", "cancel requested", "<b>x</b>", "priority set"):
        assert shown(hostile) is None
    service.close()


def test_docs_are_served_without_a_cdn(tmp_path):
    service, client, _ = _dashboard(tmp_path)
    page = client.get("/docs")
    assert page.status_code == 200
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert assets == ["/docs/static/swagger-ui.css", "/docs/static/favicon.png", "/docs/static/swagger-ui-bundle.js",
                      "/ui/static/docs.js"]
    assert not re.search(r"https?://", page.text)
    for asset in assets:
        response = client.get(asset)
        assert response.status_code == 200 and len(response.content) > 0, asset
    init = client.get("/ui/static/docs.js").text
    assert '"/openapi.json"' in init and "validatorUrl: null" in init and not re.search(r"https?://", init)
    assert client.get("/redoc").status_code == 404
    service.close()


# -- the schema says what the API accepts (finding 10) -----------------------------------------------------
@pytest.fixture(name="api")
def _api(tmp_path):
    """The API in-process on a fresh SQLite store: (client, store, the OpenAPI document)."""
    from flotilla.service.api import create_app
    from flotilla.service.settings import from_config
    from flotilla.service.store import Store

    settings = from_config(parse_config(FIXTURE, "api.yaml"))
    store = Store(f"sqlite:///{tmp_path}/api.db")
    store.sync_queues(settings.queues)
    client = TestClient(create_app(store, settings))
    yield client, store, client.get("/openapi.json").json()
    store.close()


def _valid(document: dict, component: str, value) -> bool:
    import jsonschema

    schema = {"$ref": f"#/components/schemas/{component}", "components": document["components"]}
    return jsonschema.Draft202012Validator(schema).is_valid(value)


ADMIN, ALICE = {"Authorization": "Bearer admin-token"}, {"Authorization": "Bearer alice-token"}


def test_the_schema_refuses_nul_in_strings_and_map_keys_as_the_api_does(api):
    from flotilla.service.openapi import TEXT_PATTERN

    client, store, document = api
    cancel = document["components"]["schemas"]["CancelBody"]["properties"]
    assert cancel["queue"]["pattern"] == TEXT_PATTERN == r"^[^\x00]*$"
    assert _valid(document, "CancelBody", {"queue": "A", "jobSetId": "s"})
    assert not _valid(document, "CancelBody", {"queue": "A\x00", "jobSetId": "s"})
    response = client.post("/v1/cancel", json={"queue": "A\x00", "jobSetId": "s"}, headers=ALICE)
    assert response.status_code == 422
    assert response.json()["error"]["message"] == "NUL characters are not allowed"
    assert not _valid(document, "QueueBody", {"name": "Q", "limits": {"cp\x00u": 0.5}})
    assert _valid(document, "QueueBody", {"name": "Q", "limits": {"cpu": 0.5}})
    response = client.post("/v1/queues", json={"name": "Q", "limits": {"cp\x00u": 0.5}}, headers=ADMIN)
    assert response.status_code == 422 and store.get_queue("Q") is None
    # Path parameters are ids, matched whole (their own pattern, which has no NUL either).
    path = document["paths"]["/v1/jobs/{job_id}"]["get"]["parameters"][0]["schema"]
    assert (path["pattern"], path["maxLength"]) == (r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$", 32)
    # Integers are 64-bit in the schema, as load_json takes them.
    priority = document["components"]["schemas"]["PodSpec"]["properties"]["priority"]["anyOf"][0]
    assert (priority["type"], priority["minimum"], priority["maximum"]) == ("integer", -(2**63), 2**63 - 1)
    # Responses are not narrowed: an error may quote what was refused.
    assert "pattern" not in document["components"]["schemas"]["ErrorInfo"]["properties"]["message"]


def test_a_job_without_a_pod_spec_is_schema_invalid_and_refused(api):
    client, store, document = api
    pod = {"containers": [{"name": "main", "image": "busybox"}]}
    assert not _valid(document, "JobFile", {"queue": "A", "jobSetId": "s", "jobs": [{}]})
    assert not _valid(document, "JobFile", {"queue": "A", "jobSetId": "s", "jobs": [{"podSpec": None}]})
    assert not _valid(document, "JobFile", {"queue": "A", "jobSetId": "s", "jobs": [{"podSpecs": []}]})
    assert not _valid(document, "JobFile", {"queue": "A", "jobSetId": "s", "jobs": [{"podSpec": pod,
                                                                                      "podSpecs": [pod]}]})
    assert _valid(document, "JobFile", {"queue": "A", "jobSetId": "s", "jobs": [{"podSpec": pod}]})
    assert _valid(document, "JobFile", {"queue": "A", "jobSetId": "s", "jobs": [{"podSpecs": [pod, pod]}]})
    response = client.post("/v1/submit", json={"queue": "A", "jobSetId": "s", "jobs": [{}]}, headers=ALICE)
    assert response.status_code == 422
    assert response.json()["error"]["message"] == "job 0: podSpec: a job needs a podSpec (or podSpecs: a list of pod specs)"
    assert store.count_jobs() == 0


def test_a_queue_update_takes_its_name_from_the_path(api):
    client, store, document = api
    name = document["components"]["schemas"]["QueueUpdateBody"]["properties"]["name"]
    assert name["readOnly"] is True
    assert "name" not in document["components"]["schemas"]["QueueUpdateBody"].get("required", [])
    response = client.put("/v1/queues/B", json={"weight": 2, "owners": ["bob"]}, headers=ADMIN)
    assert response.status_code == 200 and response.json()["name"] == "B"
    assert store.get_queue("B").weight == 2
    response = client.put("/v1/queues/B", json={"name": "B", "weight": 3, "owners": ["bob"]}, headers=ADMIN)
    assert response.status_code == 200 and store.get_queue("B").weight == 3
    response = client.put("/v1/queues/B", json={"name": "A", "weight": 5, "owners": ["bob"]}, headers=ADMIN)
    assert response.status_code == 422
    assert response.json()["error"] == {"code": "invalid", "message": "body names queue 'A', path names 'B'",
                                        "field": "name", "errors": []}
    assert (store.get_queue("A").weight, store.get_queue("B").weight) == (1, 3)


@pytest.mark.parametrize("method, path, body", [
    ("POST", "/v1/queues", {"name": "Q", "weight": -1}),
    ("POST", "/v1/queues", {"name": "not a name"}),
    ("POST", "/v1/queues", "{not json"),
    ("PUT", "/v1/queues/B", {"weight": "heavy"}),
    ("PUT", "/v1/queues/B", {"name": "A", "weight": 2}),
    ("DELETE", "/v1/queues/B", None),
    ("POST", "/v1/queues/B/cordon", None),
    ("POST", "/v1/nodes/c1/c1-node-0/drain", None),
])
def test_a_non_administrator_is_refused_before_the_body_is_read(api, method, path, body):
    client, store, _ = api
    before = [q.to_dict() for q in store.list_queues()], store.cordoned("queue"), store.cordoned("node")
    content = body if isinstance(body, str) else None
    response = client.request(method, path, json=None if content else body, content=content,
                              headers={**ALICE, "Content-Type": "application/json"})
    assert response.status_code == 403
    assert response.json()["error"] == {"code": "forbidden", "message": "user 'alice' is not an administrator",
                                        "field": None, "errors": []}
    assert ([q.to_dict() for q in store.list_queues()], store.cordoned("queue"), store.cordoned("node")) == before
    # Without a token: 401 first.
    assert client.request(method, path, json=None if content else body, content=content,
                          headers={"Content-Type": "application/json"}).status_code == 401
