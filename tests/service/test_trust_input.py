"""What the service takes as text, ids, quantities, resource names and form numbers: one test per finding of the
hostile and careless probe (lone UTF-16 surrogates, numbers past 64 bits, trailing newlines, quantities and
resource names Kubernetes refuses).

Each asserts the exact status and message, and that nothing was stored (read back from the store or the API).
"""

from __future__ import annotations

import json
import re

import pytest
from fastapi.testclient import TestClient

from flotilla.config import ConfigError, load_config, parse_config
from flotilla.scheduler import Scheduler
from flotilla.core.quantities import QuantityError, parse_duration, parse_quantity, resource_name_problem
from flotilla.service.api import create_app
from flotilla.service.jobspec import prepare
from flotilla.service.server import build_service
from flotilla.service.store import SubmissionRejected
from tests.support.service import CONFIG, STORE_PARAMS, api_env, config, headers, job, job_file, make_store, settings

env = api_env

ID_RULE = "1-255 characters: letters, digits, '.', '_' and '-', starting with a letter or digit"
NAME_RULE = ("a Kubernetes qualified name: an optional DNS subdomain prefix (lower-case letters, digits, '-' and "
             "'.', at most 253 characters) and '/', then 1-63 letters, digits, '-', '_' or '.', starting and ending "
             "with a letter or digit")
SURROGATE = "not valid Unicode: lone surrogate \\ud800 at character 1"


def error(r, status: int) -> dict:
    assert r.status_code == status, r.text
    return r.json()["error"]


def post_text(client, path: str, text: str, user: str = "alice", method: str = "POST"):
    """``text`` sent as the body as it is: JSON escapes such as ``\\ud800`` reach the server unchanged."""
    return client.request(method, path, content=text.encode(),
                          headers={**headers(user), "Content-Type": "application/json"})


def with_surrogate(value) -> str:
    """``value`` as JSON text, every ``@`` in its strings written as the lone-surrogate escape ``\\ud800``."""
    return json.dumps(value).replace("@", "\\ud800")


@pytest.fixture(name="api")
def api_on_each_store(request, tmp_path):
    s = settings()
    store = make_store(request.param, tmp_path)
    store.sync_queues(s.queues)
    yield TestClient(create_app(store, s)), store
    store.close()


# -- finding 2: lone surrogates are refused at the door, with the field, and nothing is stored ---------------

@pytest.mark.parametrize("api", STORE_PARAMS, indirect=True)
def test_an_owner_name_with_a_lone_surrogate_is_refused_and_the_queue_list_still_reads(api):
    client, store = api
    r = post_text(client, "/v1/queues", with_surrogate({"name": "Q", "owners": ["@"]}), user="root")
    assert error(r, 422) == {"code": "invalid", "field": "owners[0]", "message": SURROGATE, "errors": []}
    r = post_text(client, "/v1/queues/A", with_surrogate({"name": "A", "owners": ["alice", "@"]}), user="root",
                  method="PUT")
    assert error(r, 422) == {"code": "invalid", "field": "owners[1]", "message": SURROGATE, "errors": []}
    assert store.get_queue("Q") is None and store.get_queue("A").owners == ("alice",)
    listed = client.get("/v1/queues", headers=headers("dave"))
    assert listed.status_code == 200
    assert [(q["name"], q["owners"]) for q in listed.json()["queues"]] == [("A", ["alice"]), ("B", ["bob"])]


