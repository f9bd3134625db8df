"""The API against hostile and careless input: one test per defect found by probing a running service.

Each asserts the exact status, error code, message and field, and that
nothing was stored.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from fastapi.testclient import TestClient

from flotilla.config import ConfigError, parse_config
from flotilla.service.api import create_app
from flotilla.service.jobspec import prepare
from flotilla.service.store import Store, SubmissionRejected
from tests.support.service import STORE_PARAMS, CONFIG, api_env, headers, job, job_file, make_store, settings

ID_RULE = "1-255 characters: letters, digits, '.', '_' and '-', starting with a letter or digit"


env = api_env


def error(r, status: int) -> dict:
    assert r.status_code == status, r.text
    return r.json()["error"]


def raw_post(client, path: str, text: str, user: str = "alice"):
    return client.post(path, content=text.encode(), headers={**headers(user), "Content-Type": "application/json"})


# -- 1: a deleted queue leaves nothing behind ------------------------------------------------------

def test_a_deleted_queue_leaves_no_jobs_events_or_client_ids_to_its_successor(env):
    client, store = env
    root = headers("root")
    assert client.post("/v1/queues", json={"name": "X", "owners": ["alice"]}, headers=root).status_code == 200
    old = client.post("/v1/submit", json=job_file("X", "s", [job("c1")]), headers=headers("alice")).json()
    old_id = old["jobs"][0]["id"]
    assert client.post("/v1/cancel", json={"queue": "X", "jobSetId": "s"}, headers=headers("alice")).status_code == 200
    assert client.post("/v1/queues/X/cordon", headers=root).status_code == 200
    r = client.delete("/v1/queues/X", headers=root)
    assert r.json() == {"deleted": "X", "jobs": 1, "cancelled": [], "cancelling": []}
    assert client.post("/v1/queues", json={"name": "X", "owners": ["dave"]}, headers=root).status_code == 200

    dave = headers("dave")
    assert error(client.get(f"/v1/jobs/{old_id}", headers=dave), 404)["message"] == f"job {old_id!r} not found"
    assert client.get("/v1/queues/X/jobsets/s/events?follow=false", headers=dave).text == ""
    assert client.get("/v1/queues/X/jobsets/s/jobs", headers=dave).json() == {"jobs": []}
    assert [q["cordoned"] for q in client.get("/v1/queues", headers=dave).json()["queues"] if q["name"] == "X"] == \
        [False]
    again = client.post("/v1/submit", json=job_file("X", "s", [job("c1")]), headers=dave).json()["jobs"][0]
    assert again["existing"] is False and again["id"] != old_id
    # What is left of the old queue: one "deleted" event outside every job set, for the loop's copies.
    assert [(e["queue"], e["jobSet"], e["jobId"], e["kind"]) for e in store.all_events()
            if e["jobId"] == old_id] == [("", "", old_id, "deleted")]


def test_a_queue_with_jobs_is_deleted_only_when_forced_and_force_cancels_them_first(env):
    client, store = env
    ids = [j["id"] for j in client.post("/v1/submit", json=job_file("B", "s", [job("a"), job("b")]),
                                        headers=headers("bob")).json()["jobs"]]
    assert error(client.delete("/v1/queues/B", headers=headers("root")), 409) == {
        "code": "conflict", "field": None, "errors": [],
        "message": "queue 'B' has 2 active jobs; cancel them first, or delete with force=true"}
    assert store.count_jobs() == 2
    r = client.delete("/v1/queues/B?force=true", headers=headers("root"))
    assert r.json() == {"deleted": "B", "jobs": 2, "cancelled": sorted(ids), "cancelling": []}
    assert store.count_jobs() == 0 and store.get_queue("B") is None


# -- 5 and 6: numbers, nesting, lengths, NUL: 422 naming the field, nothing stored ------------------

HUGE = [
    ("priority 2^63", json.dumps(job_file("A", "s", [{**job("x"), "priority": 2**63}])),
     "invalid", "jobs[0].priority", "integer out of the 64-bit range"),
    ("priority 10^30", json.dumps(job_file("A", "s", [{**job("x"), "priority": 10**30}])),
     "invalid", "jobs[0].priority", "integer out of the 64-bit range"),
    ("NaN deadline", json.dumps(job_file("A", "s", [job("x", activeDeadlineSeconds=float("nan"))])),
     "invalid", "jobs[0].podSpec.activeDeadlineSeconds", "NaN is not allowed: numbers must be finite"),
    ("Infinity deadline", json.dumps(job_file("A", "s", [job("x", activeDeadlineSeconds=float("inf"))])),
     "invalid", "jobs[0].podSpec.activeDeadlineSeconds", "Infinity is not allowed: numbers must be finite"),
    ("1e400 grace", json.dumps(job_file("A", "s", [job("x", terminationGracePeriodSeconds=1)])).replace(
        '"terminationGracePeriodSeconds": 1', '"terminationGracePeriodSeconds": 1e400'),
     "invalid", "jobs[0].podSpec.terminationGracePeriodSeconds", "1e400 is too large for a number"),
    ("NUL in clientId", json.dumps(job_file("A", "s", [job("a\x00b")])),
     "invalid", "jobs[0].clientId", "NUL characters are not allowed"),
]


@pytest.mark.parametrize("body, code, field, message", [h[1:] for h in HUGE], ids=[h[0] for h in HUGE])
def test_numbers_and_nul_out_of_bounds_are_refused_with_their_field(env, body, code, field, message):
    client, store = env
    assert error(raw_post(client, "/v1/submit", body), 422) == {"code": code, "field": field, "message": message,
                                                                "errors": []}
    assert store.count_jobs() == 0


def rejected_texts(r) -> list[str]:
    return [e["text"] for e in error(r, 422)["errors"]]


def test_nan_given_as_a_string_and_huge_priorities_given_as_strings_are_rejected(env):
    client, store = env
    r = client.post("/v1/submit", json=job_file("A", "s", [job("x", terminationGracePeriodSeconds="NaN"),
                                                           {**job("y"), "priority": "99999999999999999999"}]),
                    headers=headers("alice"))
    # A number written as a string is not a number: refused before its value is looked at.
    assert rejected_texts(r) == [
        "job 0 (clientId 'x'): podSpec.terminationGracePeriodSeconds: Input should be a valid number",
        "job 1 (clientId 'y'): priority: Input should be a valid integer"]
    assert store.count_jobs() == 0


@pytest.mark.parametrize("cpu", ["1e4400", "1e1000000", "1e99999"])
def test_quantities_past_the_maximum_are_rejected_without_decimal_work(env, cpu):
    client, store = env
    r = client.post("/v1/submit", json=job_file("A", "s", [job("x", cpu=cpu)]), headers=headers("alice"))
    why = f"quantity does not parse: {cpu!r} is above the maximum quantity (9223372036854775807)"
    assert rejected_texts(r) == [f"job 0 (clientId 'x'): podSpec.containers[0].resources.{part}.cpu: {why}"
                                 for part in ("requests", "limits")]
    assert store.count_jobs() == 0


def test_deep_nesting_is_refused_before_any_model_sees_it(env):
    client, store = env
    deep: list = []
    for _ in range(500):
        deep = [deep]
    body = job_file("A", "s", [job("x", volumes=deep)])
    assert error(client.post("/v1/submit", json=body, headers=headers("alice")), 422) == {
        "code": "invalid", "field": None, "errors": [], "message": "nested 505 levels deep; at most 64"}
    assert store.count_jobs() == 0


def test_reprioritize_refuses_a_priority_past_64_bits(env):
    client, store = env
    client.post("/v1/submit", json=job_file("A", "s", [job("x")]), headers=headers("alice"))
    r = raw_post(client, "/v1/reprioritize", f'{{"queue": "A", "jobSetId": "s", "priority": {10**30}}}')
    assert error(r, 422)["field"] == "priority"
    assert [j["priority"] for j in store.list_jobs("A")] == [0]


def test_an_event_id_past_64_bits_is_422_not_a_cut_stream(env):
    client, _ = env
    r = client.get("/v1/queues/A/jobsets/s/events?after=99999999999999999999&follow=false", headers=headers("alice"))
    assert error(r, 422)["message"] == "after: Input should be less than or equal to 9223372036854775807"


def test_a_queue_weight_of_infinity_is_refused_in_the_api_and_in_the_config(env):
    client, store = env
    r = raw_post(client, "/v1/queues", '{"name": "Q", "weight": Infinity}', user="root")
    assert error(r, 422)["message"] == "Infinity is not allowed: numbers must be finite"
    assert store.get_queue("Q") is None
    with pytest.raises(ConfigError) as exc:
        parse_config(CONFIG.replace("{name: B, weight: 1,", "{name: B, weight: .inf,"), "test.yaml")
    assert str(exc.value) == "test.yaml:8: queues[1].weight: Input should be a finite number (got inf)"
    for old, new, message in (
            ("lease: {timeout: 2s,", "lease: {timeout: .nan,", "test.yaml:10: lease.timeout: expected a finite "
                                                               "duration, got nan"),
            ("cycle: {period: 0.2s}", "cycle: {period: .inf}", "test.yaml:13: cycle.period: expected a finite "
                                                               "duration, got inf"),
            ("evict: {probability: 0}", "evict: {probability: .nan}", "test.yaml:9: evict.probability: Input should "
                                                                      "be a finite number (got nan)")):
        with pytest.raises(ConfigError) as exc:
            parse_config(CONFIG.replace(old, new), "test.yaml")
        assert str(exc.value) == message


def test_job_files_read_from_disk_meet_the_same_bounds():
    with pytest.raises(SubmissionRejected) as exc:
        prepare(job_file("A", "s", [job("x", activeDeadlineSeconds=float("nan"))]), settings())
    assert str(exc.value) == "submission: jobs[0].podSpec.activeDeadlineSeconds: nan is not a finite number"


# -- 7: an empty filter matches nothing -----------------------------------------------------------

def test_cancel_with_an_empty_state_list_is_refused_and_cancels_nothing(env):
    client, store = env
    client.post("/v1/submit", json=job_file("A", "s", [job("x")]), headers=headers("alice"))
    for body, field in (({"queue": "A", "states": []}, "states"), ({"queue": "A", "jobIds": []}, "jobIds")):
        e = error(client.post("/v1/cancel", json=body, headers=headers("alice")), 422)
        assert (e["code"], e["field"]) == ("invalid", field)
    assert [j["state"] for j in store.list_jobs("A")] == ["queued"]


# -- 8: ids have one pattern ------------------------------------------------------------------------

def test_ids_must_match_the_documented_pattern(env):
    client, store = env
    r = client.post("/v1/submit", json=job_file("A", "a/b", [job("x" * 256), job("ok", gang=("g/1", 1))]),
                    headers=headers("alice"))
    assert rejected_texts(r) == [
        f"submission: jobSetId: 'a/b' is not a valid id: {ID_RULE}",
        f"job 0 (clientId '{'x' * 256}'): clientId: '{'x' * 40}...' is not a valid id: {ID_RULE}",
        f"job 1 (clientId 'ok'): annotations.armadaproject.io/gangId: 'g/1' is not a valid id: {ID_RULE}"]
    assert store.count_jobs() == 0


# -- 4: without tokens, only loopback Host headers and JSON state changes ----------------------------

def test_the_open_local_service_refuses_foreign_hosts_and_non_json_state_changes(tmp_path):
    s = dataclasses.replace(settings(), tokens=())
    store = Store(f"sqlite:///{tmp_path}/open.db")
    client = TestClient(create_app(store, s), base_url="http://127.0.0.1:8080")
    r = client.post("/v1/queues", json={"name": "Z"}, headers={"Host": "attacker.example"})
    assert error(r, 400) == {"code": "bad_host", "field": None, "errors": [],
                             "message": "without auth.tokens only loopback Host headers are served "
                                        "(got 'attacker.example')"}
    r = client.post("/v1/queues", content=b'{"name": "Z"}', headers={"Content-Type": "text/plain"})
    assert error(r, 415)["message"] == "state-changing requests must send Content-Type: application/json"
    assert error(client.delete("/v1/queues/A"), 415)["code"] == "unsupported_media_type"
    r = client.post("/v1/queues", json={"name": "Z"}, headers={"Origin": "http://attacker.example"})
    assert error(r, 403) == {"code": "cross_origin", "field": None, "errors": [],
                             "message": "without auth.tokens only loopback pages may change state "
                                        "(Origin 'http://attacker.example')"}
    assert store.list_queues() == []
    assert client.post("/v1/queues", json={"name": "Z"}, headers={"Host": "localhost:8080",
                                                                   "Origin": "http://localhost:8080"}).status_code == 200
    store.close()


# -- the error model and the contract ----------------------------------------------------------------

def test_every_error_status_is_declared_with_the_one_error_model(env):
    client, _ = env
    schema = client.get("/openapi.json").json()
    for path, operations in schema["paths"].items():
        for method, op in operations.items():
            for status in ("400", "401", "403", "404", "405", "409", "413", "415", "422", "500"):
                assert op["responses"][status]["content"]["application/json"]["schema"] == \
                    {"$ref": "#/components/schemas/ErrorResponse"}, (method, path, status)


def test_405_names_every_method_of_the_path(env):
    client, _ = env
    r = client.patch("/v1/queues/A", headers=headers("root"))
    assert error(r, 405)["message"] == "method PATCH is not allowed on /v1/queues/A"
    assert r.headers["allow"] == "DELETE, GET, PUT"


def test_job_state_filters_are_checked_and_status_counts_jobs(env):
    client, _ = env
    assert error(client.get("/v1/queues/A/jobsets/s/jobs?state=AAA", headers=headers("alice")), 422)["field"] == \
        "state[0]"
    client.post("/v1/submit", json=job_file("A", "s", [job("x")]), headers=headers("alice"))
    assert client.get("/v1/status", headers=headers("alice")).json()["jobs"] == {
        "queued": 1, "leased": 0, "pending": 0, "running": 0, "succeeded": 0, "failed": 0, "preempted": 0,
        "cancelled": 0}


# -- the same on PostgreSQL, where a NUL or an over-long id used to be a 500 ---------------------------

@pytest.mark.parametrize("kind", STORE_PARAMS)
def test_on_each_store_hostile_ids_store_nothing_and_a_deleted_queue_is_forgotten(kind, tmp_path):
    s = settings()
    store = make_store(kind, tmp_path)
    store.sync_queues(s.queues)
    client = TestClient(create_app(store, s))
    alice, root = headers("alice"), headers("root")
    for cid, job_set, field in (("a\x00b", "s", "jobs[0].clientId"), ("c" * 256, "s", "jobs[0].clientId"),
                                ("ok", "s\x00", "jobSetId"), ("ok", "s" * 256, "jobSetId")):
        r = client.post("/v1/submit", json=job_file("A", job_set, [job(cid)]), headers=alice)
        assert error(r, 422)["field"] == field
    assert store.count_jobs() == 0
    old = client.post("/v1/submit", json=job_file("A", "s", [job("c1")]), headers=alice).json()["jobs"][0]["id"]
    assert client.delete("/v1/queues/A?force=true", headers=root).json() == {
        "deleted": "A", "jobs": 1, "cancelled": [old], "cancelling": []}
    assert client.post("/v1/queues", json={"name": "A", "owners": ["dave"]}, headers=root).status_code == 200
    new = client.post("/v1/submit", json=job_file("A", "s", [job("c1")]), headers=headers("dave")).json()["jobs"][0]
    assert new["existing"] is False and new["id"] != old
    assert [j["id"] for j in store.list_jobs("A")] == [new["id"]]
    for path in ("/v1/jobs/a%00b", "/v1/queues/A%00", "/v1/queues/A/jobsets/s%00/jobs",
                 "/v1/queues/A/jobsets/s/jobs?state=queued%00"):
        assert error(client.get(path, headers=headers("dave")), 400)["message"] == \
            "NUL characters are not allowed in the path or the query"
    store.close()


def test_labels_and_annotations_are_capped_at_kubernetes_limit(env):
    client, store = env
    heavy = job("heavy")
    heavy["annotations"]["team/notes"] = "n" * (256 * 1024 - len("team/notes") + 1)
    r = client.post("/v1/submit", json=job_file("A", "s", [heavy]), headers=headers("alice"))
    assert rejected_texts(r) == ["job 0 (clientId 'heavy'): annotations: labels and annotations total 262145 bytes; "
                                 "at most 262144 (Kubernetes' limit)"]
    assert store.count_jobs() == 0
