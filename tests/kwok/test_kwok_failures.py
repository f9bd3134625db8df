"""Failed, stuck and lost pods on a KWOK cluster, through ``flotilla serve``: what the job's events and status say.

The fake kubelets are driven by Flotilla's KWOK stages
(``flotilla/kwok/stages``): a job's annotation ``kwok.flotilla.io/exit-code``
makes its first container exit with that code, ``kwok.flotilla.io/image-pull-error``
keeps the pod of that number waiting with ErrImagePull, and a node annotated
``kwok.flotilla.io/not-ready`` goes NotReady.
"""

from __future__ import annotations

import json

import pytest
from tests.support.serve import Server, cli, wait_for, write_file
from tests.support.kwok_serve import CONFIG as SERVE_CONFIG

pytestmark = pytest.mark.kwok

#: test_kwok_serve's config, with one retry: a job stuck twice fails.
CONFIG = SERVE_CONFIG.replace("maxRetries: 3", "maxRetries: 1")
assert CONFIG != SERVE_CONFIG


def cluster_entry(name, c, **extra) -> str:
    more = "".join(f", {k}: {v}" for k, v in extra.items())
    return f"  - {{name: {name}, kind: kubernetes, kubeconfig: {c.kubeconfig}, context: {c.context}{more}}}\n"


def pod_spec(name="train", cpu="1"):
    return {"containers": [{"name": name, "image": "busybox", "resources": {"limits": {"cpu": cpu}}}]}


def submit(srv, tmp_path, job_set, jobs) -> list[str]:
    path = write_file(tmp_path, f"{job_set}.yaml", {"queue": "A", "jobSetId": job_set, "jobs": jobs})
    out = cli(srv, "alice", "submit", str(path), "--output", "json")
    assert out.returncode == 0, out.stderr
    return [j["id"] for j in json.loads(out.stdout)["jobs"]]


