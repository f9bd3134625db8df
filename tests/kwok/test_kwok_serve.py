"""``flotilla serve`` with Kubernetes clusters: the service's loop leasing jobs onto two KWOK fake clusters.

A real ``flotilla serve`` process (store, API, loop) whose config names the
session's two fake clusters as ``kind: kubernetes``; jobs are submitted
through the CLI, their pods read back from the API servers, and their
events from the service.
"""

from __future__ import annotations

import json

import pytest
from tests.support.serve import ORDER, Server, cli, wait_for, write_file

from flotilla.service.store import rebuild_states
from tests.support.service import job
from tests.support.kwok_serve import CONFIG

pytestmark = pytest.mark.kwok


def job_pods(cluster) -> dict[str, tuple[str, str]]:
    """Flotilla job id -> (node, phase) of every Flotilla pod on ``cluster``, read from its API server."""
    out = {}
    for pod in cluster.pods():
        job_id = (pod["metadata"].get("annotations") or {}).get("flotilla.io/job-id")
        if job_id:
            out[job_id] = (pod["spec"].get("nodeName"), pod["status"].get("phase"))
    return out


def test_serve_leases_onto_two_kwok_clusters_and_a_gang_fills_one(kwok, tmp_path):
    clusters = "".join(
        f"  - {{name: {key}, kind: kubernetes, kubeconfig: {c.kubeconfig}, context: {c.context}, "
        f"namespace: flotilla-serve}}\n" for key, c in kwok.items())
    for c in kwok.values():
        c.create_namespace("flotilla-serve")
    srv = Server(tmp_path, CONFIG + clusters).start()
    try:
        # A gang of four 16-core jobs fills exactly one cluster's two 32-core nodes; it must not be split.
        gang = write_file(tmp_path, "gang.yaml", {"queue": "A", "jobSetId": "gang", "jobs": [
            job(f"g{i}", cpu="16", duration="20s", gang=("gang-1", 4)) for i in range(4)]})
        small = write_file(tmp_path, "small.yaml", {"queue": "B", "jobSetId": "small", "jobs": [
            job(f"s{i}", cpu="1", duration="1s") for i in range(6)]})
        out_gang = cli(srv, "alice", "submit", str(gang), "--output", "json")
        assert out_gang.returncode == 0, out_gang.stderr
        gang_ids = sorted(j["id"] for j in json.loads(out_gang.stdout)["jobs"])

        # All four gang pods Running on the API server of one cluster, two per node, none on the other.
        def gang_running():
            where = {key: {jid: pod for jid, pod in job_pods(c).items() if jid in gang_ids} for key, c in kwok.items()}
            for key, pods in where.items():
                if len(pods) == 4 and all(phase == "Running" for _, phase in pods.values()):
                    return key, pods, where
            return None
        home, pods, where = wait_for(gang_running, timeout=60)
        other = next(key for key in kwok if key != home)
        assert where[other] == {}
        per_node: dict[str, int] = {}
        for node, _ in pods.values():
            per_node[node] = per_node.get(node, 0) + 1
        assert per_node == {"node-1": 2, "node-2": 2}

        # The small jobs go to the other cluster (the gang's is full) and run to success.
        out_small = cli(srv, "bob", "submit", str(small), "--output", "json")
        assert out_small.returncode == 0, out_small.stderr
        watched = cli(srv, "bob", "watch", "B", "small", "--until-done", "--output", "json", timeout=90)
        assert watched.returncode == 0, watched.stderr
        events = [json.loads(line) for line in watched.stdout.splitlines()]
        per_job: dict[str, list[str]] = {}
        for e in events:
            per_job.setdefault(e["jobId"], []).append(e["kind"])
        assert len(per_job) == 6 and all(kinds == ORDER for kinds in per_job.values()), per_job
        assert {e["cluster"] for e in events if e["kind"] == "leased"} == {other}

        # The gang finishes after its 20 s on the fake kubelets; every job's state rebuilds from its events.
        watched = cli(srv, "alice", "watch", "A", "gang", "--until-done", "--output", "json", timeout=90)
        assert watched.returncode == 0, watched.stderr
        events = [json.loads(line) for line in watched.stdout.splitlines()]
        assert sorted(e["jobId"] for e in events if e["kind"] == "succeeded") == gang_ids
        leases = [e for e in events if e["kind"] == "leased"]
        assert len({e["time"] for e in leases}) == 1 and {e["cluster"] for e in leases} == {home}
    finally:
        srv.kill()
    store = srv.store()
    try:
        everything = store.all_events()
        assert rebuild_states(everything) == store.job_states()
        assert set(store.job_states().values()) == {"succeeded"}
    finally:
        store.close()


