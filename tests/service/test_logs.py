"""``flotilla logs`` and ``GET /v1/jobs/{id}/logs`` where no container runs: access, bounds and every refusal.

The log's content is checked on the real node (test_realnode.py) and the
errors of a KWOK cluster, whose fake nodes have no kubelet, in
test_kwok_serve.py; here a real ``flotilla serve`` on simulated clusters.
"""

from __future__ import annotations

import json

from tests.support.serve import Server, cli, wait_for, write_file
from tests.support.e2e import CONFIG

from tests.support.service import job


def submit(srv: Server, tmp_path, user: str, queue: str, body: dict) -> str:
    out = cli(srv, user, "submit", str(write_file(tmp_path, f"{queue}.yaml", {"queue": queue, "jobSetId": "logs",
                                                                            "jobs": [body]})), "--output", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["jobs"][0]["id"]


def test_logs_answer_as_status_does_and_refuse_what_has_no_log(tmp_path):
    srv = Server(tmp_path, CONFIG).start()
    try:
        # 64 cores: more than any node has, so it stays queued.
        queued = submit(srv, tmp_path, "alice", "A", job(cpu="64"))
        running = submit(srv, tmp_path, "bob", "B", job(cpu="1", duration="600s"))
        record = wait_for(lambda: (lambda r: r if r["state"] == "running" else None)(
            json.loads(cli(srv, "bob", "status", running, "-o", "json").stdout)))
        with srv.http("bob") as bob, srv.http("alice") as alice, srv.http("root") as root:
            # Not bob's queue: the same 404 as the job's status, so nothing tells the job exists.
            status = bob.get(f"/v1/jobs/{queued}")
            logs = bob.get(f"/v1/jobs/{queued}/logs")
            assert (status.status_code, logs.status_code) == (404, 404)
            assert logs.json() == status.json() == {"error": {
                "code": "not_found", "message": f"job {queued!r} not found", "field": None, "errors": []}}
            assert bob.get("/v1/jobs/no-such-job/logs").json() == bob.get("/v1/jobs/no-such-job").json()

            answer = alice.get(f"/v1/jobs/{queued}/logs")
            assert (answer.status_code, answer.json()["error"]["code"], answer.json()["error"]["message"]) == (
                409, "conflict", f"job {queued!r} has no pod: it has not started on a cluster (state queued)")
            answer = root.get(f"/v1/jobs/{running}/logs")   # administrators see every job
            assert (answer.status_code, answer.json()["error"]["message"]) == (
                409, f"job {running!r} ran on simulated cluster {record['cluster']!r}: its jobs run no containers, "
                     "so there is no log")

            answer = bob.get(f"/v1/jobs/{running}/logs", params={"container": "sidecar"})   # no pod: no container
            assert (answer.status_code, answer.json()["error"]["message"]) == (
                409, f"job {running!r} ran on simulated cluster {record['cluster']!r}: its jobs run no containers, "
                     "so there is no log")
            answer = bob.get(f"/v1/jobs/{running}/logs", params={"pod": 1})
            assert (answer.status_code, answer.json()["error"]["field"], answer.json()["error"]["message"]) == (
                404, "pod", f"job {running!r} has 1 pod: pod must be 0..0, got 1")
            for params, field in (({"tail": 10001}, "tail"), ({"tail": -1}, "tail"), ({"pod": -1}, "pod"),
                                  ({"follow": "maybe"}, "follow"), ({"container": "Main"}, "container"),
                                  ({"container": "main\n"}, "container"), ({"container": "a" * 64}, "container")):
                answer = bob.get(f"/v1/jobs/{running}/logs", params=params)
                assert (answer.status_code, answer.json()["error"]["field"]) == (422, field), params

        # The CLI: one error line, exit 1 for a refusal; its bounds are checked before asking.
        out = cli(srv, "alice", "logs", queued)
        assert (out.returncode, out.stdout, out.stderr) == (
            1, "", f"error: 409: job {queued!r} has no pod: it has not started on a cluster (state queued)\n")
        out = cli(srv, "alice", "logs", running)
        assert (out.returncode, out.stderr) == (1, f"error: 404: job {running!r} not found\n")
        out = cli(srv, "bob", "logs", running, "--tail", "10001")
        assert out.returncode == 2 and "10001 is not in the range 0<=x<=10000" in out.stderr
    finally:
        srv.kill()