SURROGATE_FIELDS = [
    ("resource name", {"podSpec": {"containers": [{"name": "main", "image": "busybox", "resources": {
        "requests": {"@": "1"}, "limits": {"@": "1"}}}]}}, "jobs[0].podSpec.containers[0].resources.requests.\\ud800",
     "not valid Unicode: lone surrogate \\ud800 at character 1"),
    ("label value", {"labels": {"team": "a@"}}, "jobs[0].labels.team",
     "not valid Unicode: lone surrogate \\ud800 at character 2"),
    ("label key", {"labels": {"@team": "a"}}, "jobs[0].labels.\\ud800team", SURROGATE),
    ("annotation", {"annotations": {"note": "@"}}, "jobs[0].annotations.note", SURROGATE),
    ("image", {"podSpec": {"containers": [{"name": "main", "image": "busy@box", "resources": {
        "requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}}, "jobs[0].podSpec.containers[0].image",
     "not valid Unicode: lone surrogate \\ud800 at character 5"),
    ("nodeSelector", {"podSpec": {"nodeSelector": {"zone": "@"}, "containers": [{
        "name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}},
     "jobs[0].podSpec.nodeSelector.zone", SURROGATE),
    ("clientId", {"clientId": "@"}, "jobs[0].clientId", SURROGATE),
]


@pytest.mark.parametrize("api", STORE_PARAMS, indirect=True)
@pytest.mark.parametrize("fields, field, message", [c[1:] for c in SURROGATE_FIELDS],
                         ids=[c[0] for c in SURROGATE_FIELDS])
def test_a_lone_surrogate_anywhere_in_a_job_is_refused_with_its_field(api, fields, field, message):
    client, store = api
    body = job_file("A", "s", [{**job("x"), **fields}])
    assert error(post_text(client, "/v1/submit", with_surrogate(body)), 422) == {
        "code": "invalid", "field": field, "message": message, "errors": []}
    for name, value in (("queue", "A@"), ("jobSetId", "s@")):
        r = post_text(client, "/v1/submit", with_surrogate({**job_file("A", "s", [job("x")]), name: value}))
        assert error(r, 422) == {"code": "invalid", "field": name, "errors": [],
                                 "message": "not valid Unicode: lone surrogate \\ud800 at character 2"}
    assert store.count_jobs() == 0
    assert client.get("/v1/queues/A/jobsets/s/jobs", headers=headers("alice")).json() == {"jobs": []}


def test_a_valid_surrogate_pair_is_one_character_and_is_stored(env):
    client, store = env
    body = with_surrogate(job_file("A", "s", [{**job("x"), "labels": {"emoji": "\U0001F600"}}]))
    assert "\\ud83d\\ude00" in body
    r = post_text(client, "/v1/submit", body)
    assert r.status_code == 200, r.text
    (stored,) = store.list_jobs("A")
    assert store.job_spec(stored["id"])["labels"] == {"emoji": "\U0001F600"}


def test_cancel_and_reprioritize_bodies_with_a_lone_surrogate_are_refused(env):
    client, store = env
    (submitted,) = client.post("/v1/submit", json=job_file("A", "s", [job("x")]), headers=headers("alice")
                               ).json()["jobs"]
    for path, body, field in (("/v1/cancel", {"queue": "A", "jobSetId": "s@"}, "jobSetId"),
                              ("/v1/reprioritize", {"queue": "A", "jobIds": ["@"], "priority": 3}, "jobIds[0]")):
        assert error(post_text(client, path, with_surrogate(body)), 422)["field"] == field
    job_record = store.get_job(submitted["id"])
    assert (job_record["state"], job_record["priority"]) == ("queued", 0)


def test_query_and_path_text_that_is_not_utf8_is_refused_not_replaced(env):
    client, store = env
    for path, where in (("/v1/queues/A/jobsets/s/jobs?state=%ff", "query"), ("/v1/queues/%ED%A0%80", "path"),
                        ("/v1/queues/A/jobsets/s%C3/jobs", "path"), ("/ui/jobs?queue=A&owner=%80", "query")):
        assert error(client.get(path, headers=headers("alice")), 422) == {
            "code": "invalid", "field": None, "errors": [],
            "message": f"the {where} is not valid UTF-8 once percent-decoded"}
    r = client.post("/v1/queues/%ff/cordon", headers=headers("root"))
    assert error(r, 422)["message"] == "the path is not valid UTF-8 once percent-decoded"
    assert store.cordoned("queue") == set()
    # Valid UTF-8 reaches the route, which refuses it as no job set id can hold it.
    assert error(client.get("/v1/queues/A/jobsets/%C3%A9t%C3%A9/jobs", headers=headers("alice")), 422)["field"] == \
        "job_set"


# -- finding 2: the dashboard's forms have the API's bounds -----------------------------------------------------

@pytest.fixture(name="ui")
def ui_service(tmp_path):
    cfg = config()
    service = build_service(cfg, Scheduler(cfg), store_url=f"sqlite:///{tmp_path}/ui.db")
    (done,) = service.store.submit("A", "s", "alice", prepare(job_file("A", "s", [job("x")]), service.settings)[1])
    client = TestClient(service.app)
    client.cookies.set("flotilla_token", "alice-token")
    yield client, service, done.id
    service.close()


def page_error(response) -> str:
    return re.search(r'<p class="error" id="error">([^<]*)</p>', response.text).group(1)


@pytest.mark.parametrize("priority, message", [
    (str(2**63), "integer out of the 64-bit range"),
    (str(10**22), "integer out of the 64-bit range"),
    (str(2**53), "priority: Input should be less than or equal to 9007199254740991"),
    (str(-2**53), "priority: Input should be greater than or equal to -9007199254740991"),
    ("１", "priority: Input should be a valid integer"),
    ("3.5", "priority: Input should be a valid integer"),
    (" 1", "priority: Input should be a valid integer"),
    ("1_0", "priority: Input should be a valid integer"),
    ("+1", "priority: Input should be a valid integer"),
    ("1.0", "priority: Input should be a valid integer"),
])
def test_the_reprioritize_form_refuses_what_the_api_refuses_with_the_same_message(ui, priority, message):
    client, service, job_id = ui
    form = client.post(f"/ui/jobs/{job_id}/reprioritize", data={"priority": priority},
                       headers={"Origin": "http://testserver"}, follow_redirects=False)
    assert form.status_code == 422
    assert page_error(form) == message
    api = client.post("/v1/reprioritize", headers={**headers("alice"), "Content-Type": "application/json"},
                      content=f'{{"queue": "A", "jobIds": ["{job_id}"], "priority": '
                              f'{priority if priority.lstrip("-").isascii() and priority.lstrip("-").isdigit() else json.dumps(priority)}}}'
                      .encode())
    assert error(api, 422)["message"] == message
    assert service.store.get_job(job_id)["priority"] == 0
    assert [e["kind"] for e in service.store.all_events()] == ["submitted", "queued"]


def test_the_reprioritize_form_takes_a_priority_within_bounds_and_refuses_text_that_is_not_utf8(ui):
    client, service, job_id = ui
    origin = {"Origin": "http://testserver", "Content-Type": "application/x-www-form-urlencoded"}
    r = client.post(f"/ui/jobs/{job_id}/reprioritize", content=b"priority=%ff", headers=origin)
    assert (r.status_code, page_error(r)) == (422, "a form field is not valid UTF-8 once percent-decoded")
    r = client.post(f"/ui/jobs/{job_id}/reprioritize", content=b"", headers=origin)
    assert (r.status_code, page_error(r)) == (422, "priority: Field required")
    assert service.store.get_job(job_id)["priority"] == 0
    r = client.post(f"/ui/jobs/{job_id}/reprioritize", data={"priority": str(2**53 - 1)},
                    headers={"Origin": "http://testserver"}, follow_redirects=False)
    assert (r.status_code, r.headers["location"]) == (303, f"/ui/jobs/{job_id}?done=priority")
    assert service.store.get_job(job_id)["priority"] == 2**53 - 1


def test_a_job_list_page_past_what_a_64_bit_offset_holds_is_a_422_page(ui):
    client, _, _ = ui
    r = client.get(f"/ui/jobs?queue=A&page_number={10**22}")
    assert r.status_code == 422
    assert page_error(r) == ("sort must be one of submitted, priority, state, id, owner, jobSet, updated, order asc "
                             "or desc, state one of queued, leased, pending, running, succeeded, failed, preempted, "
                             "cancelled, page_number from 1 to 184467440737095516")
    assert client.get("/ui/jobs?queue=A&page_number=184467440737095516").status_code == 200


# -- finding 3: ids are matched whole ------------------------------------------------------------------------------

def test_ids_with_a_trailing_newline_are_refused(env):
    client, store = env
    body = job_file("A", "ok\n", [job("c\n"), job("g", gang=("g\n", 1))])
    r = client.post("/v1/submit", json=body, headers=headers("alice"))
    assert [e["text"] for e in error(r, 422)["errors"]] == [
        f"submission: jobSetId: 'ok\\n' is not a valid id: {ID_RULE}",
        f"job 0 (clientId 'c\\n'): clientId: 'c\\n' is not a valid id: {ID_RULE}",
        f"job 1 (clientId 'g'): annotations.armadaproject.io/gangId: 'g\\n' is not a valid id: {ID_RULE}"]
    r = client.post("/v1/queues", json={"name": "Q\n"}, headers=headers("root"))
    assert error(r, 422)["field"] == "name"
    assert store.count_jobs() == 0 and store.get_queue("Q\n") is None


# -- finding 4: quantities and resource names as Kubernetes takes them -------------------------------------------

@pytest.mark.parametrize("cpu", [" 1", "1 ", "1\n", "\uff11", "\u0663", "1 k", "1K", "1e1.5", "0x10", "1_000", ""])
def test_quantities_kubernetes_refuses_are_refused(env, cpu):
    client, store = env
    r = client.post("/v1/submit", json=job_file("A", "s", [job("x", cpu=cpu)]), headers=headers("alice"))
    why = f"quantity does not parse: expected a quantity such as 500m, 2 or 64Mi, got {cpu!r}"
    assert [e["text"] for e in error(r, 422)["errors"]] == [
        f"job 0 (clientId 'x'): podSpec.containers[0].resources.{part}.cpu: {why}" for part in ("requests", "limits")]
    assert store.count_jobs() == 0


def test_quantities_in_kubernetes_notation_parse_exactly():
    assert [parse_quantity(text, "cpu") for text in ("1e3", "1E3", "2.", ".5", "+1", "250m", "1k", "2e-3")] == \
        [1_000_000, 1_000_000, 2000, 500, 1000, 250, 1_000_000, 2]
    assert [parse_quantity(text, "memory") for text in ("64Mi", "1Gi", "1G", "5E-1Ki", "3Ti")] == \
        [64 * 2**20, 2**30, 10**9, 512, 3 * 2**40]
    with pytest.raises(QuantityError) as exc:
        parse_quantity("\u0663", "cpu")   # Arabic-Indic three: Python's int() and \d take it, Kubernetes does not
    assert str(exc.value) == "expected a quantity such as 500m, 2 or 64Mi, got '\u0663'"
    assert parse_duration("90s") == 90.0
    for text in (" 30s", "30s\n", "\uff13\uff10s"):
        with pytest.raises(QuantityError):
            parse_duration(text)


@pytest.mark.parametrize("name", ["<img src=x>", "a b", "-cpu", "cpu-", "Example.com/gpu", "a/b/c", "/gpu", "x" * 64,
                                  "example.com/", "\u00e9"])
def test_resource_names_kubernetes_refuses_are_refused(env, name):
    client, store = env
    spec = {"containers": [{"name": "main", "image": "busybox",
                            "resources": {"requests": {name: "1"}, "limits": {name: "1"}}}]}
    r = client.post("/v1/submit", json=job_file("A", "s", [{"clientId": "x", "podSpec": spec}]),
                    headers=headers("alice"))
    assert [e["text"] for e in error(r, 422)["errors"]] == [
        f"job 0 (clientId 'x'): podSpec.containers[0].resources.{part}.{name}: {name!r} is not a valid resource "
        f"name: {NAME_RULE}" for part in ("requests", "limits")]
    assert store.count_jobs() == 0


def test_qualified_resource_names_are_taken():
    assert [resource_name_problem(name) for name in ("cpu", "nvidia.com/gpu", "hugepages-2Mi", "ephemeral-storage",
                                                     "example.com/My_Device.1", "x" * 63)] == [None] * 6


# -- the config: one line naming file, line and field ----------------------------------------------------------------

@pytest.mark.parametrize("old, new, message", [
    ("owners: [bob]", 'owners: ["\\ud800"]', f"test.yaml:8: queues[1].owners[0]: {SURROGATE}"),
    ("{name: B,", '{"b\\udfff": 1, name: B,', "test.yaml:8: queues[1].b\\udfff: not valid Unicode: lone surrogate "
                                               "\\udfff at character 2"),
    ("{name: B,", '{name: "B\\0",', "test.yaml:8: queues[1].name: NUL characters are not allowed"),
    ("cpu: 8, memory: 32Gi}}]", 'cpu: 8, "<img src=x>": 1}}]',
     f"test.yaml:28: clusters[1].nodes[0].resources.<img src=x>: '<img src=x>' is not a valid resource name: "
     f"{NAME_RULE}"),
    ("cpu: 8, memory: 32Gi}}]", 'cpu: " 8", memory: 32Gi}}]',
     "test.yaml:28: clusters[1].nodes[0].resources.cpu: expected a quantity such as 500m, 2 or 64Mi, got ' 8'"),
    ("lease: {timeout: 2s,", 'lease: {timeout: "2s\\n",', "test.yaml:10: lease.timeout: expected a duration such as "
                                                            "30s, 5m, 2h, 3d or seconds, got '2s\\n'"),
])
def test_config_text_that_is_not_valid_is_one_line_naming_file_line_and_field(old, new, message):
    assert old in CONFIG
    with pytest.raises(ConfigError) as exc:
        parse_config(CONFIG.replace(old, new), "test.yaml")
    assert str(exc.value) == message


def test_a_config_file_that_is_not_utf8_names_its_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_bytes(CONFIG.replace("owners: [bob]", "owners: [b\xffb]").encode("latin-1"))
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    assert str(exc.value) == f"{path}:8: not UTF-8 text (byte 36 of the line)"


def test_job_files_read_from_disk_are_held_to_the_same_text_rules():
    raw = json.loads(with_surrogate(job_file("A", "s", [{**job("x"), "annotations": {"n": "@"}}])))
    with pytest.raises(SubmissionRejected) as exc:
        prepare(raw, settings())
    assert str(exc.value) == f"submission: jobs[0].annotations.n: {SURROGATE}"
