"""Jobs on a real kubelet, through a real ``flotilla serve``: what the node enforces, as the job's events say it.

The node is ``real-1`` (``scripts/real-node``, tests/support/realnode.py);
every job runs the local image ``flotilla.local/busybox:1`` in the test's
own namespace. Each test starts its own ``flotilla serve`` with one
Kubernetes cluster entry pointing at the node's kubeconfig and context.
"""

from __future__ import annotations

import re
import subprocess

import pytest
from tests.support.serve import FLOTILLA, Server, cli, env_for, wait_for
from tests.support.realnode_jobs import busybox, events, kinds, serve, status, submit

pytestmark = pytest.mark.realnode


def finished(srv: Server, job_id: str, timeout: float = 90.0, user: str = "alice") -> dict:
    return wait_for(lambda: (lambda s: s if s["state"] in ("succeeded", "failed", "cancelled", "preempted")
                             else None)(status(srv, job_id, user)), timeout=timeout)


def test_exit_code_reaches_events_status_and_the_log(real_node, tmp_path):
    srv = serve(real_node, tmp_path)
    try:
        [job_id] = submit(srv, tmp_path, [busybox(real_node, "echo hello; exit 3")])
        record = finished(srv, job_id)
        assert (record["state"], record["reason"], record["node"]) == (
            "failed", "container main exited 3 (Error)", "real-1")
        assert [k for k, _ in kinds(events(srv), job_id)] == ["submitted", "queued", "leased", "pending", "running",
                                                              "failed"]
        assert kinds(events(srv), job_id)[-1] == ("failed", "container main exited 3 (Error)")
        out = cli(srv, "alice", "logs", job_id)
        assert (out.returncode, out.stdout, out.stderr) == (0, "hello\n", "")
        out = cli(srv, "alice", "logs", job_id, "--tail", "1", "--follow")   # the container has ended: so does this
        assert (out.returncode, out.stdout) == (0, "hello\n")
        out = cli(srv, "bob", "logs", job_id)
        assert (out.returncode, out.stderr) == (1, f"error: 404: job {job_id!r} not found\n")
    finally:
        srv.kill()


def test_a_failed_jobs_log_is_kept_by_default_and_any_container_of_it_can_be_read(real_node, tmp_path):
    """With finishedPodRetention left at its default (an hour), a failed job's pod stays and its log is read;
    --container names any container, the init container included; another name is a 404 naming them; a follow
    that ends with its container is no server error."""
    srv = serve(real_node, tmp_path, finishedPodRetention=None)
    try:
        spec = busybox(real_node, "echo main says hi; exit 3")
        spec["podSpec"]["initContainers"] = [{**spec["podSpec"]["containers"][0], "name": "setup",
                                              "command": ["sh", "-c", "echo preparing"]}]
        [job_id] = submit(srv, tmp_path, [spec])
        assert finished(srv, job_id)["state"] == "failed"
        [pod] = [p for p in real_node.pods() if p["metadata"]["annotations"].get("flotilla.io/job-id") == job_id]
        assert pod["status"]["phase"] == "Failed"
        out = cli(srv, "alice", "logs", job_id)
        assert (out.returncode, out.stdout, out.stderr) == (0, "main says hi\n", "")
        out = cli(srv, "alice", "logs", job_id, "--container", "setup")
        assert (out.returncode, out.stdout, out.stderr) == (0, "preparing\n", "")
        out = cli(srv, "alice", "logs", job_id, "--container", "main", "--follow")
        assert (out.returncode, out.stdout, out.stderr) == (0, "main says hi\n", "")
        out = cli(srv, "alice", "logs", job_id, "--container", "nope")
        where = f"{real_node.namespace}/{pod['metadata']['name']}"
        assert (out.returncode, out.stdout, out.stderr) == (
            1, "", f"error: 404: pod {where} of job {job_id!r} has no container 'nope'; its containers: setup, "
                   "main\n")
    finally:
        srv.kill()
    assert "api.internal_error" not in srv.log.read_text()


def test_a_memory_limit_is_a_real_cgroup_and_the_job_ends_oom_killed(real_node, tmp_path):
    srv = serve(real_node, tmp_path)
    try:
        # tail keeps its input since the last newline in memory (there is none): 64 MB against a 16Mi limit.
        [job_id] = submit(srv, tmp_path, [busybox(real_node, "head -c 64m /dev/zero | tail", memory="16Mi")])
        record = finished(srv, job_id)
        assert (record["state"], record["reason"]) == ("failed", "container main exited 137 (OOMKilled)")
    finally:
        srv.kill()


