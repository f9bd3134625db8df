"""Trust, second round: no tenant sees another's jobs on any GET route, no 500 from the five causes the probe
found, and strict input (JSON integers, ASCII digits, ids matched whole in every path, HEAD where GET is).

Each test asserts the exact status and message or field, and that nothing was stored.
"""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from flotilla.config import parse_config
from flotilla.scheduler import Scheduler
from flotilla.service.api import create_app
from flotilla.service.loop import service_backends
from flotilla.service.server import build_service
from tests.support.service import CONFIG, STORE_PARAMS, headers, job, job_file, make_store
from tests.support.metrics import Clock

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$"
NODE_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
NOT_AN_INTEGER = "Input should be a valid integer"
JSON = {"Content-Type": "application/json"}


def error(r, status: int) -> dict:
    assert r.status_code == status, r.text
    return r.json()["error"]


def rejections(r) -> list[str]:
    return [e["text"] for e in error(r, 422)["errors"]]


@pytest.fixture(name="api")
def api_on_each_store(request, tmp_path):
    """The API on SQLite or PostgreSQL, with a Kubernetes cluster ``k8s`` (its nodes are not listed)."""
    s = settings_with_k8s()
    store = make_store(request.param, tmp_path)
    store.sync_queues(s.queues)
    yield TestClient(create_app(store, s)), store
    store.close()


def settings_with_k8s():
    from flotilla.service.settings import from_config

    text = CONFIG + "  - {name: k8s, kind: kubernetes}\n"
    return from_config(parse_config(text, "test.yaml"))


# -- item 4: the five 500s -------------------------------------------------------------------------------------

@pytest.mark.parametrize("api", STORE_PARAMS, indirect=True)
def test_a_last_event_id_that_is_not_ascii_digits_is_a_422(api):
    client, _ = api
    for value in (b"\xb2", b"\xd9\xa3", b" 3", b"3 ", b"-1", b"1e3"):   # "²", "٣" (as Latin-1 bytes), ...
        r = client.get("/v1/queues/A/jobsets/s/events?follow=false",
                       headers={**headers("alice"), "Last-Event-ID": value})
        assert error(r, 422) == {"code": "invalid", "field": "last-event-id", "errors": [
            {"field": "last-event-id", "message": "String should match pattern '^[0-9]{1,19}$'", "index": None,
             "clientId": None, "text": "last-event-id: String should match pattern '^[0-9]{1,19}$'"}],
            "message": "last-event-id: String should match pattern '^[0-9]{1,19}$'"}, value
    r = client.get("/v1/queues/A/jobsets/s/events?follow=false", headers={**headers("alice"), "Last-Event-ID": "7"})
    assert (r.status_code, r.text) == (200, "")


EXIT_RULE = "expected an exit code 1-255 in ASCII digits (a run that succeeds has none)"
DURATION_RULE = "expected a duration such as 30s, 5m, 2h, 3d or seconds (ASCII digits, at most 9223372036 seconds)"


@pytest.mark.parametrize("api", STORE_PARAMS, indirect=True)
@pytest.mark.parametrize("annotation, value, rule", [
    ("flotilla.io/simulated-exit-code", "\u00b2", EXIT_RULE),
    ("flotilla.io/simulated-exit-code", "\u0663", EXIT_RULE),
    ("flotilla.io/simulated-exit-code", " 3", EXIT_RULE),
    ("flotilla.io/simulated-exit-code", "3\n", EXIT_RULE),
    ("flotilla.io/simulated-exit-code", "0", EXIT_RULE),
    ("flotilla.io/simulated-exit-code", "256", EXIT_RULE),
    ("flotilla.io/simulated-duration", "\u0663s", DURATION_RULE),
    ("flotilla.io/simulated-duration", "3s ", DURATION_RULE),
    ("flotilla.io/simulated-duration", "1e400s", DURATION_RULE),
    ("flotilla.io/simulated-duration", "99999999999999999999d", DURATION_RULE),
])
def test_simulated_exit_codes_and_durations_are_ascii_digits_and_bounded(api, annotation, value, rule):
    client, store = api
    item = job("x")
    item["annotations"][annotation] = value
    r = client.post("/v1/submit", json=job_file("A", "s", [item]), headers=headers("alice"))
    assert rejections(r) == [f"job 0 (clientId 'x'): annotations.{annotation}: {rule}, got {value!r}"]
    assert store.count_jobs() == 0


