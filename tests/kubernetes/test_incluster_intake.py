"""In-cluster pods without a cluster: what is read off a pod, the admission rules, the store's idempotent intake,
the queue API's ``namespaces`` (the KWOK tests are in test_kwok_incluster.py)."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

from flotilla.core.model import Gang
from flotilla.kubernetes.intake import Arrival, IntakeTracker, job_id_of, read_pod
from flotilla.kubernetes.priorityclasses import NO_CLASS
from flotilla.service.intake import ClusterIntake
from flotilla.service.settings import QueueSpec
from flotilla.service.store import Store
from tests.support.incluster_pods import pod, podgroup, queues, SYNCED, UID


def test_a_pod_is_read_as_kube_scheduler_counts_it():
    got = read_pod(pod(tolerations=[{"key": "gpu", "operator": "Exists"}], nodeSelector={"pool": "a"}))
    # containers 0.5 + 1 = 1.5 cpu; the init container alone needs 2; overhead 0.1 on top.
    assert dict(got.requests) == {"cpu": 2100, "memory": 2**30}
    assert (got.job_id, got.owner, got.submitted) == ("0f1e2d3c4b5a69788796a5b4c3d2e1f0", "train", 1767323045.0)
    assert dict(got.node_selector) == {"pool": "a"} and got.tolerations == ((("key", "gpu"), ("operator", "Exists")),)
    assert got.problems == ()


def test_placement_fields_flotilla_does_not_honour_are_named_by_path():
    got = read_pod(pod(topologySpreadConstraints=[{"maxSkew": 1}], containers=[
        {"name": "a", "ports": [{"containerPort": 80, "hostPort": 8080}]},
        {"name": "b", "ports": [{"containerPort": 81, "hostPort": 8080}]}],
        affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "k", "operator": "Bogus"}]}]}}}))
    assert [path for path, _ in got.problems] == [
        "spec.containers[1].ports[0].hostPort",
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]."
        "matchExpressions[0].operator",
        "spec.topologySpreadConstraints[0].topologyKey"]


def test_the_tracker_follows_watch_events_only():
    tracker = IntakeTracker("flotilla", **SYNCED)
    tracker.on_namespace("ADDED", {"metadata": {"name": "team-a", "labels": {"flotilla.io/queue": "A"}}})
    tracker.on_pod("ADDED", pod())
    tracker.on_pod("ADDED", pod("other", uid="u2", schedulerName="default-scheduler"))
    arrivals, gone = tracker.take()
    assert [(a.pod.name, a.namespace_queue) for a in arrivals] == [("p", "A")] and gone == {}
    tracker.on_pod("MODIFIED", pod())                                  # unchanged: nothing new
    assert tracker.take() == ([], {})
    tracker.on_pod("MODIFIED", pod(node="node-1"))                     # bound by someone else
    assert tracker.take() == ([], {job_id_of(UID): "pod bound to node node-1 by someone else"})
    tracker.on_pod("ADDED", pod("q", uid="u3"))
    tracker.take()
    tracker.on_pod("DELETED", pod("q", uid="u3"))
    assert tracker.take() == ([], {"u3": "pod deleted while queued"})


def test_admission_rules_and_idempotent_intake(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/s.db")
    store.sync_queues(queues())
    intake = ClusterIntake(store)
    arrivals = [Arrival(read_pod(pod()), "A"),
                Arrival(read_pod(pod("b", namespace="team-b", uid="u-b")), "A"),
                Arrival(read_pod(pod("c", uid="u-c", priorityClassName="nope")), "A"),
                Arrival(read_pod(pod("d", uid="u-d")), None)]
    rows, refused = intake._admit("east", arrivals, {q.name: q for q in queues()},
                                  {"default", NO_CLASS}, "default")
    assert [r["id"] for r in rows] == [job_id_of(UID)]
    assert {a.pod.name: why for a, why in refused.values()} == {
        "b": "namespace 'team-b' may not use queue 'A' (the queue's namespaces: team-a)",
        "c": "spec.priorityClassName: 'nope' is neither a Flotilla priority class nor a PriorityClass of the "
                 "cluster (known: (none), default)",
        "d": "no queue: label the pod, its Job or its namespace 'team-a' with flotilla.io/queue"}
    assert store.intake(rows, {}) == [job_id_of(UID)]
    assert store.intake(rows, {}) == []           # offered again (a new leader): stored once
    job = store.get_job(job_id_of(UID))
    assert (job["source"], job["pod"], job["jobSet"], job["owner"], job["state"]) == (
        "cluster", {"namespace": "team-a", "name": "p", "uid": UID}, "train", "team-a", "queued")
    assert store.queued_from_cluster("east") == {job_id_of(UID): UID}
    assert store.intake([], {job_id_of(UID): "pod deleted while queued"}) == []
    assert (store.get_job(job_id_of(UID))["state"], store.get_job(job_id_of(UID))["reason"]) == \
        ("cancelled", "pod deleted while queued")
    assert [e["kind"] for e in store.all_events()] == ["submitted", "queued", "cancelled"]
    store.close()


def test_a_gang_by_annotations_waits_for_all_its_members(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/s.db")
    store.sync_queues(queues())
    intake = ClusterIntake(store)
    gang = {"armadaproject.io/gangId": "g", "armadaproject.io/gangCardinality": "3"}
    members = [Arrival(read_pod(pod(f"g{i}", uid=f"u{i}", annotations=gang)), "A") for i in range(3)]
    rows, refused = intake._admit("east", members[:2], {q.name: q for q in queues()},
                                  {"default", NO_CLASS}, "default")
    assert rows == [] and {why for _, why in refused.values()} == {"gang 'g': 2 of its 3 pods waiting"}
    rows, refused = intake._admit("east", members, {q.name: q for q in queues()},
                                  {"default", NO_CLASS}, "default")
    assert refused == {} and [(r["gang_id"], r["gang_cardinality"]) for r in rows] == [("team-a/g", 3)] * 3
    store.close()


LABEL = "armadaproject.io/gangNodeUniformityLabel"


def test_a_gang_by_annotations_keeps_its_uniformity_label_and_its_members_agree_on_it(tmp_path):
    """The label is stored with the gang and reaches the scheduler's Gang; members disagreeing (a different label,
    or one without) are parked, naming the field and every member's value; a PodGroup's pods carrying it are
    refused."""
    from flotilla.service.snapshot import Converter

    store = Store(f"sqlite:///{tmp_path}/s.db")
    store.sync_queues(queues())
    intake = ClusterIntake(store)
    qmap, classes = {q.name: q for q in queues()}, {"default", NO_CLASS}
    gang = {"armadaproject.io/gangId": "g", "armadaproject.io/gangCardinality": "3", LABEL: "rack"}
    members = [Arrival(read_pod(pod(f"g{i}", uid=f"u{i}", annotations=gang)), "A") for i in range(3)]
    rows, refused = intake._admit("east", members, qmap, classes, "default")
    assert refused == {}
    assert [(r["id"], r["gang_id"], json.loads(r["annotations"])[LABEL]) for r in rows] == [
        ("u0", "team-a/g", "rack"), ("u1", "team-a/g", "rack"), ("u2", "team-a/g", "rack")]
    assert store.intake(rows, {}) == ["u0", "u1", "u2"]
    converter = Converter()
    assert {job.gang for record in store.load_queued() for job in converter.pods(record)} == {
        Gang("A/team-a/g", 3, 0, "rack")}

    # Members disagreeing: every member parked, each told every member's value.
    other = {**gang, "armadaproject.io/gangId": "h"}
    split = [Arrival(read_pod(pod("h0", uid="v0", annotations=other)), "A"),
             Arrival(read_pod(pod("h1", uid="v1", annotations={**other, LABEL: "zone"})), "A"),
             Arrival(read_pod(pod("h2", uid="v2", annotations={k: v for k, v in other.items() if k != LABEL})), "A")]
    rows, refused = intake._admit("east", split, qmap, classes, "default")
    assert rows == []
    assert {a.pod.name: why for a, why in refused.values()} == {name: (
        f"metadata.annotations.{LABEL}: gang 'h' members disagree on the uniformity label (h0 says 'rack', h1 says "
        f"'zone', h2 says none)") for name in ("h0", "h1", "h2")}

    # A pod made again for a stored gang's empty place must say the gang's label too.
    store.intake([], {"u1": "pod deleted while queued"})
    for name, said, expected in (
            ("g3", {**gang, LABEL: "zone"}, f"metadata.annotations.{LABEL}: gang 'g' was stored with uniformity label "
                                            f"'rack', this pod says 'zone'"),
            ("g4", {k: v for k, v in gang.items() if k != LABEL},
             f"metadata.annotations.{LABEL}: gang 'g' was stored with uniformity label 'rack', this pod says none")):
        rows, refused = intake._admit("east", [Arrival(read_pod(pod(name, uid=name, annotations=said)), "A")],
                                      qmap, classes, "default")
        assert rows == [] and [why for _, why in refused.values()] == [expected]
    rows, refused = intake._admit("east", [Arrival(read_pod(pod("g5", uid="g5", annotations=gang)), "A")],
                                  qmap, classes, "default")
    assert refused == {} and [(r["id"], r["gang_id"]) for r in rows] == [("g5", "team-a/g")]

    # A PodGroup's pods are not held to a domain: the label on them is refused, naming the words that are.
    rows, refused = admit_podgroup_pods(store, {"minMember": 1}, [pod("v", uid="pv", annotations={
        "scheduling.k8s.io/group-name": "pg", LABEL: "rack"})])
    assert rows == [] and [why for _, why in refused.values()] == [
        f"metadata.annotations.{LABEL}: a PodGroup's pods are not held to one domain of a node label; name the gang "
        f"with armadaproject.io/gangId and armadaproject.io/gangCardinality instead, or remove the annotation"]
    store.close()


def test_the_queue_api_takes_namespaces_and_refuses_a_bad_one(tmp_path):
    from flotilla.scheduler import Scheduler
    from flotilla.service.server import build_service
    from tests.support.service import config, headers

    cfg = config()
    service = build_service(cfg, Scheduler(cfg), store_url=f"sqlite:///{tmp_path}/api.db", backends={})
    with TestClient(service.app) as client:
        ok = client.post("/v1/queues", json={"name": "K", "namespaces": ["team-a", "team-b"]}, headers=headers("root"))
        assert ok.status_code == 200, ok.text
        assert client.get("/v1/queues/K", headers=headers("root")).json()["namespaces"] == ["team-a", "team-b"]
        bad = client.post("/v1/queues", json={"name": "L", "namespaces": ["Team_A"]}, headers=headers("root"))
        assert bad.status_code == 422 and "namespaces" in bad.text
    service.close()


def test_without_the_podgroup_crd_such_pods_are_refused_saying_so(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/s.db")
    store.sync_queues(queues())
    tracker = IntakeTracker("flotilla", **SYNCED)
    tracker.on_namespace("ADDED", {"metadata": {"name": "team-a", "labels": {"flotilla.io/queue": "A"}}})
    tracker.on_pod("ADDED", pod(annotations={"scheduling.k8s.io/group-name": "pg"}))
    tracker.set_podgroups_problem("the PodGroup CRD (/apis/scheduling.volcano.sh/v1beta1/podgroups) is not "
                                  "installed on cluster east")
    arrivals, _ = tracker.take()
    rows, refused = ClusterIntake(store)._admit("east", arrivals, {q.name: q for q in queues()}, {"default", NO_CLASS},
                                                "default")
    assert rows == [] and [why for _, why in refused.values()] == [
        "metadata.annotations.scheduling.k8s.io/group-name: the PodGroup CRD "
        "(/apis/scheduling.volcano.sh/v1beta1/podgroups) is not installed on cluster east"]
    # The CRD installed, its PodGroup (minMember 1) seen: the pod is offered again and stored as a gang of one.
    tracker.set_podgroups_problem(None)
    tracker.on_podgroup("ADDED", {"metadata": {"namespace": "team-a", "name": "pg"}, "spec": {"minMember": 1}})
    arrivals, _ = tracker.take()
    rows, refused = ClusterIntake(store)._admit("east", arrivals, {q.name: q for q in queues()}, {"default", NO_CLASS},
                                                "default")
    assert refused == {} and [(r["gang_id"], r["gang_cardinality"]) for r in rows] == [("podgroup/team-a/pg", 1)]
    store.close()


def test_podgroup_fields_flotilla_does_not_honour_are_named_by_path():
    from flotilla.kubernetes.intake import read_podgroup

    got = read_podgroup(podgroup(minMember=2, queue="A", priorityClassName="low", preemptable=False,
                                 minResources={"cpu": "4"}, minTaskMember={"worker": 2},
                                 networkTopology={"mode": "hard"}, subGroupPolicy=[{"name": "x"}]))
    assert (got.min_member, got.queue, got.priority_class, got.preemptable) == (2, "A", "low", False)
    assert got.problems == ("PodGroup team-a/pg spec.minResources is not supported",
                            "PodGroup team-a/pg spec.minTaskMember is not supported",
                            "PodGroup team-a/pg spec.networkTopology is not supported",
                            "PodGroup team-a/pg spec.subGroupPolicy is not a PodGroup field Flotilla knows")
    # Empty or zero asks nothing: Volcano's controllers write empty maps.
    assert read_podgroup(podgroup(minMember=1, minResources={}, minTaskMember={})).problems == ()
    assert read_podgroup(podgroup(minMember="3")).problems == (
        "PodGroup team-a/pg spec.minMember: expected a whole number, at least 0; got '3'",)


def admit_podgroup_pods(store, group_spec: dict, pods_: list[dict], namespace_queue="A",
                        preemptible=frozenset({"low"})):
    tracker = IntakeTracker("flotilla", **SYNCED)
    tracker.on_namespace("ADDED", {"metadata": {"name": "team-a", "labels": {"flotilla.io/queue": namespace_queue}
                                                if namespace_queue else {}}})
    tracker.on_podgroup("ADDED", podgroup(**group_spec))
    for p in pods_:
        tracker.on_pod("ADDED", p)
    arrivals, _ = tracker.take()
    return ClusterIntake(store)._admit("east", arrivals, {q.name: q for q in queues() + [QueueSpec(
        "C", namespaces=("team-a",))]}, {"default", "low", NO_CLASS}, "default", preemptible)


def test_a_podgroup_gives_queue_and_priority_class_and_its_preemptable_must_agree(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/s.db")
    store.sync_queues(queues() + [QueueSpec("C", namespaces=("team-a",))])
    member = {"scheduling.k8s.io/group-name": "pg"}

    def one(group_spec, namespace_queue="A", **pod_kwargs):
        rows, refused = admit_podgroup_pods(store, {"minMember": 1, **group_spec},
                                            [pod(annotations=member, **pod_kwargs)], namespace_queue)
        if refused:
            return [why for _, why in refused.values()]
        return [(r["queue"], r["priority_class"]) for r in rows]

    # Queue: the pod's label, else the PodGroup's spec.queue, else the namespace's label.
    assert one({"queue": "C"}) == [("C", NO_CLASS)]
    assert one({"queue": "C"}, namespace_queue=None) == [("C", NO_CLASS)]
    assert one({}) == [("A", NO_CLASS)]
    assert one({"queue": "C"}, labels={"flotilla.io/queue": "C"}) == [("C", NO_CLASS)]
    assert one({"queue": "C"}, labels={"flotilla.io/queue": "A"}) == [
        "metadata.labels.flotilla.io/queue: the pod says queue 'A', its PodGroup team-a/pg spec.queue says 'C'; "
        "a gang has one queue"]
    assert one({"queue": "nope"}) == ["queue 'nope' (from the PodGroup team-a/pg spec.queue) does not exist"]
    # Priority class: the pod's, else the PodGroup's; both given and different: refused, saying both.
    assert one({"priorityClassName": "low"}) == [("A", "low")]
    assert one({"priorityClassName": "low"}, priorityClassName="low") == [("A", "low")]
    assert one({"priorityClassName": "low"}, priorityClassName="default") == [
        "spec.priorityClassName: the pod says 'default', its PodGroup team-a/pg spec.priorityClassName says 'low'"]
    assert one({"priorityClassName": "high"}) == [
        "PodGroup team-a/pg spec.priorityClassName: 'high' is neither a Flotilla priority class nor a PriorityClass of "
        "the cluster (known: (none), default, low)"]
    # preemptable agrees with the priority class (Flotilla's preemptibility is the class's), or is refused.
    assert one({"priorityClassName": "low", "preemptable": True}) == [("A", "low")]
    assert one({"preemptable": False}) == [("A", NO_CLASS)]
    assert one({"preemptable": True}) == [
        "PodGroup team-a/pg spec.preemptable: true disagrees with priority class '(none)', which is not "
        "preemptible (in Flotilla a priority class says whether its jobs may be preempted: name a preemptible one)"]
    assert one({"priorityClassName": "low", "preemptable": False}) == [
        "PodGroup team-a/pg spec.preemptable: false disagrees with priority class 'low', which is preemptible (in "
        "Flotilla a priority class says whether its jobs may be preempted: name a non-preemptible one)"]
    assert one({"minResources": {"cpu": "4"}, "minTaskMember": {"w": 1}}) == [
        "PodGroup team-a/pg spec.minResources is not supported; PodGroup team-a/pg spec.minTaskMember is not "
        "supported"]
    assert store.list_jobs() == []
    store.close()


def test_a_late_member_fills_its_gangs_empty_place(tmp_path):
    """A gang's member deleted while queued leaves a place; the pod its controller makes joins the gang (annotation
    gangs and PodGroups alike), which then is complete again. Once a gang has started, later pods go one by one."""
    store = Store(f"sqlite:///{tmp_path}/s.db")
    store.sync_queues(queues())
    intake = ClusterIntake(store)
    qmap = {q.name: q for q in queues()}
    gang = {"armadaproject.io/gangId": "g", "armadaproject.io/gangCardinality": "3"}
    members = [Arrival(read_pod(pod(f"g{i}", uid=f"u{i}", annotations=gang)), "A") for i in range(3)]
    rows, _ = intake._admit("east", members, qmap, {"default", NO_CLASS}, "default")
    assert store.intake(rows, {}) == ["u0", "u1", "u2"]
    store.intake([], {"u1": "pod deleted while queued"})
    late = Arrival(read_pod(pod("g3", uid="u3", annotations=gang)), "A")
    extra = Arrival(read_pod(pod("g4", uid="u4", annotations=gang)), "A")
    rows, refused = intake._admit("east", [late, extra], qmap, {"default", NO_CLASS}, "default")
    assert [(r["id"], r["gang_id"], r["gang_cardinality"], r["gang_pods"]) for r in rows] == [
        ("u3", "team-a/g", 3, 3)]
    assert [why for _, why in refused.values()] == ["gang 'g' has its 3 pods queued already"]
    store.intake(rows, {})
    assert sorted(j["id"] for j in store.list_jobs(states=["queued"])) == ["u0", "u2", "u3"]
    wrong = Arrival(read_pod(pod("g5", uid="u5", annotations={**gang, "armadaproject.io/gangCardinality": "4"})), "A")
    store.intake([], {"u3": "pod deleted while queued"})
    _, refused = intake._admit("east", [wrong], qmap, {"default", NO_CLASS}, "default")
    assert [why for _, why in refused.values()] == [
        "metadata.annotations.armadaproject.io/gangCardinality: gang 'g' was stored with cardinality 3, this pod "
        "says 4"]

    # A PodGroup (minMember 2): two stored as its gang, one deleted, the late one joins with the minimum.
    group = {"scheduling.k8s.io/group-name": "pg"}
    rows, _ = admit_podgroup_pods(store, {"minMember": 2}, [pod(f"v{i}", uid=f"v{i}", annotations=group)
                                                             for i in range(2)])
    assert store.intake(rows, {}) == ["v0", "v1"]
    store.intake([], {"v0": "pod deleted while queued"})
    rows, refused = admit_podgroup_pods(store, {"minMember": 2}, [pod(f"v{i}", uid=f"v{i}", annotations=group)
                                                                   for i in (2, 3)])
    assert refused == {}
    assert [(r["id"], r["gang_id"], r["gang_pods"], json.loads(r["annotations"]).get("flotilla.io/gang-min-available"))
            for r in rows] == [("v2", "podgroup/team-a/pg", 2, "2"), ("v3", None, None, None)]
    store.intake(rows, {})
    # Started (one member leased): a later pod is placed on its own.
    store.record_cycle({"v1": ("east", ["node-1"])}, {}, 0.0)
    store.intake([], {"v3": "pod deleted while queued"})
    rows, refused = admit_podgroup_pods(store, {"minMember": 2}, [pod("v4", uid="v4", annotations=group)])
    assert [(r["id"], r["gang_id"]) for r in rows] == [("v4", None)] and refused == {}
    store.close()


def test_a_bind_found_for_a_queued_job_is_recorded_and_cancellations_are_read_once(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/s.db")
    store.sync_queues(queues())
    intake = ClusterIntake(store)
    arrivals = [Arrival(read_pod(pod(name, uid=name)), "A") for name in ("p1", "p2", "p3")]
    rows, _ = intake._admit("east", arrivals, {q.name: q for q in queues()},
                                  {"default", NO_CLASS}, "default")
    assert store.intake(rows, {}, 1.0) == ["p1", "p2", "p3"]
    store.record_cycle({"p3": ("east", ["node-9"])}, {}, 2.0)        # leased by this leader: left as it is
    assert store.adopt_bound("east", {"p1": ("node-1", True), "p2": ("node-2", False), "p3": ("node-3", True)},
                             3.0) == ["p1", "p2"]
    assert store.adopt_bound("east", {"p1": ("node-1", True)}, 4.0) == []   # once
    got = {j["id"]: (j["state"], j["cluster"], j["node"]) for j in store.list_jobs()}
    assert got == {"p1": ("running", "east", "node-1"), "p2": ("pending", "east", "node-2"),
                   "p3": ("leased", "east", "node-9")}
    assert [(e["kind"], e["node"], e["reason"]) for e in store.all_events() if e["jobId"] == "p1"] == [
        ("submitted", None, "pod team-a/p1 (uid p1)"), ("queued", None, ""),
        ("leased", "node-1", "pod team-a/p1 found bound to node node-1 by Flotilla"), ("pending", "node-1", ""),
        ("running", "node-1", "")]
    # Cancellations: read from a cursor, each once; only in-cluster jobs still cancelled.
    cursor = store.last_event_id()
    arrivals = [Arrival(read_pod(pod("q1", uid="q1")), "A")]
    rows, _ = intake._admit("east", arrivals, {q.name: q for q in queues()},
                                  {"default", NO_CLASS}, "default")
    store.intake(rows, {})
    store.cancel("A", job_ids=["q1"], by="alice")
    cursor, rows = store.cancelled_from_cluster(cursor)
    assert rows == [("q1", "team-a", "q1", "q1", "cancelled by alice")]
    assert store.cancelled_from_cluster(cursor) == (cursor, [])
    # A queue deleted with its jobs (force): their rows are gone, their ids are said.
    arrivals = [Arrival(read_pod(pod("q2", namespace="team-b", uid="q2")), "B")]
    rows, _ = intake._admit("east", arrivals, {q.name: q for q in queues()},
                                  {"default", NO_CLASS}, "default")
    store.intake(rows, {})
    store.delete_queue("B", force=True, by="alice")
    assert store.cancelled_from_cluster(cursor)[1] == [("q2", None, None, None, "its queue was deleted")]
    store.close()