def test_active_deadline_fails_the_job_within_ten_seconds(real_node, tmp_path):
    srv = serve(real_node, tmp_path)
    try:
        [job_id] = submit(srv, tmp_path, [busybox(real_node, "sleep 60", activeDeadlineSeconds=3,
                                                  terminationGracePeriodSeconds=1)])
        record = finished(srv, job_id)
        # The kubelet's own enforcement (the service's deadline is a backstop 10 s + grace later): sleep, PID 1
        # of its container, ignores SIGTERM and is killed when the 1 s grace period is over.
        reason = ("DeadlineExceeded: Pod was active on the node longer than the specified deadline; "
                  "container main exited 137 (Error)")
        assert (record["state"], record["reason"]) == ("failed", reason)
        evs = [e for e in events(srv) if e["jobId"] == job_id]
        assert [(e["kind"], e["reason"] or "") for e in evs][-2:] == [("running", ""), ("failed", reason)]
        assert evs[-1]["time"] - evs[-2]["time"] <= 10
    finally:
        srv.kill()


def test_an_image_that_cannot_be_had_fails_the_job_at_once_with_the_kubelets_reason(real_node, tmp_path):
    srv = serve(real_node, tmp_path, stuckPodExpiry="5m")   # the stuck-pod rule plays no part
    try:
        [job_id] = submit(srv, tmp_path, [busybox(real_node, "true", container={"image": "flotilla.local/missing:1"})])
        record = finished(srv, job_id, timeout=60)
        why = ('image not pulled: container main: ErrImageNeverPull: Container image "flotilla.local/missing:1" is '
               'not present with pull policy of Never')
        assert (record["state"], record["reason"], record["retries"]) == ("failed", why, 0)
        assert kinds(events(srv), job_id) == [
            ("submitted", "by alice"), ("queued", ""), ("leased", ""), ("pending", ""), ("failed", why)]
    finally:
        srv.kill()


def test_cancel_sends_sigterm_then_sigkill_after_the_grace_period(real_node, tmp_path):
    srv = serve(real_node, tmp_path)
    try:
        # The trap prints and carries on: only the SIGKILL at the end of the 3 s grace period stops it.
        [job_id] = submit(srv, tmp_path, [busybox(
            real_node, "trap 'echo term' TERM; echo started; while true; do sleep 1; done",
            terminationGracePeriodSeconds=3)])
        wait_for(lambda: status(srv, job_id)["state"] == "running", timeout=60)
        wait_for(lambda: cli(srv, "alice", "logs", job_id).stdout == "started\n", timeout=30)
        follow = subprocess.Popen([*FLOTILLA, "logs", job_id, "--follow"], env=env_for("alice-token", srv.url),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out = cli(srv, "alice", "cancel", "A", "--job", job_id)
        assert out.returncode == 0, out.stderr
        stdout, stderr = follow.communicate(timeout=60)
        assert (follow.returncode, stdout, stderr) == (0, "started\nterm\n", "")
        record = finished(srv, job_id)
        assert (record["state"], record["reason"]) == ("cancelled", "cancelled")
    finally:
        srv.kill()


def test_jobs_that_finished_while_the_kubelet_was_stopped_are_succeeded_once(real_node, tmp_path):
    """The kubelet stops while two jobs run; they finish meanwhile. Past nodeLostTimeout they are queued again
    (no retry used); when the kubelet is back, their pods report success, and that success is theirs: once.

    The jobs end when the test says so (a file in a hostPath directory), after the kubelet has stopped: a job
    that slept a fixed time could finish before the kubelet stopped on a loaded machine, and was then simply
    succeeded, never lost.
    """
    gate = tmp_path / "gate"
    gate.mkdir()
    job = busybox(real_node, "while [ ! -e /gate/go ]; do sleep 0.2; done",
                  container={"volumeMounts": [{"name": "gate", "mountPath": "/gate", "readOnly": True}]},
                  volumes=[{"name": "gate", "hostPath": {"path": str(gate), "type": "Directory"}}])
    srv = serve(real_node, tmp_path)
    try:
        ids = submit(srv, tmp_path, [job, job])
        wait_for(lambda: {i for i in ids if ("running", "") in kinds(events(srv), i)} == set(ids), timeout=60)
        real_node.stop_kubelet()
        try:
            (gate / "go").touch()   # the containers run on without their kubelet, and end now
            real_node.wait(lambda: real_node.node_ready() == "Unknown", timeout=60, what="real-1 NotReady")
            wait_for(lambda: all(status(srv, i)["state"] == "queued" for i in ids), timeout=60)
        finally:
            real_node.start_kubelet()
        records = [finished(srv, i) for i in ids]
        assert [(r["state"], r["retries"]) for r in records] == [("succeeded", 0)] * 2
        lost = re.compile(r"lost on cluster real: node real-1 lost: NotReady for \d+s \(nodeLostTimeout 3s\)")
        for job_id in ids:
            seen = kinds(events(srv), job_id)
            assert [k for k, _ in seen].count("succeeded") == 1
            assert [k for k, _ in seen][:7] == ["submitted", "queued", "leased", "pending", "running",
                                                "lease-expired", "queued"]
            assert lost.fullmatch(seen[5][1]) and seen[-1][0] == "succeeded"
            assert seen[-1][1].startswith("succeeded on node real-1, reported once the node returned (cluster real)")
    finally:
        srv.kill()
