"""In-cluster pods on a KWOK cluster past their first placement: PodGroup fields, late gang members, cancelling
through Flotilla, a new leader finding its predecessor's binds, and a preempted Job pod's replacement.

The scheduling loop runs in this process (the ``harness`` fixture of tests/support/incluster.py) except in the last test,
which runs ``flotilla serve``; everything asserted is read back from the API server or the store.
"""

from __future__ import annotations

import time

import pytest

from flotilla.kubernetes.client import pod_path
from tests.support.incluster import Harness, bound_per_node, condition, fill, live, make_job, make_namespace, make_pod

pytestmark = pytest.mark.kwok

PODGROUPS = "/apis/scheduling.volcano.sh/v1beta1/namespaces/{}/podgroups"


def make_podgroup(cluster, namespace: str, name: str, **spec) -> None:
    cluster.client.post(PODGROUPS.format(namespace), {"apiVersion": "scheduling.volcano.sh/v1beta1",
                                                      "kind": "PodGroup",
                                                      "metadata": {"name": name, "namespace": namespace},
                                                      "spec": spec})


def podgroups_seen(harness, *keys: tuple[str, str], timeout: float = 60.0) -> None:
    """Wait (liveness only) until the backend's PodGroup watch has shown ``keys`` ((namespace, name) each): a pod
    whose PodGroup is not seen yet is told so, and looked at again only at a later cycle."""
    deadline = time.monotonic() + timeout
    while not all(key in harness.backend.intake.podgroups for key in keys):
        assert time.monotonic() < deadline, f"the watch showed {sorted(harness.backend.intake.podgroups)}"
        time.sleep(0.05)


def messages(pods, prefix: str) -> dict[str, str | None]:
    return {p["metadata"]["name"]: (condition(p, "PodScheduled") or {}).get("message")
            for p in pods if p["metadata"]["name"].startswith(prefix)}


def test_a_podgroup_gives_queue_and_priority_class_and_fields_not_honoured_are_refused(harness):
    """team-b2 has no queue label: the PodGroup's spec.queue puts its pods in B, its priorityClassName is theirs.
    A PodGroup asking minResources (or minTaskMember, networkTopology) is refused on its pods, never bound."""
    c = harness.cluster
    make_podgroup(c, "team-b2", "gang", minMember=2, queue="B", priorityClassName="armada-preemptible",
                  preemptable=True)
    make_podgroup(c, "team-b2", "sized", minMember=2, queue="B", minResources={"cpu": "2"})
    make_podgroup(c, "team-b2", "steady", minMember=1, queue="B", preemptable=False)
    for i in range(2):
        make_pod(c, "team-b2", f"gang-{i}", annotations={"scheduling.k8s.io/group-name": "gang"})
        make_pod(c, "team-b2", f"sized-{i}", annotations={"scheduling.k8s.io/group-name": "sized"})
    make_pod(c, "team-b2", "steady-0", annotations={"scheduling.k8s.io/group-name": "steady"})
    harness.seen(5)
    podgroups_seen(harness, ("team-b2", "gang"), ("team-b2", "sized"), ("team-b2", "steady"))
    for _ in range(3):
        harness.cycle()
    expected = {"sized-0": "flotilla: PodGroup team-b2/sized spec.minResources is not supported",
                "sized-1": "flotilla: PodGroup team-b2/sized spec.minResources is not supported",
                "steady-0": "flotilla: PodGroup team-b2/steady spec.preemptable: false disagrees with priority class "
                            "'(none)', which is preemptible (in Flotilla a priority class says whether its jobs may be "
                            "preempted: name a non-preemptible one)"}
    pods = harness.settle(lambda pods: {**messages(pods, "sized"), **messages(pods, "steady")} == expected,
                          "refusals told")
    assert sorted(p["metadata"]["name"] for p in live(pods, "team-b2") if p["spec"].get("nodeName")) == \
        ["gang-0", "gang-1"]
    jobs = harness.store.list_jobs()
    assert sorted((j["pod"]["name"], j["queue"], j["priorityClass"], j["gang"]["id"]) for j in jobs) == [
        ("gang-0", "B", "armada-preemptible", "podgroup/team-b2/gang"),
        ("gang-1", "B", "armada-preemptible", "podgroup/team-b2/gang")]
    events = c.client.get("/api/v1/namespaces/team-b2/events")["items"]
    assert sorted({(e["involvedObject"]["name"], e["reason"]) for e in events
                   if e["involvedObject"]["name"].startswith("sized")}) == \
        [("sized-0", "FailedScheduling"), ("sized-1", "FailedScheduling")]


