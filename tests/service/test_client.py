"""flotilla.client against a live ``flotilla serve``: every method of Client and AsyncClient, and every error
answer as its typed exception carrying the API's error body."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from tests.support.serve import ORDER, REPO, Server, cli, env_for, free_port, wait_for, write_file

from flotilla.client import (ApiError, AsyncClient, Cancellation, Client, Conflict, ConnectionFailed, ErrorBody,
                             Event, Forbidden, Invalid, Job, NotFound, PayloadTooLarge, Queue, QueueDeletion,
                             Submission, Unauthorized)
from tests.support.service import job

CONFIG = """
priorityClasses:
  - {name: armada-default, priority: 30000, preemptible: false}
defaultPriorityClass: armada-default
queues:
  - {name: A, weight: 1, owners: [alice]}
  - {name: B, weight: 1, owners: [bob]}
lease: {timeout: 60s, maxRetries: 3}
cycle: {period: 0.2s}
server: {listen: "127.0.0.1:PORT", maxJobsPerSubmission: 5}
store: {url: "sqlite:///DB"}
auth:
  tokens:
    - {token: alice-token, user: alice}
    - {token: bob-token, user: bob}
    - {token: admin-token, user: root, groups: [admins]}
  adminGroups: [admins]
clusters:
  - name: c1
    kind: simulated
    nodes: [{count: 2, namePrefix: node, resources: {cpu: 8, memory: 32Gi}}]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("client"), CONFIG).start()
    yield srv
    srv.kill()


def client(srv: Server, token: str | None) -> Client:
    return Client(srv.url, token=token, timeout=30)


def test_jobs_submit_status_watch_and_jobs(server, tmp_path):
    with client(server, "alice-token") as alice:
        assert alice.health()["ok"] is True
        submission = alice.submit({"queue": "A", "jobSetId": "short",
                                   "jobs": [job("s1", duration="1s"), job("s2", duration="1s")]})
        assert isinstance(submission, Submission)
        assert [(j.client_id, j.existing) for j in submission.jobs] == [("s1", False), ("s2", False)]
        again = alice.submit_file(write_file(tmp_path, "again.yaml", {"queue": "A", "jobSetId": "short",
                                                                      "jobs": [job("s1", duration="1s")]}))
        assert [(j.id, j.existing) for j in again.jobs] == [(submission.ids[0], True)]

        events = []
        done: set[str] = set()
        for event in alice.watch("A", "short"):
            assert isinstance(event, Event) and (event.queue, event.job_set) == ("A", "short")
            events.append(event)
            if event.kind == "succeeded":
                done.add(event.job_id)
            if done == set(submission.ids):
                break
        for job_id in submission.ids:
            assert [e.kind for e in events if e.job_id == job_id] == ORDER
        assert [e.id for e in events] == sorted(e.id for e in events)
        # Without follow: the events so far, then the end; from an event id: only what came after it.
        assert [e.id for e in alice.watch("A", "short", follow=False)] == [e.id for e in events]
        assert [e.id for e in alice.watch("A", "short", after=events[2].id, follow=False)] == \
            [e.id for e in events[3:]]

        record = alice.status(submission.ids[0])
        assert isinstance(record, Job)
        assert (record.id, record.queue, record.job_set, record.client_id, record.state, record.owner,
                record.cluster) == (submission.ids[0], "A", "short", "s1", "succeeded", "alice", "c1")
        assert record.raw["jobSet"] == "short" and record.node in ("node-1", "node-2")
        listed = alice.jobs("A", "short")
        assert sorted(j.id for j in listed) == sorted(submission.ids)
        assert alice.jobs("A", "short", states=["queued"]) == []


