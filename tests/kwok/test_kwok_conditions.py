"""PodReporter against a real API server: the conditions and Events ``kubectl describe pod`` shows on a waiting pod."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import structlog

from flotilla.core.reasons import insufficient, nodes_available
from flotilla.kubernetes.client import pod_path
from flotilla.kubernetes.conditions import PodReporter

pytestmark = pytest.mark.kwok


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_pod(cluster, name: str, namespace: str = "default") -> str:
    pod = cluster.client.post(pod_path(namespace), {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
        "spec": {"schedulerName": "flotilla",
                 "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}})
    return pod["metadata"]["uid"]


def conditions(cluster, name: str, namespace: str = "default") -> dict[str, dict]:
    pod = cluster.client.get(pod_path(namespace, name))
    return {c["type"]: c for c in pod["status"].get("conditions") or ()}


def events(cluster, name: str, uid: str, namespace: str = "default") -> list[dict]:
    """The pod's events, found as ``kubectl describe pod`` finds them (field selector on the involved object)."""
    selector = (f"involvedObject.name={name},involvedObject.namespace={namespace},"
                f"involvedObject.kind=Pod,involvedObject.uid={uid}")
    items = cluster.client.get(f"/api/v1/namespaces/{namespace}/events", fieldSelector=selector)["items"]
    return sorted(items, key=lambda e: e["metadata"]["creationTimestamp"] + e["metadata"]["name"])


def summary(event: dict) -> tuple:
    return (event["type"], event["reason"], event["message"], event["source"].get("component"),
            event["reportingComponent"], event["involvedObject"]["uid"], event["count"])


def test_unschedulable_writes_the_condition_and_a_failed_scheduling_event(kwok):
    cluster = kwok["a"]
    uid = make_pod(cluster, "waiting")
    # A condition someone else wrote (a readiness gate's) must survive Flotilla's patch.
    cluster.client.patch(pod_path("default", "waiting") + "/status", {"status": {"conditions": [
        {"type": "example.com/gate", "status": "False", "reason": "NotYet"}]}},
        kind="application/strategic-merge-patch+json")
    reporter = PodReporter(cluster.client, clock=Clock())

    assert reporter.unschedulable("default", "waiting", uid, "queue a: over its limit of 32 cpu") is True

    got = conditions(cluster, "waiting")
    assert sorted(got) == ["PodScheduled", "example.com/gate"]
    assert got["example.com/gate"]["reason"] == "NotYet"
    scheduled = got["PodScheduled"]
    assert (scheduled["status"], scheduled["reason"], scheduled["message"]) == (
        "False", "Unschedulable", "flotilla: queue a: over its limit of 32 cpu")
    assert scheduled["lastTransitionTime"]
    assert [summary(e) for e in events(cluster, "waiting", uid)] == [
        ("Warning", "FailedScheduling", "flotilla: queue a: over its limit of 32 cpu", "flotilla", "flotilla", uid, 1)]
    assert len(reporter) == 1


def test_rewrites_only_when_the_reason_changes_and_at_most_once_per_interval(kwok):
    cluster = kwok["a"]
    uid = make_pod(cluster, "waiting")
    clock = Clock()
    reporter = PodReporter(cluster.client, clock=clock, min_interval=10.0)

    assert reporter.unschedulable("default", "waiting", uid, "no node fits") is True
    first = conditions(cluster, "waiting")["PodScheduled"]
    clock.now += 30
    assert reporter.unschedulable("default", "waiting", uid, "no node fits") is False   # same reason
    clock.now += 1
    assert reporter.unschedulable("default", "waiting", uid, "queue b is full") is True
    clock.now += 9.5
    assert reporter.unschedulable("default", "waiting", uid, "gang of 4: 3 placed") is False   # within 10 s
    assert conditions(cluster, "waiting")["PodScheduled"]["message"] == "flotilla: queue b is full"
    clock.now += 0.5
    assert reporter.unschedulable("default", "waiting", uid, "gang of 4: 3 placed") is True

    latest = conditions(cluster, "waiting")["PodScheduled"]
    assert latest["message"] == "flotilla: gang of 4: 3 placed"
    assert latest["lastTransitionTime"] == first["lastTransitionTime"]   # the status never left False
    assert [e["message"] for e in events(cluster, "waiting", uid)] == [
        "flotilla: no node fits", "flotilla: queue b is full", "flotilla: gang of 4: 3 placed"]


def test_a_reason_given_as_data_is_compared_as_a_value_and_worded_when_written(kwok):
    cluster = kwok["a"]
    uid = make_pod(cluster, "data")
    clock = Clock()
    reporter = PodReporter(cluster.client, clock=clock, min_interval=10.0)
    short = nodes_available(0, {insufficient("cpu"): 2})

    assert reporter.unschedulable("default", "data", uid, short) is True
    clock.now += 30
    # An equal reason made again (the next cycle's) is the same reason: no write.
    assert reporter.unschedulable("default", "data", uid, nodes_available(0, {insufficient("cpu"): 2})) is False
    # The same cause on fewer nodes is another reason.
    assert reporter.unschedulable("default", "data", uid, nodes_available(1, {insufficient("cpu"): 1})) is True
    assert conditions(cluster, "data")["PodScheduled"]["message"] == \
        "flotilla: 1/2 nodes are available: 1 Insufficient cpu"
    assert [e["message"] for e in events(cluster, "data", uid)] == [
        "flotilla: 0/2 nodes are available: 2 Insufficient cpu",
        "flotilla: 1/2 nodes are available: 1 Insufficient cpu"]