def test_a_late_pod_fills_its_queued_gangs_empty_place_and_the_gang_starts(harness):
    """Two gangs of two (annotations, and a PodGroup with minMember 2) are stored and wait for room; one member of
    each is deleted, and a new pod of each comes: it joins its gang, and both gangs start when room comes."""
    c = harness.cluster
    fill(c, {"node-1": 0, "node-2": 0})
    make_podgroup(c, "team-b", "pg", minMember=2)
    gang = {"armadaproject.io/gangId": "g", "armadaproject.io/gangCardinality": "2"}
    for i in range(2):
        make_pod(c, "team-b", f"g-{i}", annotations=gang)
        make_pod(c, "team-b", f"v-{i}", annotations={"scheduling.k8s.io/group-name": "pg"})
    harness.seen(4)
    podgroups_seen(harness, ("team-b", "pg"))
    harness.cycle()
    assert sorted((j["pod"]["name"], j["gang"]["id"], j["state"]) for j in harness.store.list_jobs(queue="B")) == [
        ("g-0", "team-b/g", "queued"), ("g-1", "team-b/g", "queued"),
        ("v-0", "podgroup/team-b/pg", "queued"), ("v-1", "podgroup/team-b/pg", "queued")]
    for name in ("g-1", "v-1"):
        c.client.delete(pod_path("team-b", name), {"gracePeriodSeconds": 0})
    harness.settle(lambda pods: not {"g-1", "v-1"} & {p["metadata"]["name"] for p in pods}, "members deleted")
    make_pod(c, "team-b", "g-2", annotations=gang)
    make_pod(c, "team-b", "v-2", annotations={"scheduling.k8s.io/group-name": "pg"})
    deadline = time.monotonic() + 60   # the backend's watch has shown the deletions and the new pods
    while sorted(p.name for p in harness.backend.waiting_pods()) != ["g-0", "g-2", "v-0", "v-2"]:
        assert time.monotonic() < deadline, sorted(p.name for p in harness.backend.waiting_pods())
        time.sleep(0.05)
    harness.cycle()
    jobs = harness.store.list_jobs(queue="B", states=["queued"])
    assert sorted((j["pod"]["name"], j["gang"]["id"], j["gang"]["cardinality"]) for j in jobs) == [
        ("g-0", "team-b/g", 2), ("g-2", "team-b/g", 2),
        ("v-0", "podgroup/team-b/pg", 2), ("v-2", "podgroup/team-b/pg", 2)]
    # Room for two on each node: each gang is bound whole, on one node.
    for name in ("spare-node-1-0", "spare-node-1-1", "spare-node-2-0", "spare-node-2-1"):
        c.client.delete(pod_path("default", name), {"gracePeriodSeconds": 0})
    harness.settle(lambda pods: not any(p["metadata"]["name"].startswith("spare-") for p in pods), "freed")
    time.sleep(0.5)   # the backend's watch sees the room before the next cycle
    for _ in range(2):
        harness.cycle()
    pods = harness.settle(lambda pods: sum(bound_per_node(pods, "team-b").values()) == 4, "both gangs bound")
    nodes = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in live(pods, "team-b")}
    assert sorted(nodes) == ["g-0", "g-2", "v-0", "v-2"]
    assert nodes["g-0"] == nodes["g-2"] and nodes["v-0"] == nodes["v-2"] and nodes["g-0"] != nodes["v-0"]