def test_simulated_exit_codes_and_durations_in_ascii_digits_are_taken(tmp_path):
    from flotilla.service.jobspec import duration_of_annotations, exit_code_of_annotations

    assert exit_code_of_annotations({"flotilla.io/simulated-exit-code": "3"}) == 3
    assert exit_code_of_annotations({"flotilla.io/simulated-exit-code": "255"}) == 255
    assert duration_of_annotations({"flotilla.io/simulated-duration": "3s"}) == 3.0
    assert duration_of_annotations({"flotilla.io/simulated-duration": "1.5m"}) == 90.0


def _open_service(tmp_path):
    """A service without auth (a local, single-user one) with one queued job: (service, client, job id)."""
    from flotilla.service.jobspec import prepare

    text = CONFIG[:CONFIG.index("auth:")] + CONFIG[CONFIG.index("clusters:"):]
    cfg = parse_config(text, "open.yaml")
    service = build_service(cfg, Scheduler(cfg), store_url=f"sqlite:///{tmp_path}/open.db")
    (done,) = service.store.submit("A", "s", "anonymous", prepare(job_file("A", "s", [job("x")]), service.settings)[1])
    return service, TestClient(service.app, base_url="http://127.0.0.1:8080"), done.id


def test_a_malformed_origin_without_auth_is_refused_on_every_state_changing_request(tmp_path):
    service, client, job_id = _open_service(tmp_path)
    refused = {"code": "cross_origin", "field": None, "errors": [],
               "message": "without auth.tokens only loopback pages may change state (Origin 'http://[::1')"}
    origin = {"Origin": "http://[::1"}
    assert error(client.post("/v1/cancel", json={"queue": "A", "jobIds": [job_id]}, headers=origin), 403) == refused
    assert error(client.post("/v1/queues", json={"name": "Q"}, headers=origin), 403) == refused
    assert error(client.delete("/v1/queues/A", headers=origin), 403) == refused
    assert error(client.post(f"/ui/jobs/{job_id}/cancel", data={"csrf": "x"}, headers=origin), 403) == refused
    assert error(client.post(f"/ui/jobs/{job_id}/reprioritize", data={"priority": "5"}, headers=origin),
                 403) == refused
    assert client.get("/v1/queues", headers=origin).status_code == 200   # reading is not changing state
    job = service.store.get_job(job_id)
    assert (job["state"], job["priority"], service.store.get_queue("Q")) == ("queued", 0, None)
    service.close()


def test_a_malformed_origin_on_a_dashboard_form_is_a_403_page(tmp_path):
    from flotilla.service.jobspec import prepare
    from tests.support.service import config

    cfg = config()
    service = build_service(cfg, Scheduler(cfg), store_url=f"sqlite:///{tmp_path}/ui.db")
    (done,) = service.store.submit("A", "s", "alice", prepare(job_file("A", "s", [job("x")]), service.settings)[1])
    client = TestClient(service.app)
    client.cookies.set("flotilla_token", "alice-token")
    for action, data in (("cancel", {}), ("reprioritize", {"priority": "5"})):
        r = client.post(f"/ui/jobs/{done.id}/{action}", data=data, headers={"Origin": "http://[::1"},
                        follow_redirects=False)
        assert r.status_code == 403
        assert re.search(r'<p class="error" id="error">([^<]*)</p>', r.text).group(1) == (
            "form refused: it came from another site (Origin &#39;http://[::1&#39;, not this dashboard&#39;s)")
    job_record = service.store.get_job(done.id)
    assert (job_record["state"], job_record["priority"]) == ("queued", 0)
    service.close()