def watch(srv, job_set) -> list[dict]:
    out = cli(srv, "alice", "watch", "A", job_set, "--until-done", "--output", "json", timeout=120)
    assert out.returncode in (0, 5), out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def status(srv, job_id) -> dict:
    out = cli(srv, "alice", "status", job_id, "--output", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_exit_codes_and_oom_kills_fail_the_job_with_the_container_reason(kwok, tmp_path):
    srv = Server(tmp_path, CONFIG + cluster_entry("a", kwok["a"])).start()
    try:
        exits, oom = submit(srv, tmp_path, "exits", [
            {"annotations": {"kwok.flotilla.io/exit-code": "3", "flotilla.io/simulated-duration": "1s"},
             "podSpec": pod_spec("train")},
            {"annotations": {"kwok.flotilla.io/exit-code": "137", "kwok.flotilla.io/exit-reason": "OOMKilled",
                             "flotilla.io/simulated-duration": "1s"},
             "podSpec": pod_spec("train")}])
        events = watch(srv, "exits")
        failed = {e["jobId"]: e["reason"] for e in events if e["kind"] == "failed"}
        assert failed == {exits: "container train exited 3 (Error)", oom: "container train exited 137 (OOMKilled)"}
        assert [e["kind"] for e in events if e["jobId"] == exits] == \
            ["submitted", "queued", "leased", "pending", "running", "failed"]
        assert (status(srv, exits)["state"], status(srv, exits)["reason"]) == \
            ("failed", "container train exited 3 (Error)")
        table = cli(srv, "alice", "status", oom)
        assert "container train exited 137 (OOMKilled)" in table.stdout
    finally:
        srv.kill()


def test_a_three_pod_job_runs_on_one_cluster_and_a_stuck_pod_fails_it_after_its_retries(kwok, tmp_path):
    entries = cluster_entry("a", kwok["a"], stuckPodExpiry="2s") + cluster_entry("b", kwok["b"], stuckPodExpiry="2s")
    srv = Server(tmp_path, CONFIG + entries).start()
    try:
        [three] = submit(srv, tmp_path, "three", [
            {"annotations": {"flotilla.io/simulated-duration": "2s"}, "labels": {"team": "ml"},
             "podSpecs": [pod_spec("launcher"), pod_spec("worker", "10"), pod_spec("worker", "10")]}])

        def pods_of(job_id):
            out = {}
            for key, c in kwok.items():
                for p in c.pods():
                    ann = p["metadata"].get("annotations") or {}
                    if ann.get("flotilla.io/job-id", "").split("#")[0] == job_id:
                        out[ann["flotilla.io/pod-number"]] = (key, p["metadata"]["labels"]["flotilla.io/pod-number"],
                                                              p["metadata"]["labels"]["team"])
            return out if len(out) == 3 else None
        pods = wait_for(lambda: pods_of(three), timeout=60)
        home = pods["0"][0]
        assert pods == {str(k): (home, str(k), "ml") for k in range(3)}
        events = watch(srv, "three")
        # Each pod's start and end, with its podNumber, before the job's own running and succeeded.
        assert [e["kind"] for e in events] == ["submitted", "queued", "leased", "pending", *["pod-running"] * 3,
                                               "running", *["pod-succeeded"] * 3, "succeeded"]
        assert sorted(e["podNumber"] for e in events[4:7]) == sorted(e["podNumber"] for e in events[8:11]) == [0, 1, 2]
        assert all("podNumber" not in e for e in events[:4] + [events[7], events[11]])

        # Pod 2 of this one never starts (ErrImagePull): the job is stopped and retried once, then failed.
        [stuck] = submit(srv, tmp_path, "stuck", [
            {"annotations": {"kwok.flotilla.io/image-pull-error": "2", "flotilla.io/simulated-duration": "60s"},
             "podSpecs": [pod_spec("launcher"), pod_spec("worker"), pod_spec("worker")]}])
        events = watch(srv, "stuck")
        why = ("pod 2: pod stuck: not started within stuckPodExpiry 2s (container worker: ErrImagePull: "
               "failed to pull image busybox (kwok.flotilla.io/image-pull-error))")
        first, last = [e["cluster"] for e in events if e["kind"] == "leased"]
        assert [(e["kind"], e["reason"], e.get("podNumber")) for e in events
                if e["kind"] not in ("submitted", "leased", "pending", "pod-running")] == [
            ("queued", "", None),
            ("lease-expired", f"lost on cluster {first}: {why}", 2),
            ("queued", "retry 1 of 1", None),
            ("lease-expired", f"lost on cluster {last}: {why}", 2),
            ("failed", f"lost on cluster {last}: {why}; gave up after 1 retries", None),
        ]
        # Pods 0 and 1 start each time; pod 2 never does.
        assert sorted(e["podNumber"] for e in events if e["kind"] == "pod-running") == [0, 0, 1, 1]
        assert status(srv, stuck)["state"] == "failed"
        # Every pod of it is removed, on both clusters.
        wait_for(lambda: not any(p["metadata"].get("annotations", {}).get("flotilla.io/job-id", "").startswith(stuck)
                                 for c in kwok.values() for p in c.pods()), timeout=30)
    finally:
        srv.kill()


def test_a_node_not_ready_past_node_lost_timeout_has_its_jobs_requeued_elsewhere(kwok, tmp_path):
    cluster = kwok["a"]
    srv = Server(tmp_path, SERVE_CONFIG
                 + cluster_entry("a", cluster, nodeLostTimeout="2s")).start()
    lost_node = None
    try:
        ids = submit(srv, tmp_path, "long", [
            {"annotations": {"flotilla.io/simulated-duration": "600s"}, "podSpec": pod_spec("main", "8")}
            for _ in range(4)])

        def placed():
            where = {}
            for p in cluster.pods():
                ann = p["metadata"].get("annotations") or {}
                if ann.get("flotilla.io/job-id") in ids and p["status"].get("phase") == "Running" \
                        and not p["metadata"].get("deletionTimestamp"):
                    where[ann["flotilla.io/job-id"]] = p["spec"]["nodeName"]
            return where if len(where) == 4 else None
        before = wait_for(placed, timeout=60)
        lost_node = before[ids[0]]
        moved = sorted(j for j, node in before.items() if node == lost_node)
        cluster.client.patch(f"/api/v1/nodes/{lost_node}",
                             {"metadata": {"annotations": {"kwok.flotilla.io/not-ready": "true"}}})
        after = wait_for(lambda: (lambda w: w if w and set(w.values()) == {other(lost_node)} else None)(placed()),
                         timeout=60)
        assert sorted(after) == sorted(ids)
        events = cli(srv, "alice", "watch", "A", "long", "--no-follow", "--output", "json").stdout.splitlines()
        events = [json.loads(line) for line in events]
        expired = sorted(e["jobId"] for e in events if e["kind"] == "lease-expired")
        assert expired == moved
        assert all(e["reason"].startswith(f"lost on cluster a: node {lost_node} lost: NotReady for ")
                   for e in events if e["kind"] == "lease-expired")
        assert {status(srv, j)["state"] for j in ids} == {"running"}
    finally:
        srv.kill()
        if lost_node is not None:
            cluster.client.patch(f"/api/v1/nodes/{lost_node}",
                                 {"metadata": {"annotations": {"kwok.flotilla.io/not-ready": None}}})


def other(node: str) -> str:
    return "node-2" if node == "node-1" else "node-1"


def test_a_retry_rule_for_exit_42_gives_three_runs_on_kwok_then_fails_the_job(kwok, tmp_path):
    queue_a = "  - {name: A, weight: 1, owners: [alice]}\n"
    config = CONFIG.replace(queue_a, queue_a[:-2] + ", retryPolicy: [{exitCodes: [42], action: retry, limit: 2}]}\n")
    assert config != CONFIG
    # Finished pods are kept a while, so that the three runs' pods can be read back.
    srv = Server(tmp_path, config + cluster_entry("a", kwok["a"], finishedPodRetention="120s")).start()
    try:
        [job_id] = submit(srv, tmp_path, "exit42", [
            {"annotations": {"kwok.flotilla.io/exit-code": "42", "flotilla.io/simulated-duration": "1s"},
             "podSpec": pod_spec("train")}])
        events = watch(srv, "exit42")
        rule = "queue retryPolicy rule 1 (exit 42: retry, limit 2)"
        exited = "container train exited 42 (Error)"
        run = [("leased", ""), ("pending", ""), ("running", "")]
        assert [(e["kind"], e["reason"]) for e in events] == [
            ("submitted", "by alice"), ("queued", ""),
            *run, ("run-failed", exited), ("queued", f"{rule}: retry 1 of 2"),
            *run, ("run-failed", exited), ("queued", f"{rule}: retry 2 of 2"),
            *run, ("failed", f"{exited}; {rule}: gave up after 2 retries")]
        record = status(srv, job_id)
        assert (record["state"], record["retries"], record["reason"]) == \
            ("failed", 2, f"{exited}; {rule}: gave up after 2 retries")
        # Three pods were made, one per run (attempts 0, 1 and 2), and each failed with exit code 42.
        pods = [p for p in kwok["a"].pods() if (p["metadata"].get("annotations") or {}).get("flotilla.io/job-id")
                == job_id]
        assert sorted((p["metadata"]["annotations"]["flotilla.io/attempt"], p["status"]["phase"],
                       p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"]) for p in pods) == \
            [("0", "Failed", 42), ("1", "Failed", 42), ("2", "Failed", 42)]
    finally:
        srv.kill()