def test_logs_on_kwok_say_why_there_is_none(kwok, tmp_path):
    """KWOK's fake nodes run no containers: a log is refused with the reason the API server gives (kwok-controller
    answering for the node's kubelet has none: 409; a fake node without addresses cannot be reached: 502). A
    finished pod is kept for finishedPodRetention (its log asked for, not a 410), any container of the pod may be
    named (init containers included; another name is a 404 naming the pod's containers), and once the retention
    is over the 410 says when the pod went and why."""
    import time

    from flotilla.kubernetes.pods import pod_name

    cluster = kwok["a"]
    cluster.create_namespace("flotilla-serve")
    srv = Server(tmp_path, CONFIG + f"  - {{name: a, kind: kubernetes, kubeconfig: {cluster.kubeconfig}, "
                                    f"context: {cluster.context}, namespace: flotilla-serve, "
                                    f"finishedPodRetention: 20s}}\n").start()
    try:
        setup = {"name": "setup", "image": "busybox", "resources": {"limits": {"cpu": "1"}}}
        body = {"queue": "A", "jobSetId": "logs", "jobs": [job("long", cpu="1", duration="600s",
                                                               initContainers=[setup]),
                                                           job("short", cpu="1", duration="1s")]}
        out = cli(srv, "alice", "submit", str(write_file(tmp_path, "logs.yaml", body)), "--output", "json")
        assert out.returncode == 0, out.stderr
        long_id, short_id = (j["id"] for j in json.loads(out.stdout)["jobs"])
        record = wait_for(lambda: (lambda r: r if r["state"] == "succeeded" else None)(
            json.loads(cli(srv, "alice", "status", short_id, "-o", "json").stdout)), timeout=60)
        wait_for(lambda: job_pods(cluster).get(long_id, (None, None))[1] == "Running", timeout=60)
        short_pod = f"flotilla-serve/{pod_name('flotilla-', short_id, 0)}"
        long_pod = f"flotilla-serve/{pod_name('flotilla-', long_id, 0)}"

        def refused_by_kwok(answer, pod: str, container: str) -> bool:
            message = answer.json()["error"]["message"]
            if answer.status_code == 409:
                return message == f"pod {pod} on cluster 'a': no logs found for container \"{container}\" in pod " \
                                  f"\"{pod}\""
            return answer.status_code == 502 and message.startswith(
                f"pod {pod} on cluster 'a': the API server could not get the log: ") and \
                "no preferred addresses found" in message

        with srv.http("alice") as alice:
            assert job_pods(cluster)[short_id][1] == "Succeeded"     # kept, within its 20 s
            answer = alice.get(f"/v1/jobs/{short_id}/logs")
            assert refused_by_kwok(answer, short_pod, "main"), answer.json()
            answer = alice.get(f"/v1/jobs/{long_id}/logs", params={"follow": "true", "tail": 5})
            assert refused_by_kwok(answer, long_pod, "main"), answer.json()
            answer = alice.get(f"/v1/jobs/{long_id}/logs", params={"container": "setup"})
            assert refused_by_kwok(answer, long_pod, "setup"), answer.json()
            answer = alice.get(f"/v1/jobs/{long_id}/logs", params={"container": "nope"})
            assert (answer.status_code, answer.json()["error"]["field"], answer.json()["error"]["message"]) == (
                404, "container", f"pod {long_pod} of job {long_id!r} has no container 'nope'; its containers: "
                                  "setup, main")
            answer = alice.get(f"/v1/jobs/{long_id}/logs", params={"container": "Not_A_Name"})
            assert (answer.status_code, answer.json()["error"]["field"]) == (422, "container")
        out = cli(srv, "alice", "logs", long_id, "--container", "nope")
        assert (out.returncode, out.stdout, out.stderr) == (
            1, "", f"error: 404: pod {long_pod} of job {long_id!r} has no container 'nope'; its containers: "
                   "setup, main\n")

        wait_for(lambda: short_id not in job_pods(cluster) and time.time() >= record["finished"] + 20, timeout=60)
        deleted = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record["finished"] + 20))
        gone = (f"the pod of job {short_id!r} was deleted from cluster 'a' at {deleted}: finished pods are kept for "
                "20s after they end (finishedPodRetention of cluster 'a')")
        with srv.http("alice") as alice:
            answer = alice.get(f"/v1/jobs/{short_id}/logs")
            assert (answer.status_code, answer.json()["error"]["message"]) == (410, gone)
        out = cli(srv, "alice", "logs", short_id)
        assert (out.returncode, out.stdout, out.stderr) == (1, "", f"error: 410: {gone}\n")
    finally:
        srv.kill()