@pytest.mark.parametrize("api", STORE_PARAMS, indirect=True)
def test_names_longer_than_their_columns_are_422_not_a_database_error(api):
    client, store = api
    r = client.put("/v1/queues/" + "q" * 300, json={"weight": 2}, headers=headers("root"))
    assert error(r, 422)["message"] == "name: String should have at most 255 characters"
    r = client.post("/v1/nodes/k8s/" + "n" * 600 + "/drain", headers=headers("root"))
    assert error(r, 422)["message"] == "node: String should have at most 253 characters"
    r = client.post("/v1/nodes/k8s/" + "n" * 253 + "/drain", headers=headers("root"))
    assert r.json() == {"node": "k8s/" + "n" * 253, "draining": True}
    assert store.cordoned("node") == {"k8s/" + "n" * 253}
    assert client.get("/v1/queues/" + "q" * 300, headers=headers("root")).status_code == 422
    assert [q.name for q in store.list_queues()] == ["A", "B"]


# -- item 6: strict input ------------------------------------------------------------------------------------

@pytest.mark.parametrize("api", STORE_PARAMS, indirect=True)
def test_integers_in_a_body_are_json_integers(api):
    client, store = api
    for priority in ("7", True, 1.0, "1_0"):
        item = {**job("x"), "priority": priority}
        r = client.post("/v1/submit", json=job_file("A", "s", [item]), headers=headers("alice"))
        assert rejections(r) == [f"job 0 (clientId 'x'): priority: {NOT_AN_INTEGER}"], priority
    item = job("x", terminationGracePeriodSeconds="30")
    r = client.post("/v1/submit", json=job_file("A", "s", [item]), headers=headers("alice"))
    assert rejections(r) == ["job 0 (clientId 'x'): podSpec.terminationGracePeriodSeconds: Input should be a valid "
                             "number"]
    assert store.count_jobs() == 0
    (done,) = client.post("/v1/submit", json=job_file("A", "s", [{**job("y"), "priority": 7}]),
                          headers=headers("alice")).json()["jobs"]
    for priority in ("7", True, 1.0):
        r = client.post("/v1/reprioritize", json={"queue": "A", "jobIds": [done["id"]], "priority": priority},
                        headers=headers("alice"))
        assert error(r, 422)["message"] == f"priority: {NOT_AN_INTEGER}", priority
    assert store.get_job(done["id"])["priority"] == 7


@pytest.mark.parametrize("api", STORE_PARAMS, indirect=True)
def test_queue_weights_and_limits_are_json_numbers_and_limit_keys_resource_names(api):
    client, store = api
    root = headers("root")
    for body, message in (
            ({"name": "Q", "weight": "2"}, "weight: Input should be a valid number"),
            ({"name": "Q", "weight": True}, "weight: Input should be a valid number"),
            ({"name": "Q", "limits": {"cpu": "0.5"}}, "limits.cpu: Input should be a valid number"),
            ({"name": "Q", "limits": {"<img src=x>": 0.5}},
             "limits.<img src=x>: '<img src=x>' is not a valid resource name: a Kubernetes qualified name: an "
             "optional DNS subdomain prefix (lower-case letters, digits, '-' and '.', at most 253 characters) and "
             "'/', then 1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit")):
        assert error(client.post("/v1/queues", json=body, headers=root), 422)["message"] == message, body
        assert error(client.put("/v1/queues/A", json={k: v for k, v in body.items() if k != "name"}, headers=root),
                     422)["message"] == message, body
    assert store.get_queue("Q") is None and (store.get_queue("A").weight, store.get_queue("A").limits) == (1.0, {})
    made = client.post("/v1/queues", json={"name": "Q", "weight": 2, "limits": {"nvidia.com/gpu": 0.5}}, headers=root)
    assert (made.json()["weight"], made.json()["limits"]) == (2.0, {"nvidia.com/gpu": 0.5})