def test_cancelling_a_queued_in_cluster_job_deletes_its_pod_saying_so(harness):
    """`flotilla cancel` (the store's cancel, as POST /v1/cancel calls it) of a queued in-cluster job: its pod gets a
    Normal Event Cancelled and is deleted, so it does not sit Pending; the job stays cancelled by its user."""
    c = harness.cluster
    uid = make_pod(c, "team-b", "big", cpu="40")["metadata"]["uid"]   # fits no node: stays queued
    make_pod(c, "team-b", "kept", cpu="40")
    harness.seen(2)
    harness.cycle()
    job_id = uid.replace("-", "")
    assert harness.store.cancel("B", job_ids=[job_id], by="alice") == {"cancelled": [job_id], "cancelling": []}
    harness.cycle()
    pods = harness.settle(lambda pods: "big" not in {p["metadata"]["name"] for p in pods}, "cancelled pod deleted")
    assert [p["metadata"]["name"] for p in live(pods, "team-b")] == ["kept"]
    events = c.client.get("/api/v1/namespaces/team-b/events")["items"]
    assert [(e["type"], e["reason"], e["message"]) for e in events if e["involvedObject"]["name"] == "big"
            and e["reason"] == "Cancelled"] == [
        ("Normal", "Cancelled", f"flotilla: job {job_id} was cancelled through Flotilla (cancelled by alice): the pod "
                                f"is deleted (a controller that owns it may make a new pod, which is a new job)")]
    harness.cycle()
    got = {j["pod"]["name"]: (j["state"], j["reason"]) for j in harness.store.list_jobs(queue="B")}
    assert got == {"big": ("cancelled", "cancelled by alice"), "kept": ("queued", "")}
    # Its queue deleted with force (DELETE /v1/queues/B?force=true): the job goes with it, and so does its pod.
    kept = next(j["id"] for j in harness.store.list_jobs(queue="B") if j["pod"]["name"] == "kept")
    harness.store.delete_queue("B", force=True, by="alice")
    harness.cycle()
    harness.settle(lambda pods: not live(pods, "team-b"), "the deleted queue's pod deleted")
    events = c.client.get("/api/v1/namespaces/team-b/events")["items"]
    assert [e["message"] for e in events if e["involvedObject"]["name"] == "kept" and e["reason"] == "Cancelled"] \
        == [f"flotilla: job {kept} was cancelled through Flotilla (its queue was deleted): the pod is deleted (a "
            f"controller that owns it may make a new pod, which is a new job)"]


def test_a_new_leader_takes_over_binds_its_predecessor_made_before_recording_them(kwok, tmp_path):
    """The store says queued, but Flotilla had bound the pod (a leader that stopped right after binding). A new
    leader records the job on its node: never cancelled, never bound a second time, the pod left running. A bind
    the current leader sees while the job is queued is taken over the same way."""
    cluster = kwok["a"]
    make_namespace(cluster, "team-b", "B")
    fill(cluster, {"node-1": 0, "node-2": 0})
    first = Harness(tmp_path, cluster)
    try:
        uids = {name: make_pod(cluster, "team-b", name)["metadata"]["uid"] for name in ("before", "after")}
        first.seen(2)
        first.cycle()
        assert {j["pod"]["name"]: j["state"] for j in first.store.list_jobs(queue="B")} == \
            {"before": "queued", "after": "queued"}
    finally:
        first.close()

    def flotilla_bind(name: str, node: str) -> None:   # the Binding a leader's bind sends (job id annotation)
        cluster.client.delete(pod_path("default", f"spare-{node}-0"), {"gracePeriodSeconds": 0})
        cluster.client.post(pod_path("team-b", name) + "/binding", {
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name, "namespace": "team-b", "uid": uids[name],
                         "annotations": {"flotilla.io/job-id": uids[name].replace("-", "")}},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}, parse=False)

    flotilla_bind("before", "node-1")
    cluster.wait_pods(lambda pods: any(p["metadata"]["name"] == "before" and p["status"].get("phase") == "Running"
                                       for p in pods), what="before running")
    second = Harness(tmp_path, cluster)   # the new leader, on the same store
    try:
        second.cycle()
        flotilla_bind("after", "node-2")
        deadline = time.monotonic() + 60
        while second.backend.waiting_pods():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        for _ in range(3):
            second.cycle()
        jobs = {j["pod"]["name"]: j for j in second.store.list_jobs(queue="B")}
        assert {name: (j["state"], j["node"]) for name, j in jobs.items()} == \
            {"before": ("running", "node-1"), "after": ("running", "node-2")}
        kinds = {}
        for e in second.store.all_events():
            kinds.setdefault(e["jobId"], []).append(e["kind"])
        assert kinds[jobs["before"]["id"]] == ["submitted", "queued", "leased", "pending", "running"]
        assert kinds[jobs["after"]["id"]] == ["submitted", "queued", "leased", "pending", "running"]
        assert second.backend.counters.get("bound", 0) == 0 and second.backend.counters["deleted"] == 0
        pods = {p["metadata"]["name"]: p for p in live(cluster.pods(), "team-b")}
        assert {name: p["spec"]["nodeName"] for name, p in pods.items()} == {"before": "node-1", "after": "node-2"}
    finally:
        second.close()


