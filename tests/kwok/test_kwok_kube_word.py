"""On KWOK: a kubelet's admission refusal returns the job to its queue (it runs again, no retry used), every bind
gets kube-scheduler's ``Scheduled`` Event, and no Event goes into a namespace being deleted.

KWOK's fake kubelet admits every pod, so the refusal is written as a kubelet writes it (``status.phase: Failed``,
``reason: OutOfcpu``) through the pod's status subresource."""

from __future__ import annotations

import time

import pytest

from flotilla.core.model import Job
from flotilla.kubernetes.client import pod_path
from flotilla.kubernetes.runner import Runner
from tests.support.kwok_backends import close_all, scheduler_and_backends, wait_idle, write_config

pytestmark = pytest.mark.kwok


def wait_for(check, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_a_kubelet_refusal_returns_the_job_which_runs_again_and_each_bind_says_scheduled(kwok, tmp_path):
    cluster = kwok["a"]
    config, scheduler, backends = scheduler_and_backends(write_config(tmp_path, kwok, names=("a",)))
    try:
        backend = backends["kwok-a"]
        runner = Runner(scheduler, backends)
        runner.submit([Job("refused", "A", job_set="a", priority_class="armada-default", requests={"cpu": 1000},
                           annotations={"flotilla.io/simulated-duration": "600s"})])
        runner.cycle()
        wait_idle(backends, runner)
        first = wait_for(lambda: next((p for p in cluster.pods() if p["metadata"]["name"] == "flotilla-refused-0"
                                       and p["status"].get("phase") == "Running"), None), what="first pod running")
        node = first["spec"]["nodeName"]
        message = "Node didn't have enough resource: cpu, requested: 1000, used: 32000, capacity: 32000"
        cluster.client.patch(pod_path("default", "flotilla-refused-0") + "/status",
                             {"status": {"phase": "Failed", "reason": "OutOfcpu", "message": message}},
                             kind="application/merge-patch+json")
        wait_for(lambda: runner.pump_events() is not None and runner.jobs["refused"].state == "queued",
                 what="job returned to its queue")
        assert runner.jobs["refused"].reason == f"refused by the kubelet of node {node}: OutOfcpu: {message}"
        assert backend.counters["returned"] == 1
        runner.cycle()
        wait_idle(backends, runner)
        second = wait_for(lambda: next((p for p in cluster.pods() if p["metadata"]["name"] == "flotilla-refused-1"
                                        and p["status"].get("phase") == "Running"), None), what="second pod running")
        for pod in (first, second):
            name, uid, where = pod["metadata"]["name"], pod["metadata"]["uid"], pod["spec"]["nodeName"]
            selector = f"involvedObject.name={name},involvedObject.uid={uid}"
            events = wait_for(lambda: cluster.client.get("/api/v1/namespaces/default/events",
                                                         fieldSelector=selector)["items"], what=f"{name}'s event")
            assert [(e["type"], e["reason"], e["message"], e["reportingComponent"]) for e in events] == [
                ("Normal", "Scheduled", f"Successfully assigned default/{name} to {where}", "flotilla")]
            assert events[0]["metadata"]["name"].startswith(name + ".")
    finally:
        close_all(backends)


def test_no_event_is_written_into_a_namespace_being_deleted(kwok, tmp_path):
    cluster = kwok["a"]
    cluster.create_namespace("leaving")
    # A finalizer of our own keeps it Terminating whatever runs in the cluster; taken off at the end.
    cluster.client.request("PUT", "/api/v1/namespaces/leaving/finalize", {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "leaving"},
        "spec": {"finalizers": ["flotilla.io/test"]}})
    config, scheduler, backends = scheduler_and_backends(write_config(tmp_path, kwok, names=("a",)))
    backend = backends["kwok-a"]
    try:
        cluster.client.delete("/api/v1/namespaces/leaving")
        wait_for(lambda: "leaving" in backend.namespaces.terminating, what="the namespace seen terminating")
        backend.reporter.scheduled("leaving", "p", "uid-p", "node-1")
        backend.reporter.scheduled("default", "p", "uid-p", "node-1")
        events = cluster.client.get("/api/v1/namespaces/default/events",
                                    fieldSelector="involvedObject.uid=uid-p")["items"]
        assert [e["message"] for e in events] == ["Successfully assigned default/p to node-1"]
        assert cluster.client.get("/api/v1/namespaces/leaving/events")["items"] == []
    finally:
        close_all(backends)
        cluster.client.request("PUT", "/api/v1/namespaces/leaving/finalize", {
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "leaving"}, "spec": {"finalizers": []}})