@pytest.mark.parametrize("api", STORE_PARAMS, indirect=True)
def test_integers_in_a_query_string_are_ascii_digits(api):
    client, _ = api
    alice = headers("alice")
    for path, field in (("/v1/queues/A/pending?limit={}", "limit"), ("/v1/queues/A/jobsets/s/events?after={}",
                                                                       "after"),
                        ("/v1/jobs/x/logs?tail={}", "tail"), ("/v1/jobs/x/logs?pod={}", "pod")):
        for value in ("1.0", "%201", "1%20", "1_0", "%D9%A3", "+1", "0x1", ""):
            r = client.get(path.format(value) + ("&follow=false" if "events" in path else ""), headers=alice)
            assert (error(r, 422)["field"], error(r, 422)["message"]) == (field, f"{field}: {NOT_AN_INTEGER}"), \
                (path, value)
    assert client.get("/v1/queues/A/pending?limit=1", headers=alice).status_code == 200
    r = client.get("/v1/queues/A/pending?limit=" + "9" * 30, headers=alice)
    assert error(r, 422)["message"] == "limit: Input should be less than or equal to 1000"
    r = client.get("/v1/queues/A/pending?limit=" + "9" * 41, headers=alice)   # never converted
    assert error(r, 422)["message"] == "limit: integer out of the 64-bit range"


def test_dashboard_numbers_are_ascii_digits(tmp_path):
    from flotilla.service.jobspec import prepare
    from tests.support.service import config

    cfg = config()
    service = build_service(cfg, Scheduler(cfg), store_url=f"sqlite:///{tmp_path}/ui.db")
    (done,) = service.store.submit("A", "s", "alice", prepare(job_file("A", "s", [job("x")]), service.settings)[1])
    client = TestClient(service.app)
    client.cookies.set("flotilla_token", "alice-token")
    for value in ("%201", "1_0", "1.0", "+1", "%D9%A3"):
        assert client.get(f"/ui/jobs?queue=A&page_number={value}").status_code == 422, value
    assert client.get("/ui/jobs?queue=A&page_number=1").status_code == 200
    for priority in (" 1", "1_0", "\u0663"):
        r = client.post(f"/ui/jobs/{done.id}/reprioritize", data={"priority": priority},
                        headers={"Origin": "http://testserver"}, follow_redirects=False)
        assert r.status_code == 422, priority
    assert service.store.get_job(done.id)["priority"] == 0
    service.close()


@pytest.mark.parametrize("api", STORE_PARAMS, indirect=True)
def test_ids_in_every_path_parameter_are_matched_whole(api):
    client, store = api
    alice, root = headers("alice"), headers("root")
    pattern = f"String should match pattern '{ID_PATTERN}'"
    for method, path, field, who in (
            ("GET", "/v1/queues/A/jobsets/s%0A/jobs", "job_set", alice),
            ("GET", "/v1/queues/A/jobsets/s%0A/events?follow=false", "job_set", alice),
            ("GET", "/v1/queues/A%0A/jobsets/s/jobs", "queue", alice),
            ("GET", "/v1/queues/A%0A", "name", alice),
            ("GET", "/v1/queues/A%0A/pending", "name", alice),
            ("GET", "/v1/jobs/x%0A", "job_id", alice),
            ("GET", "/v1/jobs/x%0A/logs", "job_id", alice),
            ("POST", "/v1/queues/A%0A/cordon", "name", root),
            ("POST", "/v1/queues/A%0A/uncordon", "name", root),
            ("DELETE", "/v1/queues/A%0A", "name", root)):
        r = client.request(method, path, headers=who)
        assert (error(r, 422)["field"], error(r, 422)["message"]) == (field, f"{field}: {pattern}"), path
    r = client.put("/v1/queues/A%0A", json={"weight": 3}, headers=root)
    assert error(r, 422)["field"] == "name"
    for node in ("a%0Ab", "a%0A", "A", "a_b", "-a", "a..b"):
        r = client.post(f"/v1/nodes/k8s/{node}/drain", headers=root)
        assert error(r, 422)["message"] == f"node: String should match pattern '{NODE_PATTERN}'", node
    assert store.cordoned("node") == set() and store.cordoned("queue") == set()
    assert store.get_queue("A").weight == 1.0
    r = client.post("/v1/nodes/k8s/node-1.example/drain", headers=root)
    assert r.json() == {"node": "k8s/node-1.example", "draining": True}