def test_a_pod_gone_or_replaced_is_not_an_error_and_is_forgotten(kwok):
    cluster = kwok["a"]
    reporter = PodReporter(cluster.client, clock=Clock())
    assert reporter.unschedulable("default", "never-was", "0000-uid", "no node fits") is False
    assert len(reporter) == 0

    old_uid = make_pod(cluster, "again")
    cluster.client.delete(pod_path("default", "again"), {"gracePeriodSeconds": 0})
    cluster.wait_pods(lambda pods: not pods, what="the pod deleted")
    new_uid = make_pod(cluster, "again")
    # The name now belongs to another pod: nothing is written on it.
    assert reporter.unschedulable("default", "again", old_uid, "no node fits") is False
    reporter.disruption_target("default", "again", old_uid, "flotilla: preempted")
    assert conditions(cluster, "again") == {}
    assert events(cluster, "again", new_uid) == []
    assert len(reporter) == 0


def test_forget_and_the_cap_bound_memory(kwok):
    cluster = kwok["a"]
    clock = Clock()
    reporter = PodReporter(cluster.client, clock=clock, max_entries=3)
    uids = [make_pod(cluster, f"p{i}") for i in range(5)]
    for i, uid in enumerate(uids):
        assert reporter.unschedulable("default", f"p{i}", uid, "no node fits") is True
    assert len(reporter) == 3
    # p0 was forgotten first: told again at once, though its reason is the same.
    assert reporter.unschedulable("default", "p0", uids[0], "no node fits") is True
    assert reporter.unschedulable("default", "p4", uids[4], "no node fits") is False
    reporter.forget(uids[4])
    assert reporter.unschedulable("default", "p4", uids[4], "no node fits") is True
    assert len(reporter) == 3


def test_disruption_target_marks_the_victim_and_keeps_its_other_conditions(kwok):
    cluster = kwok["a"]
    uid = make_pod(cluster, "victim")
    reporter = PodReporter(cluster.client, clock=Clock(), component="flotilla-test")
    assert reporter.unschedulable("default", "victim", uid, "no node fits") is True

    reporter.disruption_target("default", "victim", uid, "flotilla: preempted by queue b's job j-7 on node-2")

    got = conditions(cluster, "victim")
    assert sorted(got) == ["DisruptionTarget", "PodScheduled"]
    target = got["DisruptionTarget"]
    assert (target["status"], target["reason"], target["message"]) == (
        "True", "PreemptionByScheduler", "flotilla: preempted by queue b's job j-7 on node-2")
    assert got["PodScheduled"]["message"] == "flotilla: no node fits"
    assert [summary(e) for e in events(cluster, "victim", uid)] == [
        ("Warning", "FailedScheduling", "flotilla: no node fits", "flotilla-test", "flotilla-test", uid, 1),
        ("Normal", "Preempted", "flotilla: preempted by queue b's job j-7 on node-2", "flotilla-test",
         "flotilla-test", uid, 1)]


def test_a_nomination_set_and_cleared_on_a_waiting_pod_and_refused_quietly_once_it_is_bound(kwok):
    cluster = kwok["a"]
    uid = make_pod(cluster, "preemptor")
    reporter = PodReporter(cluster.client, clock=Clock(), component="flotilla-test")
    with structlog.testing.capture_logs() as logs:
        reporter.nominated("default", "preemptor", uid, "node-2", "waiting on node node-2 for the pods leaving it")
        assert cluster.client.get(pod_path("default", "preemptor"))["status"]["nominatedNodeName"] == "node-2"
        reporter.nominated("default", "preemptor", uid, None)
        assert "nominatedNodeName" not in cluster.client.get(pod_path("default", "preemptor"))["status"]

        # Bound meanwhile (the nomination goes out from the reporting pool, after the bind): the API server refuses
        # a nomination on a bound pod, and that is no fault.
        cluster.client.post(pod_path("default", "preemptor") + "/binding", {
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "preemptor", "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"}})
        reporter.nominated("default", "preemptor", uid, "node-2")
        reporter.nominated("default", "preemptor", uid, None)
    pod = cluster.client.get(pod_path("default", "preemptor"))
    assert (pod["spec"]["nodeName"], pod["status"].get("nominatedNodeName")) == ("node-1", None)
    # Nothing above debug (whether debug is captured depends on the level a CLI test configured before).
    assert [(e["log_level"], e["event"]) for e in logs if e["log_level"] != "debug"] == []
    assert [summary(e) for e in events(cluster, "preemptor", uid)] == [
        ("Normal", "Nominated", "flotilla: waiting on node node-2 for the pods leaving it", "flotilla-test",
         "flotilla-test", uid, 1)]


def test_long_reasons_are_cut_to_the_event_limit(kwok):
    cluster = kwok["a"]
    uid = make_pod(cluster, "long")
    reporter = PodReporter(cluster.client, clock=Clock())
    reason = "x" * 2000
    assert reporter.unschedulable("default", "long", uid, reason) is True
    assert conditions(cluster, "long")["PodScheduled"]["message"] == "flotilla: " + reason
    [event] = events(cluster, "long", uid)
    assert event["message"] == ("flotilla: " + reason)[:1020] + " ..."


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
def test_kubectl_describe_pod_tells_why(kwok):
    cluster = kwok["a"]
    uid = make_pod(cluster, "described")
    PodReporter(cluster.client).unschedulable("default", "described", uid, "namespace default may not use queue a")
    out = subprocess.run(["kubectl", "--kubeconfig", cluster.kubeconfig, "--context", cluster.context,
                          "describe", "pod", "described"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = [line.split() for line in out.stdout.splitlines()]
    assert ["PodScheduled", "False"] in lines
    [event] = [line for line in lines if "FailedScheduling" in line]
    assert event[0] == "Warning" and event[3:] == ["flotilla", "flotilla:", "namespace", "default", "may", "not",
                                                    "use", "queue", "a"]