def test_cancel_and_reprioritize(server):
    with client(server, "bob-token") as bob:
        waiting = bob.submit({"queue": "B", "jobSetId": "big",
                              "jobs": [job(f"b{i}", cpu="8", duration="10m") for i in range(4)]})
        wait_for(lambda: sorted(j.state for j in bob.jobs("B", "big")) == ["queued", "queued", "running",
                                                                          "running"])
        queued = sorted(j.id for j in bob.jobs("B", "big", states=["queued"]))
        assert sorted(bob.reprioritize("B", 5, job_ids=queued)) == queued
        assert {j.id: j.priority for j in bob.jobs("B", "big")} == {i: (5 if i in queued else 0)
                                                                    for i in waiting.ids}
        assert sorted(bob.reprioritize("B", 7, job_set="big")) == sorted(waiting.ids)
        result = bob.cancel("B", job_ids=[queued[0]])
        assert isinstance(result, Cancellation)
        assert (result.cancelled, result.cancelling) == ((queued[0],), ())
        running = sorted(j.id for j in bob.jobs("B", "big", states=["running"]))
        result = bob.cancel("B", "big")
        assert (result.cancelled, sorted(result.cancelling)) == ((queued[1],), running)
        wait_for(lambda: sorted(j.state for j in bob.jobs("B", "big")) == ["cancelled"] * 4)


def test_queue_operations(server):
    with client(server, "admin-token") as admin:
        created = admin.create_queue("C", weight=2, limits={"cpu": 0.5}, owners=["carol"], group_owners=["ml"])
        assert isinstance(created, Queue)
        assert (created.name, created.weight, dict(created.limits), created.owners, created.group_owners) == \
            ("C", 2, {"cpu": 0.5}, ("carol",), ("ml",))
        updated = admin.update_queue("C", weight=3)
        assert (updated.weight, dict(updated.limits), updated.owners) == (3, {}, ())
        assert [(q.name, q.cordoned) for q in admin.queues()] == [("A", False), ("B", False), ("C", False)]
        assert admin.cordon_queue("C") is True
        assert {q.name: q.cordoned for q in admin.queues()}["C"] is True
        assert admin.uncordon_queue("C") is False
        described = admin.queue("C")
        assert (described.name, described.weight, described.jobs["queued"]) == ("C", 3, 0)
        deleted = admin.delete_queue("C")
        assert isinstance(deleted, QueueDeletion) and (deleted.deleted, deleted.jobs) == ("C", 0)
        assert [q.name for q in admin.queues()] == ["A", "B"]

        assert admin.drain_node("c1", "node-1") is True
        wait_for(lambda: admin.nodes() == {"c1/node-1": "drained"})
        assert admin.uncordon_node("c1", "node-1") is False
        assert admin.nodes() == {}
        assert admin.set_cluster_available("c1", False) is False
        assert admin.set_cluster_available("c1", True) is True


def test_a_queue_retry_policy_through_the_client_and_the_cli(server):
    rules = [{"exitCodes": [42, "1-9"], "action": "retry", "limit": 2}, {"reasons": ["OOMKilled"], "action": "fail"}]
    with client(server, "admin-token") as admin:
        created = admin.create_queue("R", owners=["alice"], retry_policy=rules)
        assert created.retry_policy == tuple(rules) and admin.queue("R").retry_policy == tuple(rules)
        bad = error_of(lambda: admin.update_queue("R", retry_policy=[{"reasons": ["Evictd"], "action": "fail"}]))
        assert (bad.status, bad.field) == (422, "retryPolicy[0].reasons[0]")
        assert admin.queue("R").retry_policy == tuple(rules)      # nothing half-written
        assert admin.update_queue("R", owners=["alice"]).retry_policy == ()
    out = cli(server, "admin", "queue", "update", "R", "--owner", "alice", "--output", "json",
              "--retry-policy", "[{exitCodes: [42], action: retry, limit: 2}]")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["retryPolicy"] == [{"exitCodes": [42], "action": "retry", "limit": 2}]
    out = cli(server, "admin", "queue", "update", "R", "--retry-policy", "[{exitCodes: [300], action: fail}]")
    assert out.returncode == 1 and "retryPolicy[0].exitCodes[0]" in out.stderr, out.stderr
    out = cli(server, "admin", "queue", "update", "R", "--retry-policy", "{exitCodes: [42]}")
    assert out.returncode == 2 and "--retry-policy expects a list of rules" in out.stderr, out.stderr
    with client(server, "admin-token") as admin:
        assert admin.queue("R").retry_policy == ({"exitCodes": [42], "action": "retry", "limit": 2},)
        admin.delete_queue("R")