@pytest.mark.parametrize("api", STORE_PARAMS, indirect=True)
def test_head_is_answered_wherever_get_is(api):
    client, _ = api
    alice = headers("alice")
    for path in ("/v1/health", "/v1/queues", "/v1/queues/A", "/v1/queues/A/pending", "/v1/status", "/v1/nodes",
                 "/v1/queues/A/jobsets/s/jobs", "/openapi.json", "/docs"):
        head, get = client.head(path, headers=alice), client.get(path, headers=alice)
        assert (head.status_code, head.content) == (200, b""), path
        assert head.headers["content-type"] == get.headers["content-type"], path
        assert head.headers.get("content-length") == get.headers.get("content-length"), path
    # A followed stream answers its headers and ends (nobody reads its body).
    head = client.head("/v1/queues/A/jobsets/s/events", headers=alice)
    assert (head.status_code, head.headers["content-type"], head.content) == (200, "application/x-ndjson", b"")
    assert client.head("/v1/queues").status_code == 401
    assert client.head("/v1/jobs/nosuchjob", headers=alice).status_code == 404
    assert client.head("/v1/health").headers["x-content-type-options"] == "nosniff"


def test_the_dashboards_ids_are_matched_whole_too(tmp_path):
    from flotilla.service.jobspec import prepare
    from tests.support.service import config

    cfg = config()
    service = build_service(cfg, Scheduler(cfg), store_url=f"sqlite:///{tmp_path}/ui.db")
    (done,) = service.store.submit("A", "s", "alice", prepare(job_file("A", "s", [job("x")]), service.settings)[1])
    client = TestClient(service.app)
    client.cookies.set("flotilla_token", "alice-token")
    rule = "1-255 characters: letters, digits, '.', '_' and '-', starting with a letter or digit"
    for path, message in ((f"/ui/jobs/{done.id}%0A", f"job_id: '{done.id}\\n' is not a valid id: {rule}"),
                          ("/ui/queues/A%0A", f"queue: 'A\\n' is not a valid id: {rule}"),
                          ("/ui/jobs?queue=A%0A", f"queue: 'A\\n' is not a valid id: {rule}")):
        r = client.get(path)
        assert r.status_code == 422, path
        assert re.search(r'<p class="error" id="error">([^<]*)</p>', r.text).group(1) == \
            message.replace("'", "&#39;"), path
    r = client.post(f"/ui/jobs/{done.id}%0A/cancel", headers={"Origin": "http://testserver"}, follow_redirects=False)
    assert r.status_code == 422 and service.store.get_job(done.id)["state"] == "queued"
    assert client.get(f"/ui/jobs/{done.id}").status_code == 200
    service.close()


# -- item 3: no tenant sees another's jobs on any GET route ----------------------------------------------------

TENANT_CONFIG = CONFIG + """
nodeTemplates:
  - {name: cpu-16, cluster: c2, resources: {cpu: 16, memory: 64Gi}}
"""


def _tenant_jobs(tag: str) -> list[dict]:
    """Jobs whose every id, label, image and selector carries ``tag``: one that runs, one that waits for a node
    template, one no template fits, one whose selector no node has."""
    def tagged(client_id, cpu, **pod):
        item = job(f"{tag}-client-{client_id}", cpu=cpu, **pod)
        item["labels"] = {"team": f"{tag}-label"}
        item["podSpec"]["containers"][0]["image"] = f"{tag}-image"
        return item
    return [tagged("run", "1"), tagged("wait", "12"), tagged("huge", "64"),
            tagged("select", "1", nodeSelector={"kind": f"{tag}-selector"})]


