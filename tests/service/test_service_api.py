"""The API in-process: permissions (users x queues x verbs), validation rules, error shapes."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from flotilla.service.api import admin, create_app, jobs, jobsets, logs, nodes, queues, service
from flotilla.service.settings import QueueSpec
from flotilla.service.store import Store
from tests.support.service import api_env, TOKENS, headers, job, job_file, settings


env = api_env


# -- permissions ------------------------------------------------------------------------

OWNERS = {"A": {"alice", "carol", "root"}, "B": {"bob", "root"}}
USERS = ["alice", "carol", "bob", "root", "dave", None, "forged"]
VERBS = ["submit", "cancel", "reprioritize", "watch", "jobs", "list", "describe", "create", "update", "delete"]


def expected(user, queue, verb) -> int:
    if user is None or user == "forged":
        return 401
    if verb in ("list", "describe"):
        return 200
    if verb in ("create", "update", "delete"):
        return 200 if user == "root" else 403
    return 200 if user in OWNERS[queue] else 403


def call(client, store, user, queue, verb):
    h = {} if user is None else ({"Authorization": "Bearer not-a-token"} if user == "forged" else headers(user))
    if verb == "submit":
        return client.post("/v1/submit", json=job_file(queue, "s", [job(f"{user}-x")]), headers=h)
    if verb == "cancel":
        return client.post("/v1/cancel", json={"queue": queue, "jobSetId": "s"}, headers=h)
    if verb == "reprioritize":
        return client.post("/v1/reprioritize", json={"queue": queue, "jobSetId": "s", "priority": 3}, headers=h)
    if verb == "watch":
        return client.get(f"/v1/queues/{queue}/jobsets/s/events?follow=false", headers=h)
    if verb == "jobs":
        return client.get(f"/v1/queues/{queue}/jobsets/s/jobs", headers=h)
    if verb == "list":
        return client.get("/v1/queues", headers=h)
    if verb == "describe":
        return client.get(f"/v1/queues/{queue}", headers=h)
    if verb == "create":
        return client.post("/v1/queues", json={"name": f"{queue}-new-{user}"}, headers=h)
    if verb == "update":
        q = store.get_queue(queue)
        return client.put(f"/v1/queues/{queue}", json={"name": queue, "weight": 1, "owners": list(q.owners),
                                                        "groupOwners": list(q.group_owners)}, headers=h)
    if verb == "delete":
        store.create_queue(QueueSpec(f"{queue}-tmp"))
        try:
            return client.delete(f"/v1/queues/{queue}-tmp", headers=h)
        finally:
            if store.get_queue(f"{queue}-tmp"):
                store.delete_queue(f"{queue}-tmp")
    raise AssertionError(verb)


def test_permissions_table(env):
    client, store = env
    got, want = {}, {}
    for user in USERS:
        for queue in ("A", "B"):
            for verb in VERBS:
                key = (user, queue, verb)
                got[key] = call(client, store, user, queue, verb).status_code
                want[key] = expected(user, queue, verb)
    wrong = {k: (got[k], want[k]) for k in got if got[k] != want[k]}
    assert not wrong, wrong


def test_401_says_bearer_and_leaks_nothing(env):
    client, _ = env
    r = client.get("/v1/queues")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    r = client.get("/v1/queues", headers={"Authorization": "Basic abc"})
    assert r.status_code == 401


def test_a_job_of_another_users_queue_is_indistinguishable_from_a_missing_one(env):
    client, _ = env
    r = client.post("/v1/submit", json=job_file("A", "s", [job("x")]), headers=headers("alice"))
    job_id = r.json()["jobs"][0]["id"]
    assert client.get(f"/v1/jobs/{job_id}", headers=headers("carol")).status_code == 200
    assert client.get(f"/v1/jobs/{job_id}", headers=headers("root")).status_code == 200
    for user in ("bob", "dave"):
        forbidden = client.get(f"/v1/jobs/{job_id}", headers=headers(user))
        missing = client.get("/v1/jobs/01xxxxxxxxxxxxxxxxxxxxxxxx", headers=headers(user))
        assert forbidden.status_code == missing.status_code == 404
        assert forbidden.json() == {"error": {"code": "not_found", "message": f"job {job_id!r} not found",
                                              "field": None, "errors": []}}
        assert missing.json() == {"error": {"code": "not_found", "message": "job '01xxxxxxxxxxxxxxxxxxxxxxxx' not found",
                                            "field": None, "errors": []}}
    # Cancelling another queue's job by id: 403 on the queue before anything about the job.
    r = client.post("/v1/cancel", json={"queue": "A", "jobIds": [job_id]}, headers=headers("bob"))
    assert r.status_code == 403 and job_id not in r.text
    # Naming it under a queue the user owns: not found there.
    r = client.post("/v1/cancel", json={"queue": "B", "jobIds": [job_id]}, headers=headers("bob"))
    assert r.status_code == 404


def test_status_and_submit_output_shapes(env):
    client, _ = env
    r = client.post("/v1/submit", json=job_file("A", "s", [job("one"), job(None), job("one")]),
                    headers=headers("alice"))
    assert r.status_code == 200
    out = r.json()["jobs"]
    assert [j["clientId"] for j in out] == ["one", None, "one"] and out[0]["id"] == out[2]["id"]
    status = client.get(f"/v1/jobs/{out[0]['id']}", headers=headers("alice")).json()
    assert {k: status[k] for k in ("id", "queue", "jobSet", "state")} == \
        {"id": out[0]["id"], "queue": "A", "jobSet": "s", "state": "queued"}


def test_openapi_is_published(env):
    client, _ = env
    schema = client.get("/openapi.json").json()
    assert "/v1/submit" in schema["paths"] and "JobFile" in json.dumps(schema)


#: The API's operations, router by router (jobs, logs, job sets, queues, nodes, service), in the document's order.
OPERATIONS = [
    ("/v1/submit", ["post"]), ("/v1/cancel", ["post"]), ("/v1/reprioritize", ["post"]),
    ("/v1/jobs/{job_id}", ["get"]), ("/v1/jobs/{job_id}/logs", ["get"]),
    ("/v1/queues/{queue}/jobsets/{job_set}/jobs", ["get"]), ("/v1/queues/{queue}/jobsets/{job_set}/events", ["get"]),
    ("/v1/queues", ["get", "post"]), ("/v1/queues/{name}/cordon", ["post"]), ("/v1/queues/{name}/uncordon", ["post"]),
    ("/v1/queues/{name}", ["get", "put", "delete"]), ("/v1/queues/{name}/pending", ["get"]),
    ("/v1/nodes", ["get"]), ("/v1/nodes/{cluster}/{node}/{action}", ["post"]),
    ("/v1/health", ["get"]), ("/v1/wishlist", ["get"]), ("/v1/status", ["get"]),
]


@pytest.mark.parametrize("admin_endpoints", [False, True])
def test_the_document_lists_every_router_s_operations_and_no_route_closes_over_the_app(tmp_path, admin_endpoints):
    store = Store(f"sqlite:///{tmp_path}/api.db")
    app = create_app(store, settings(), admin_endpoints=admin_endpoints)
    extra = [("/v1/admin/clusters/{name}/{action}", ["post"])] if admin_endpoints else []
    assert [(path, list(ops)) for path, ops in app.openapi()["paths"].items()] == OPERATIONS + extra
    # Every endpoint is a router module's own function: it reaches the service through the app's ApiContext.
    routers = [jobs.router, logs.router, jobsets.router, queues.router, nodes.router, service.router, admin.router]
    endpoints = [route.endpoint for router in routers for route in router.routes]
    assert len(endpoints) == 21
    assert [e.__qualname__ for e in endpoints if e.__closure__ or "<locals>" in e.__qualname__] == []
    store.close()


def test_malformed_requests_get_422_with_the_field_path(env):
    client, _ = env
    r = client.post("/v1/queues", json={"name": "Q", "weight": -1}, headers=headers("root"))
    assert r.status_code == 422 and r.json()["error"]["field"] == "weight"
    r = client.post("/v1/cancel", json={"queue": "A", "jobIds": "x"}, headers=headers("alice"))
    assert r.status_code == 422 and r.json()["error"]["field"] == "jobIds"


def test_queue_delete_refuses_a_queue_with_active_jobs(env):
    client, store = env
    client.post("/v1/submit", json=job_file("B", "s", [job("x")]), headers=headers("bob"))
    r = client.delete("/v1/queues/B", headers=headers("root"))
    assert r.status_code == 409 and r.json()["error"] == {
        "code": "conflict", "field": None, "errors": [],
        "message": "queue 'B' has 1 active jobs; cancel them first, or delete with force=true"}
    client.post("/v1/cancel", json={"queue": "B", "states": ["queued"]}, headers=headers("bob"))
    assert client.delete("/v1/queues/B", headers=headers("root")).status_code == 200


def test_watch_resumes_from_an_event_id_in_both_formats(env):
    client, _ = env
    client.post("/v1/submit", json=job_file("A", "w", [job("a"), job("b")]), headers=headers("alice"))
    lines = client.get("/v1/queues/A/jobsets/w/events?follow=false", headers=headers("alice")).text.splitlines()
    evs = [json.loads(line) for line in lines if line]
    assert [e["kind"] for e in evs] == ["submitted", "queued", "submitted", "queued"]
    rest = client.get(f"/v1/queues/A/jobsets/w/events?follow=false&after={evs[1]['id']}", headers=headers("alice"))
    assert [json.loads(x)["id"] for x in rest.text.splitlines() if x] == [e["id"] for e in evs[2:]]
    sse = client.get("/v1/queues/A/jobsets/w/events?follow=false&format=sse",
                     headers={**headers("alice"), "Last-Event-ID": str(evs[2]["id"])})
    assert sse.headers["content-type"].startswith("text/event-stream")
    assert f"id: {evs[3]['id']}" in sse.text and f"id: {evs[2]['id']}\n" not in sse.text


# -- validation: one test per rule -----------------------------------------------------------

def rejected(client, store, body, user="alice"):
    r = client.post("/v1/submit", json=body, headers=headers(user))
    assert store.count_jobs() == 0, "a rejected submission stored something"
    return r


def texts(r) -> list[str]:
    assert r.status_code == 422, r.text
    return [e["text"] for e in r.json()["error"]["errors"]]


def test_rule_queue_must_exist(env):
    client, store = env
    r = rejected(client, store, job_file("nope", "s", [job("a"), job("b")]))
    assert r.status_code == 404 and r.json() == {"error": {"code": "not_found", "field": "queue", "errors": [],
                                                           "message": "queue 'nope' does not exist"}}


def test_rule_user_may_submit_to_the_queue(env):
    client, store = env
    r = rejected(client, store, job_file("B", "s", [job("a")]), user="alice")
    assert r.status_code == 403 and r.json()["error"]["message"] == "user 'alice' may not submit to queue 'B'"


def test_rule_priority_class_exists(env):
    client, store = env
    r = rejected(client, store, job_file("A", "s", [job("a"), job("b", pc="gold")]))
    assert texts(r) == ["job 1 (clientId 'b'): podSpec.priorityClassName: priority class 'gold' does not exist "
                        "(known: armada-default, armada-preemptible)"]


def test_rule_requests_equal_limits(env):
    client, store = env
    bad = job("a")
    bad["podSpec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}
    nolimit = job("b")
    nolimit["podSpec"]["containers"][0]["resources"] = {"requests": {"memory": "1Gi"}}
    r = rejected(client, store, job_file("A", "s", [bad, nolimit]))
    assert texts(r) == [
        "job 0 (clientId 'a'): podSpec.containers[0].resources.limits.cpu: requests must equal limits: "
        "cpu requests 1 but limits 2",
        "job 1 (clientId 'b'): podSpec.containers[0].resources.limits.memory: requests must equal limits: "
        "memory is requested (1Gi) but has no limit"]


def test_rule_limits_alone_set_the_requests(env):
    client, store = env
    only_limits = job("a")
    only_limits["podSpec"]["containers"][0]["resources"] = {"limits": {"cpu": "500m"}}
    r = client.post("/v1/submit", json=job_file("A", "s", [only_limits]), headers=headers("alice"))
    assert r.status_code == 200
    assert store.get_job(r.json()["jobs"][0]["id"])["pods"][0]["requests"] == {"cpu": 500}


def test_rule_quantities_parse(env):
    client, store = env
    r = rejected(client, store, job_file("A", "s", [job("a", cpu="lots"), job("b", cpu="0.0001")]))
    t = texts(r)
    assert t[0].startswith("job 0 (clientId 'a'): podSpec.containers[0].resources.requests.cpu: quantity does not "
                           "parse: expected a quantity")
    assert t[2].startswith("job 1 (clientId 'b'): podSpec.containers[0].resources.requests.cpu: quantity does not "
                           "parse: '0.0001' is not a whole number of millicores")


@pytest.mark.parametrize("value,stored", [(None, 1.0), (0, 1.0), (1, 1.0), (30, 30.0), (300, 300.0)])
def test_rule_grace_period_accepted(env, value, stored):
    client, store = env
    extra = {} if value is None else {"terminationGracePeriodSeconds": value}
    r = client.post("/v1/submit", json=job_file("A", "s", [job("a", **extra)]), headers=headers("alice"))
    assert r.status_code == 200
    rec = store.get_job(r.json()["jobs"][0]["id"])
    assert rec["terminationGracePeriodSeconds"] == stored
    assert store.job_spec(rec["id"])["podSpec"]["terminationGracePeriodSeconds"] == stored


def test_rule_grace_period_between_0_and_1_is_rejected(env):
    client, store = env
    r = rejected(client, store, job_file("A", "s", [job("a", terminationGracePeriodSeconds=0.5)]))
    assert texts(r) == ["job 0 (clientId 'a'): podSpec.terminationGracePeriodSeconds: 0.5s is between 0 and 1s: "
                        "use 0 (meaning 1s) or at least 1s"]


def test_rule_grace_period_above_the_maximum_is_rejected(env):
    client, store = env
    r = rejected(client, store, job_file("A", "s", [job("a"), job("b", terminationGracePeriodSeconds=301)]))
    assert texts(r) == ["job 1 (clientId 'b'): podSpec.terminationGracePeriodSeconds: 301s is above the maximum "
                        "grace period (gracePeriod.max = 300s)"]


def test_rule_deadline_defaults_from_config_and_a_gpu_job_is_a_gpu_job(env):
    client, store = env
    gpu = job("g")
    gpu["podSpec"]["containers"][0]["resources"] = {"limits": {"cpu": "1", "nvidia.com/gpu": "1"}}
    body = job_file("A", "s", [job("c"), gpu, job("own", activeDeadlineSeconds=60)])
    ids = [j["id"] for j in client.post("/v1/submit", json=body, headers=headers("alice")).json()["jobs"]]
    assert [store.get_job(i)["activeDeadlineSeconds"] for i in ids] == [3 * 86400, 14 * 86400, 60]
    r = rejected_after(client, store, job_file("A", "s", [job("neg", activeDeadlineSeconds=0)]))
    assert texts(r) == ["job 0 (clientId 'neg'): podSpec.activeDeadlineSeconds: must be positive, got 0"]


def rejected_after(client, store, body):
    before = store.count_jobs()
    r = client.post("/v1/submit", json=body, headers=headers("alice"))
    assert store.count_jobs() == before
    return r


def test_rule_gang_members_must_all_arrive_together(env):
    client, store = env
    r = rejected(client, store, job_file("A", "s", [job("m0", gang=("g", 3)), job("m1", gang=("g", 3))]))
    assert texts(r) == [
        f"job {i} (clientId 'm{i}'): annotations.armadaproject.io/gangId: gang 'g' has 2 of its 3 members in this "
        "submission; a gang is accepted only when all of its members are submitted together" for i in (0, 1)]


def test_rule_gang_cardinality_must_be_consistent(env):
    client, store = env
    r = rejected(client, store, job_file("A", "s", [job("m0", gang=("g", 2)), job("m1", gang=("g", 3))]))
    assert texts(r)[0] == ("job 0 (clientId 'm0'): annotations.armadaproject.io/gangCardinality: gang 'g' has "
                           "inconsistent cardinality (job 0 says 2, job 1 says 3)")
    r = rejected(client, store, job_file("A", "s", [job("m0", gang=("g", "two"))]))
    assert texts(r) == ["job 0 (clientId 'm0'): annotations.armadaproject.io/gangCardinality: gang cardinality "
                        "must be a whole number of jobs, at least 1; got 'two'"]


def test_rule_complete_gang_is_accepted(env):
    client, store = env
    r = client.post("/v1/submit", json=job_file("A", "s", [job(f"m{i}", gang=("g", 3)) for i in range(3)]),
                    headers=headers("alice"))
    assert r.status_code == 200 and store.count_jobs() == 3


def test_rule_a_seen_client_id_returns_the_existing_job(env):
    client, store = env
    first = client.post("/v1/submit", json=job_file("A", "s", [job("a")]), headers=headers("alice")).json()
    again = client.post("/v1/submit", json=job_file("A", "other-set", [job("a"), job("b")]),
                        headers=headers("carol")).json()
    assert again["jobs"][0] == {**first["jobs"][0], "existing": True}
    assert store.count_jobs() == 2


def test_rule_pod_specs_are_one_job(env):
    client, store = env
    body = job_file("A", "s", [{"clientId": "multi", "podSpecs": [job()["podSpec"], job(cpu="2")["podSpec"]]}])
    r = client.post("/v1/submit", json=body, headers=headers("alice"))
    assert r.status_code == 200 and store.count_jobs() == 1
    rec = store.get_job(r.json()["jobs"][0]["id"])
    assert [p["requests"] for p in rec["pods"]] == [{"cpu": 1000}, {"cpu": 2000}]
    both = {"clientId": "both", "podSpec": job()["podSpec"], "podSpecs": [job()["podSpec"]]}
    r = rejected_after(client, store, job_file("A", "s", [both]))
    assert texts(r) == ["job 0 (clientId 'both'): podSpec: give either podSpec or podSpecs, not both"]
    r = rejected_after(client, store, job_file("A", "s", [{"clientId": "none"}]))
    assert texts(r) == ["job 0 (clientId 'none'): podSpec: a job needs a podSpec (or podSpecs: a list of pod specs)"]


def test_shape_errors_name_the_job_and_field(env):
    client, store = env
    bad = job("x")
    bad["podSpec"]["containers"] = []
    r = rejected(client, store, job_file("A", "s", [job("ok"), bad]))
    first = r.json()["error"]["errors"][0]
    assert first["text"].startswith("job 1 (clientId 'x'): podSpec.containers: List should have at least 1 item")
    assert (first["field"], first["index"], first["clientId"]) == ("jobs[1].podSpec.containers", 1, "x")
    assert r.json()["error"]["field"] == "jobs[1].podSpec.containers"


def test_one_bad_job_rejects_the_whole_file(env):
    client, store = env
    jobs = [job(f"c{i}") for i in range(20)] + [job("bad", terminationGracePeriodSeconds=0.2)]
    r = rejected(client, store, job_file("A", "s", jobs))
    assert len(texts(r)) == 1 and texts(r)[0].startswith("job 20 (clientId 'bad')")


def test_all_tokens_in_fixture_are_known():
    assert set(TOKENS) == {"alice", "carol", "bob", "root", "dave"}


def test_without_tokens_the_local_service_is_open(tmp_path):
    s = settings().__class__(**{**{f: getattr(settings(), f) for f in settings().__slots__}, "tokens": ()})
    store = Store(f"sqlite:///{tmp_path}/open.db")
    store.sync_queues(s.queues)
    client = TestClient(create_app(store, s), base_url="http://127.0.0.1:8080")
    assert client.post("/v1/submit", json=job_file("B", "s", [job("x")])).status_code == 200
    assert client.post("/v1/queues", json={"name": "Z"}).status_code == 200
    store.close()
