"""The localprocess backend through Flotilla's public backend API, and its kind through Flotilla's config."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from flotilla.backend import ClusterDecisions, Job, Placement, PodTemplate, capabilities_of
from flotilla_localprocess import Args, LocalProcessCluster

FLOTILLA = str(Path(sys.executable).parent / "flotilla")


def cluster(tmp_path, **args) -> LocalProcessCluster:
    return LocalProcessCluster("here", Args(logDir=str(tmp_path / "logs"), **args), {"clock": lambda: 100.0})


def start(backend, job_id: str, container: dict, grace: str = "1") -> Job:
    job = Job(job_id, "A", annotations={"flotilla.io/grace-period": grace})
    template = PodTemplate({"containers": [{"name": "c", "image": "unused", **container}]})
    backend.apply(ClusterDecisions(start=[Placement(job, "here", "here-1")], templates={job_id: template}))
    return job


def events_until(backend, kinds: set[str], timeout: float = 60.0) -> list[tuple]:
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen += [(e.job_id, e.kind, e.node, e.reason, e.exit_code) for e in backend.poll_events()]
        if kinds <= {kind for _, kind, *_ in seen}:
            return seen
        time.sleep(0.05)
    raise AssertionError(f"no {kinds} in {seen}")


def log_of(backend, pod_id: str, tail=None) -> bytes:
    return b"".join(backend.job_log(pod_id, tail, False))


def test_a_job_runs_as_a_process_to_completion_and_its_output_is_its_log(tmp_path):
    backend = cluster(tmp_path)
    go = tmp_path / "go"   # the process waits for it: running until the test says
    start(backend, "j1", {"command": ["sh", "-c"],
                          "args": [f"while [ ! -e {go} ]; do sleep 0.05; done; echo one; echo two >&2; echo $WHO"],
                          "env": [{"name": "WHO", "value": "three"}]})
    assert [job.id for job in backend.snapshot().running] == ["j1"]
    go.touch()
    assert events_until(backend, {"succeeded"}) == [("j1", "running", "here-1", "", None),
                                                    ("j1", "succeeded", "here-1", "", None)]
    assert backend.snapshot().running == []
    assert log_of(backend, "j1") == b"one\ntwo\nthree\n"
    assert log_of(backend, "j1", tail=1) == b"three\n"


def test_an_exit_code_fails_the_job_with_it(tmp_path):
    backend = cluster(tmp_path)
    start(backend, "j2", {"args": ["sh", "-c", "echo bad; exit 3"]})
    assert events_until(backend, {"failed"})[-1] == ("j2", "failed", "here-1", "exited 3", 3)
    assert log_of(backend, "j2") == b"bad\n"


def test_a_cancel_kills_the_process(tmp_path):
    backend = cluster(tmp_path)
    marker = tmp_path / "finished"
    job = start(backend, "j3", {"command": ["sh", "-c", f"sleep 30; touch {marker}"]})
    events_until(backend, {"running"})
    backend.apply(ClusterDecisions(cancel=[job]))
    assert [(e.job_id, e.kind) for e in backend.poll_events()] == [("j3", "cancelled")]
    assert backend.snapshot().running == []
    backend.close()
    assert not marker.exists()


def test_what_cannot_run_fails_saying_why(tmp_path):
    backend = cluster(tmp_path)
    start(backend, "j4", {"command": ["/nonexistent/tool"]})
    start(backend, "j5", {})
    assert [(e.job_id, e.kind, e.reason) for e in backend.poll_events()] == [
        ("j4", "failed", "cannot run '/nonexistent/tool': No such file or directory"),
        ("j5", "failed", "containers[0] has no command or args: a local process runs command + args"),
    ]
    with pytest.raises(LookupError, match="no output: the pod has not started on cluster 'here'"):
        backend.job_log("j6", None, False)


def test_its_capabilities_are_templates_logs_and_close(tmp_path):
    assert capabilities_of(cluster(tmp_path)).names() == ["templates", "logs", "close"]


CONFIG = """\
queues: [{name: A, weight: 1}]
clusters:
  - name: here
    kind: localprocess
    args:
      nodes: 2
      resources: {cpu: 2, memory: 1Gi}
"""
STATE = """\
clusters:
  - name: here
    nodes: [{name: here-1, resources: {cpu: 2, memory: 1Gi}}]
jobs:
  - {id: a, queue: A, requests: {cpu: 1}}
"""


def schedule_once(tmp_path, config: str) -> subprocess.CompletedProcess:
    (tmp_path / "c.yaml").write_text(config)
    (tmp_path / "s.yaml").write_text(STATE)
    return subprocess.run([FLOTILLA, "schedule-once", "--config", str(tmp_path / "c.yaml"),
                           "--state", str(tmp_path / "s.yaml"), "--indent", "0"],
                          capture_output=True, text=True, cwd=tmp_path)


def test_the_config_names_the_kind_and_its_args_are_checked_at_their_line(tmp_path):
    ok = schedule_once(tmp_path, CONFIG)
    assert ok.returncode == 0, ok.stderr
    bad = schedule_once(tmp_path, CONFIG.replace("nodes: 2", "nodes: 0"))
    assert (bad.returncode, bad.stderr) == (
        2, f"error: {tmp_path / 'c.yaml'}:6: clusters[0].args.nodes: Input should be greater than or equal to 1 "
           f"(got 0)\n")
    typo = schedule_once(tmp_path, CONFIG.replace("nodes: 2", "node: 2"))
    assert (typo.returncode, typo.stderr) == (
        2, f"error: {tmp_path / 'c.yaml'}:6: clusters[0].args.node: unknown field 'node' (did you mean 'nodes'?)\n")
    kind = schedule_once(tmp_path, CONFIG.replace("kind: localprocess", "kind: localproces"))
    assert (kind.returncode, kind.stderr) == (
        2, f"error: {tmp_path / 'c.yaml'}:4: clusters[0].kind: unknown cluster kind 'localproces' (known: "
           f"kubernetes, localprocess, simulated); did you mean 'localprocess'?\n")