def _get_routes(app) -> list[str]:
    """Every GET path of the app, the included routers' too."""
    paths = []
    stack = list(app.routes)
    while stack:
        route = stack.pop(0)
        inner = getattr(route, "original_router", None)
        if inner is not None:
            stack.extend(inner.routes)
        elif "GET" in (getattr(route, "methods", None) or ()):
            paths.append(route.path)
    return paths


def test_no_get_route_shows_one_tenant_anything_of_another(tmp_path):
    cfg = parse_config(TENANT_CONFIG, "tenants.yaml")
    service = build_service(cfg, Scheduler(cfg), store_url=f"sqlite:///{tmp_path}/t.db",
                            backends=service_backends(cfg, clock=Clock()), seed=0)
    tenants = {"alice": ("A", "alpha7q"), "bob": ("B", "bravo7q")}
    clients, own = {}, {}
    for user, (queue, tag) in tenants.items():
        client = TestClient(service.app)
        client.headers.update(headers(user))
        client.cookies.set("flotilla_token", headers(user)["Authorization"].removeprefix("Bearer "))
        clients[user] = client
        answer = client.post("/v1/submit", json=job_file(queue, f"{tag}-set", _tenant_jobs(tag)))
        ids = [j["id"] for j in answer.json()["jobs"]]
        own[user] = {"queue": queue, "name": queue, "job_set": f"{tag}-set", "job_id": ids, "tag": tag}
    assert service.runner.cycle()
    routes = _get_routes(service.app)
    assert {"/v1/jobs/{job_id}", "/v1/jobs/{job_id}/logs", "/v1/queues/{queue}/jobsets/{job_set}/jobs",
            "/v1/queues/{queue}/jobsets/{job_set}/events", "/v1/queues", "/v1/queues/{name}",
            "/v1/queues/{name}/pending", "/v1/nodes", "/v1/wishlist", "/v1/status", "/v1/health", "/metrics",
            "/ui", "/ui/queues/{name}", "/ui/jobs", "/ui/jobs/{job_id}"} <= set(routes)
    queries = {"/ui/jobs": ["queue={queue}", "queue={queue}&jobSet={job_set}"],
               "/v1/queues/{queue}/jobsets/{job_set}/events": ["follow=false"]}
    asked = 0
    for user, client in clients.items():
        other = next(u for u in tenants if u != user)
        secrets = [own[other]["tag"], *own[other]["job_id"]]
        mine = [own[user]["tag"], *own[user]["job_id"]]
        for route in routes:
            params = re.findall(r"{(\w+)}", route)
            for whose in (user, other):    # the caller's own objects, and the other tenant's
                values = own[whose]
                for job_id in (values["job_id"] if "job_id" in params else [None]):
                    path = route.format(**{**values, "job_id": job_id})
                    for query in queries.get(route, [""]):
                        url = path + ("?" + query.format(**values) if query else "")
                        r = client.get(url, follow_redirects=False)
                        asked += 1
                        assert r.status_code < 500, (url, r.text)
                        text = r.text
                        for echoed in (job_id, values["job_set"]):   # a refusal may quote what was asked
                            text = text.replace(echoed, "") if echoed else text
                        leaked = [s for s in secrets if s in text]
                        assert not leaked, (user, url, r.status_code, leaked)
                        if whose == other and ({"job_id", "job_set"} & set(params) or route.endswith("pending")):
                            assert r.status_code in (403, 404), (url, r.text)   # queues are public, jobs not
        # and each tenant does see their own jobs where they look for them
        assert all(s in clients[user].get("/v1/queues/{queue}/jobsets/{job_set}/jobs".format(**own[user])).text
                   for s in mine)
    assert asked > 60
    wish = clients["alice"].get("/v1/wishlist").json()
    assert wish == {"templates": {"cpu-16": {"cluster": "c2", "jobs": 1, "nodes": 1}},
                    "unfit": {own["alice"]["job_id"][2]: "fits no node: cpu 64 > largest 16",
                              own["alice"]["job_id"][3]: "0/1 nodes are available: 1 node(s) didn't match Pod's node "
                                                         "affinity/selector"}}
    service.close()