def error_of(call) -> ApiError:
    with pytest.raises(ApiError) as info:
        call()
    return info.value


def test_errors_raise_typed_exceptions_with_the_api_error_body(server):
    with client(server, "wrong-token") as stranger:
        error = error_of(stranger.queues)
        assert type(error) is Unauthorized and error.status == 401
        assert error.error == ErrorBody(code="unauthenticated", message="unknown bearer token")
        assert error.body == {"error": {"code": "unauthenticated", "message": "unknown bearer token",
                                        "field": None, "errors": []}}
    with client(server, "alice-token") as alice:
        error = error_of(lambda: alice.submit({"queue": "B", "jobSetId": "x", "jobs": [job("x")]}))
        assert type(error) is Forbidden and (error.status, error.code) == (403, "forbidden")
        assert error.message == "user 'alice' may not submit to queue 'B'"
        error = error_of(lambda: alice.create_queue("D"))
        assert type(error) is Forbidden and error.message == "user 'alice' is not an administrator"

        error = error_of(lambda: alice.status("no-such-job"))
        assert type(error) is NotFound and (error.status, error.code) == (404, "not_found")
        assert error.message == "job 'no-such-job' not found"
        error = error_of(lambda: alice.cancel("A", job_ids=["nope"]))
        assert type(error) is NotFound and (error.message, error.field) == \
            ("no such job in queue 'A': nope", "jobIds")

        bad = job("bad", cpu="1")
        bad["podSpec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
        error = error_of(lambda: alice.submit({"queue": "A", "jobSetId": "bad", "jobs": [job("ok"), bad]}))
        assert type(error) is Invalid and (error.status, error.code) == (422, "rejected")
        assert error.field == "jobs[1].podSpec.containers[0].resources.limits.cpu"
        assert [(e.index, e.client_id, e.field) for e in error.errors] == [
            (1, "bad", "jobs[1].podSpec.containers[0].resources.limits.cpu")]
        assert error.errors[0].message == "requests must equal limits: cpu is requested (1) but has no limit"
        assert alice.jobs("A", "bad") == []                      # nothing half-written
        error = error_of(lambda: alice.cancel("A"))
        assert type(error) is Invalid and error.message == \
            "give jobSetId, jobIds or states (to cancel all of a queue's jobs in those states)"

        error = error_of(lambda: alice.submit({"queue": "A", "jobSetId": "many",
                                               "jobs": [job(f"m{i}") for i in range(6)]}))
        assert type(error) is PayloadTooLarge and (error.status, error.code) == (413, "too_large")
    with client(server, "admin-token") as admin:
        error = error_of(lambda: admin.create_queue("A"))
        assert type(error) is Conflict and (error.status, error.code) == (409, "conflict")
        error = error_of(lambda: admin.delete_queue("nope"))
        assert type(error) is NotFound


def test_an_unreachable_server_raises_connection_failed():
    with Client(f"http://127.0.0.1:{free_port()}", token="x", timeout=5) as nobody:
        with pytest.raises(ConnectionFailed, match="cannot reach http://127.0.0.1:"):
            nobody.health()
        with pytest.raises(ConnectionFailed, match="could not reconnect"):
            list(nobody.watch("A", "s", reconnect=0))


def test_the_async_client_has_the_same_methods(server):
    async def scenario():
        async with AsyncClient(server.url, token="alice-token", timeout=30) as alice:
            assert (await alice.health())["ok"] is True
            submission = await alice.submit({"queue": "A", "jobSetId": "async", "jobs": [job("x1", duration="1s")]})
            kinds = []
            async for event in alice.watch("A", "async"):
                kinds.append(event.kind)
                if event.kind == "succeeded":
                    break
            assert kinds == ORDER
            assert (await alice.status(submission.ids[0])).state == "succeeded"
            assert [j.id for j in await alice.jobs("A", "async")] == submission.ids
            assert [e.kind async for e in alice.watch("A", "async", follow=False)] == ORDER
            later = await alice.submit({"queue": "A", "jobSetId": "async-2",
                                        "jobs": [job(f"y{i}", cpu="8", duration="10m") for i in range(3)]})
            await asyncio.sleep(0)
            assert sorted(await alice.reprioritize("A", 3, job_set="async-2")) == sorted(later.ids)
            cancelled = await alice.cancel("A", "async-2")
            assert sorted(cancelled.cancelled + cancelled.cancelling) == sorted(later.ids)
            assert [q.name for q in await alice.queues()] == ["A", "B"]
            assert (await alice.queue("A")).name == "A"
            with pytest.raises(NotFound) as info:
                await alice.status("missing")
            assert info.value.error.code == "not_found"
            with pytest.raises(Forbidden):
                await alice.cordon_queue("A")
            with pytest.raises(Invalid) as info:
                await alice.reprioritize("A", 1)
            assert info.value.message == "give jobSetId or jobIds"
        async with AsyncClient(server.url, token="admin-token", timeout=30) as admin:
            queue = await admin.create_queue("E", weight=2)
            assert (queue.name, queue.weight) == ("E", 2)
            assert (await admin.update_queue("E", weight=4)).weight == 4
            assert await admin.cordon_queue("E") is True
            assert await admin.uncordon_queue("E") is False
            assert (await admin.delete_queue("E")).deleted == "E"
            assert await admin.drain_node("c1", "node-2") is True
            assert "c1/node-2" in await admin.nodes()
            assert await admin.uncordon_node("c1", "node-2") is False
            assert await admin.set_cluster_available("c1", True) is True
            with pytest.raises(Conflict):
                await admin.create_queue("A")
        async with AsyncClient(server.url, token="bad", timeout=30) as stranger:
            with pytest.raises(Unauthorized) as info:
                await stranger.queues()
            assert info.value.body["error"]["code"] == "unauthenticated"

    asyncio.run(scenario())


def test_the_examples_run_against_a_live_service(server, tmp_path):
    job_file = write_file(tmp_path, "example.yaml", {"queue": "A", "jobSetId": "example",
                                                     "jobs": [job("e1", duration="1s"), job("e2", duration="1s")]})
    run = subprocess.run([sys.executable, "examples/client/submit_and_watch.py", str(job_file)], cwd=REPO,
                         env=env_for("alice-token", server.url), capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "submitted 2 jobs to A/example"
    finals = [line.split()[1:3] for line in lines[-2:]]
    assert finals == [["e1", "succeeded"], ["e2", "succeeded"]]
    refused = subprocess.run([sys.executable, "examples/client/submit_and_watch.py", str(job_file)], cwd=REPO,
                             env=env_for("bob-token", server.url), capture_output=True, text=True, timeout=60)
    assert (refused.returncode, refused.stderr) == (2, "403 forbidden: user 'bob' may not submit to queue 'A'\n")
    queues = subprocess.run([sys.executable, "examples/client/async_queues.py"], cwd=REPO,
                            env=env_for("admin-token", server.url), capture_output=True, text=True, timeout=60)
    assert queues.returncode == 0, queues.stderr
    assert [line.split()[:3] for line in queues.stdout.splitlines()] == [["A", "weight", "1"], ["B", "weight", "1"]]


def test_logs_of_a_job_the_user_may_not_see_is_not_found(server):
    """A job's log is read with the job's own access rule; an unknown job (or one of another user's queue) is a
    NotFound carrying the API's body, from the blocking and the async client alike."""
    import httpx

    has_logs = "/v1/jobs/{job_id}/logs" in httpx.get(f"{server.url}/openapi.json", timeout=30).json()["paths"]
    with client(server, "alice-token") as alice:
        with pytest.raises(NotFound) as info:
            b"".join(alice.logs("no-such-job", tail=10))
        assert (info.value.status, info.value.code) == (404, "not_found")
        if has_logs:
            assert info.value.message == "job 'no-such-job' not found"

    async def scenario():
        async with AsyncClient(server.url, token="alice-token", timeout=30) as alice:
            with pytest.raises(NotFound):
                [chunk async for chunk in alice.logs("no-such-job", pod=1, follow=True)]

    asyncio.run(scenario())
    with Client(f"http://127.0.0.1:{free_port()}", token="x", timeout=5) as nobody:
        with pytest.raises(ConnectionFailed, match="cannot read the log from"):
            list(nobody.logs("j"))