@pytest.mark.skipif(not hasattr(__import__("flotilla.kwok.cluster", fromlist=["x"]), "JOB_CONTROLLERS"),
                    reason="the KWOK fixtures run no Job controller here")
def test_a_preempted_job_pod_is_made_again_and_the_new_pod_queues_and_runs(kwok, tmp_path):
    """`flotilla serve` schedules: Job A's two preemptible pods fill the room; Job B's pod, of a higher priority
    class, takes one place. A's Job ignores the victim's end (podFailurePolicy on DisruptionTarget: it counts no
    failure) and makes a new pod after its backoff; it queues in A as a new job, and runs once B's Job is deleted."""
    import json

    from tests.support.serve import Server, cli, wait_for
    from tests.support.incluster import SERVE_CONFIG

    cluster = kwok["a"]
    make_namespace(cluster, "team-a", "A")
    make_namespace(cluster, "team-b", "B")
    fill(cluster, {"node-1": 1, "node-2": 1})   # one free core on each node
    config = SERVE_CONFIG.replace(
        "  - {name: armada-default, priority: 30000, preemptible: false}\n",
        "  - {name: armada-default, priority: 30000, preemptible: false}\n"
        "  - {name: armada-preemptible, priority: 20000, preemptible: true}\n").replace(
        "  - {name: B, weight: 1, namespaces: [team-b]}\n",
        "  - {name: A, weight: 1, namespaces: [team-a]}\n  - {name: B, weight: 1, namespaces: [team-b]}\n")
    srv = Server(tmp_path, config + f"  - {{name: a, kind: kubernetes, kubeconfig: {cluster.kubeconfig}, "
                                    f"context: {cluster.context}}}\n").start()

    def jobs(queue):
        out = cli(srv, "root", "status", "--job-set", queue, "job-a", "--output", "json")
        return json.loads(out.stdout)["jobs"] if out.returncode == 0 else []

    try:
        make_job(cluster, "team-a", "job-a", 2, priority_class="armada-preemptible")
        pods = cluster.wait_pods(lambda pods: bound_per_node(pods, "team-a") == {"node-1": 1, "node-2": 1},
                                 timeout=60, what="A's two pods bound")
        first = {p["metadata"]["uid"].replace("-", "") for p in live(pods, "team-a")}
        make_job(cluster, "team-b", "job-b", 1, priority_class="armada-default")   # urgent: preempts a preemptible pod
        pods = cluster.wait_pods(lambda pods: len(bound_per_node(pods, "team-b")) == 1
                                 and sum(bound_per_node(pods, "team-a").values()) == 1, timeout=60,
                                 what="B's pod bound in a victim's place")
        [node] = bound_per_node(pods, "team-b")
        victim = wait_for(lambda: next((j for j in jobs("A") if j["state"] == "preempted"), None), timeout=60)
        assert victim["id"] in first and victim["node"] == node
        # The Job controller's replacement (after its 10 s pod-failure backoff): a new pod, a new job, queued in A.
        new = wait_for(lambda: next((j for j in jobs("A") if j["id"] not in first), None), timeout=120)
        assert (new["state"], new["jobSet"], new["pod"]["namespace"]) == ("queued", "job-a", "team-a")
        assert new["pod"]["name"].startswith("job-a-")
        cluster.client.delete("/apis/batch/v1/namespaces/team-b/jobs/job-b",
                              {"gracePeriodSeconds": 0, "propagationPolicy": "Background"})
        pods = cluster.wait_pods(lambda pods: bound_per_node(pods, "team-a") == {"node-1": 1, "node-2": 1}
                                 and not live(pods, "team-b"), timeout=120, what="the replacement bound")
        assert {p["metadata"]["uid"].replace("-", ""): p["spec"]["nodeName"] for p in live(pods, "team-a")
                if p["spec"]["nodeName"] == node} == {new["id"]: node}
        wait_for(lambda: sorted(j["state"] for j in jobs("A")) == ["preempted", "running", "running"], timeout=60)
        assert sorted(j["id"] for j in jobs("A") if j["state"] == "running") == \
            sorted((first - {victim["id"]}) | {new["id"]})
        job_a = cluster.client.get("/apis/batch/v1/namespaces/team-a/jobs/job-a")
        assert (job_a["status"].get("failed", 0), job_a["status"]["active"]) == (0, 2)
    finally:
        srv.kill()
