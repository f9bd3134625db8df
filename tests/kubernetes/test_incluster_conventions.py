"""Gangs and queues as users write them, and placement rules, without a cluster (KWOK: test_kwok_conventions.py)."""

from __future__ import annotations

from tests.support.incluster_pods import SYNCED, UID, pod, podgroup, queues

from flotilla.config import parse_config
from flotilla.config.errors import ConfigError
from flotilla.kubernetes.intake import IntakeTracker, job_id_of, read_pod
from flotilla.kubernetes.priorityclasses import NO_CLASS
from flotilla.service.intake import ClusterIntake
from flotilla.service.placement import PlacementRule, place, placement_of, queue_parents
from flotilla.service.settings import QueueSpec, from_config
from flotilla.service.store import Store

JOB_UID = "9a9a9a9a-0000-0000-0000-000000000001"


def job_pod(name="p", uid=UID, namespace="team-a", labels=None, annotations=None, **spec):
    body = pod(name, namespace=namespace, uid=uid, labels=labels, annotations=annotations, **spec)
    body["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "train", "uid": JOB_UID, "controller": True}]
    return body


def admit(store, tracker, placement=()):
    intake = ClusterIntake(store)
    intake.placement = placement
    arrivals, _ = tracker.take()
    rows, refused = intake._admit("east", arrivals, {q.name: q for q in store.list_queues()},
                                  {"default", NO_CLASS}, "default")
    return ({r["pod_name"]: (r["queue"], r["gang_id"]) for r in rows},
            {a.pod.name: why for a, why in refused.values()})


def tracker_with(*pods, namespace_queue=None, jobs=()):
    tracker = IntakeTracker("flotilla", **SYNCED)
    for namespace in ("team-a", "team-b", "fresh"):
        tracker.on_namespace("ADDED", {"metadata": {"name": namespace, "labels": {"flotilla.io/queue": namespace_queue}
                                                    if namespace_queue and namespace == "team-a" else {}}})
    for job in jobs:
        tracker.on_job("ADDED", job)
    for p in pods:
        tracker.on_pod("ADDED", p)
    return tracker


def test_the_volcano_group_annotation_key_is_read_as_a_podgroup(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/s.db")
    store.sync_queues(queues())
    assert read_pod(pod(annotations={"scheduling.volcano.sh/group-name": "pg"})).group_name == "pg"
    both = read_pod(pod(annotations={"scheduling.volcano.sh/group-name": "pg", "scheduling.k8s.io/group-name": "x"}))
    assert both.problems == (("metadata.annotations.scheduling.volcano.sh/group-name",
                              "names PodGroup 'pg', scheduling.k8s.io/group-name names 'x': one pod, one group"),)
    members = [pod(f"w-{i}", uid=f"u-{i}", annotations={"scheduling.volcano.sh/group-name": "pg"}) for i in range(3)]
    tracker = tracker_with(*members[:2], namespace_queue="A")
    tracker.on_podgroup("ADDED", podgroup(minMember=3))
    rows, refused = admit(store, tracker)
    assert rows == {} and refused == {"w-0": "PodGroup team-a/pg: 2 of its minMember 3 pods waiting",
                                      "w-1": "PodGroup team-a/pg: 2 of its minMember 3 pods waiting"}
    tracker = tracker_with(*members, namespace_queue="A")
    tracker.on_podgroup("ADDED", podgroup(minMember=3))
    rows, refused = admit(store, tracker)
    assert rows == {f"w-{i}": ("A", "podgroup/team-a/pg") for i in range(3)} and refused == {}


def test_queues_from_kueue_labels_and_the_controlling_job(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/s.db")
    store.sync_queues(queues() + [QueueSpec("K", namespaces=("team-a",))])
    job = {"metadata": {"uid": JOB_UID, "name": "train", "labels": {"kueue.x-k8s.io/queue-name": "K"}}}
    tracker = tracker_with(job_pod("by-job"), pod("by-kueue", uid="u-2", labels={"kueue.x-k8s.io/queue-name": "K"}),
                           pod("by-namespace", uid="u-3"), job_pod("own-label", uid="u-4",
                                                                 labels={"flotilla.io/queue": "A"}),
                           namespace_queue="A", jobs=[job])
    rows, refused = admit(store, tracker)
    assert refused == {} and rows == {"by-job": ("K", None), "by-kueue": ("K", None), "by-namespace": ("A", None),
                                      "own-label": ("A", None)}
    # The Job's flotilla.io/queue label wins over its Kueue label; a Job relabelled offers its pods again.
    tracker = tracker_with(job_pod("late", uid="u-5"), namespace_queue="A")
    assert [a.owner_queue for a in tracker.take()[0]] == [None]
    tracker.on_job("MODIFIED", {"metadata": {"uid": JOB_UID, "labels": {"flotilla.io/queue": "B",
                                                                        "kueue.x-k8s.io/queue-name": "K"}}})
    assert [a.owner_queue for a in tracker.take()[0]] == ["B"]


def test_placement_rules_give_a_queue_to_pods_of_any_namespace(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/s.db")
    store.sync_queues(queues() + [QueueSpec("tenants")])
    rules = (PlacementRule("namespace", parent="tenants", prefix="ns-"), PlacementRule("fixed", queue="A"))
    tracker = tracker_with(pod("f", namespace="fresh", uid="u-1"), pod("b", namespace="team-b", uid="u-2"))
    rows, refused = admit(store, tracker, rules)
    # team-b has no queue label (its queue B lists it, but a queue's namespaces only permit): the rule makes one.
    assert refused == {} and rows == {"f": ("ns-fresh", None), "b": ("ns-team-b", None)}
    made = store.get_queue("ns-fresh")
    assert (made.name, made.weight, made.namespaces) == ("ns-fresh", 1.0, ("fresh",))
    specs = store.list_queues()
    assert queue_parents([QueueSpec("tenants")], rules, specs)["ns-fresh"] == "tenants"
    assert placement_of([QueueSpec("tenants")], rules, made) == "namespace under tenants prefix ns-"
    # A queue of the rule's name that does not list the namespace: the rule passes, the next one gives A.
    assert place(rules, "x", {"ns-x": QueueSpec("ns-x", namespaces=("y",)), "A": QueueSpec("A")})[:2] == ("A", None)
    assert place((), "x", {}) == (None, None, "")
    # No rule: refused, told how to give one.
    rows, refused = admit(store, tracker_with(pod("g", namespace="fresh", uid="u-9")))
    assert rows == {} and refused == {"g": "no queue: label the pod, its Job or its namespace 'fresh' with "
                                           "flotilla.io/queue"}


def test_placement_rules_in_the_config(tmp_path):
    cfg = parse_config("queues: [{name: tenants}, {name: default}]\nplacement:\n"
                       "  - {kind: namespace, parent: tenants}\n  - {kind: fixed, queue: default}\n", "c.yaml")
    assert from_config(cfg).placement == (PlacementRule("namespace", parent="tenants"),
                                          PlacementRule("fixed", queue="default"))
    for text, message in (("placement: [{kind: fixed}]", "a fixed rule names its queue"),
                          ("placement: [{kind: namespace, parent: nope}]", "unknown parent queue 'nope'"),
                          ("placement: [{kind: fixed, queue: a, prefix: x}]", "a fixed rule has no prefix")):
        try:
            parse_config(text + "\n", "c.yaml")
        except (ConfigError, ValueError) as exc:
            assert message in str(exc)
        else:
            raise AssertionError(f"{text} was accepted")


def test_a_pod_with_no_class_is_of_class_none_and_goes_by_its_kubernetes_priority(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/s.db")
    store.sync_queues(queues())
    tracker = tracker_with(pod("plain"), pod("urgent", uid="u-2", priorityClassName="default", priority=1000),
                           namespace_queue="A")
    intake = ClusterIntake(store)
    arrivals, _ = tracker.take()
    rows, refused = intake._admit("east", arrivals, {q.name: q for q in store.list_queues()},
                                  {"default", NO_CLASS}, "default")
    assert refused == {} and sorted((r["pod_name"], r["priority_class"], r["priority"]) for r in rows) == [
        ("plain", NO_CLASS, 0), ("urgent", "default", -1000)]
    assert job_id_of(UID) in {r["id"] for r in rows}


def test_podgroup_status_is_written_as_volcano_writes_it():
    from flotilla.kubernetes.podgroupstatus import podgroup_status

    def phase(states, reason=None, stored=True, minimum=3):
        got = podgroup_status(minimum, dict(enumerate(states)), reason, stored)
        cond = got["conditions"][0] if got["conditions"] else {}
        return (got["phase"], got["running"], got["succeeded"], got["failed"], cond.get("type"), cond.get("reason"),
                cond.get("message"))

    assert phase(["waiting"] * 2) == ("Pending", 0, 0, 0, "Unschedulable", "NotEnoughTasks",
                                      "flotilla: 2 of minMember 3 pods exist")
    assert phase(["waiting"] * 3, "gang g does not fit") == (
        "Inqueue", 0, 0, 0, "Unschedulable", "NotEnoughResources", "flotilla: gang g does not fit")
    assert phase(["waiting"] * 3, "queue 'x' does not exist", stored=False) == (
        "Pending", 0, 0, 0, "Unschedulable", "Unschedulable", "flotilla: queue 'x' does not exist")
    assert phase(["bound", "running", "succeeded", "waiting"]) == (
        "Running", 1, 1, 0, "Scheduled", "tasks in gang are ready to be scheduled", "3 of minMember 3 pods bound")
    assert phase(["succeeded", "failed", "succeeded"]) == ("Completed", 0, 2, 1, None, None, None)


def test_the_tracker_keeps_each_podgroups_members():
    tracker = tracker_with(namespace_queue="A")
    member = {"scheduling.volcano.sh/group-name": "pg"}
    tracker.on_pod("ADDED", pod("a", uid="u-a", annotations=member))
    tracker.on_pod("ADDED", pod("b", uid="u-b", annotations=member, node="node-1"))
    tracker.on_pod("ADDED", pod("c", uid="u-c", annotations=member, schedulerName="other"))
    assert tracker.group_members == {("team-a", "pg"): {"u-a": "waiting", "u-b": "bound"}}
    assert tracker.groups_changed == {("team-a", "pg")}
    tracker.on_pod("DELETED", pod("a", uid="u-a", annotations=member))
    tracker.replace_pods({"u-x"})
    assert tracker.group_members == {}


def test_a_jobsets_queue_label_names_the_queue_of_its_jobs_pods(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/s.db")
    store.sync_queues(queues() + [QueueSpec("K", namespaces=("team-a",))])
    job = {"metadata": {"uid": JOB_UID, "name": "train-workers-0", "labels": {},
                        "ownerReferences": [{"kind": "JobSet", "name": "train", "uid": "js-1", "controller": True}]}}
    tracker = tracker_with(job_pod("worker"), namespace_queue="A", jobs=[job])
    assert [a.owner_queue for a in tracker.take()[0]] == [None]
    tracker.on_jobset("ADDED", {"metadata": {"uid": "js-1", "labels": {"kueue.x-k8s.io/queue-name": "K"}}})
    rows, refused = admit(store, tracker)
    assert refused == {} and rows == {"worker": ("K", None)}
    tracker.replace_jobs([], jobsets=True)
    assert tracker.jobset_queues == {} and [a.owner_queue for a in tracker.take()[0]] == [None]


def test_queue_list_shows_the_queues_a_placement_rule_made(tmp_path):
    from fastapi.testclient import TestClient

    from flotilla.service.api import create_app

    cfg = parse_config("queues: [{name: tenants}, {name: A, namespaces: [team-a]}]\n"
                       "placement: [{kind: namespace, parent: tenants}]\n", "c.yaml")
    settings = from_config(cfg)
    store = Store(f"sqlite:///{tmp_path}/s.db")
    store.sync_queues(settings.queues)
    admit(store, tracker_with(pod("f", namespace="fresh", uid="u-1")), settings.placement)
    client = TestClient(create_app(store, settings), base_url="http://127.0.0.1:8080")
    rows = {q["name"]: (q["namespaces"], q["parent"], q["placement"]) for q in client.get("/v1/queues").json()["queues"]}
    assert rows == {"tenants": ([], None, None), "A": (["team-a"], None, None),
                    "fresh": (["fresh"], "tenants", "namespace under tenants")}
    store.close()


def test_a_podgroup_status_is_written_once_per_change_and_again_after_a_failed_write():
    from flotilla.kubernetes.podgroupstatus import PodGroupReporter

    class Client:
        def __init__(self):
            self.patches, self.fail = [], False

        def patch(self, path, body):
            if self.fail:
                raise RuntimeError("refused")
            self.patches.append((path, body["status"]["phase"], [c["type"] for c in body["status"]["conditions"]]))

    client = Client()
    reporter = PodGroupReporter(client, "/apis/scheduling.volcano.sh/v1beta1")
    key, status = ("team-a", "pg"), {"phase": "Inqueue", "conditions": [{"type": "Unschedulable"}]}
    assert reporter.claim(key, status) and reporter.write(key, status)
    assert not reporter.claim(key, dict(status))                      # unchanged: no second write
    running = {"phase": "Running", "conditions": [{"type": "Scheduled"}]}
    assert reporter.claim(key, running)
    client.fail = True
    try:
        reporter.write(key, running)
    except RuntimeError:
        pass
    client.fail = False
    assert reporter.claim(key, running) and reporter.write(key, running)   # the failed write is tried again
    assert client.patches == [
        ("/apis/scheduling.volcano.sh/v1beta1/namespaces/team-a/podgroups/pg/status", "Inqueue", ["Unschedulable"]),
        ("/apis/scheduling.volcano.sh/v1beta1/namespaces/team-a/podgroups/pg/status", "Running", ["Scheduled"])]


def test_a_pod_naming_a_queue_that_left_the_config_with_unfinished_jobs_is_refused_saying_so(tmp_path):
    from flotilla.service.store import NewJob, Pod

    store = Store(f"sqlite:///{tmp_path}/s.db")
    store.sync_queues(queues() + [QueueSpec("K", namespaces=("team-a",))])
    store.submit("K", "s", "alice", [NewJob(0, None, 0, "default", [Pod({"cpu": 1000})], 1.0, 60.0)])
    assert store.sync_queues(queues()) == {"removed": [], "retiring": ["K"]}
    tracker = tracker_with(pod("late", uid="u-1", labels={"flotilla.io/queue": "K"}))
    assert admit(store, tracker) == ({}, {"late": "queue 'K' was removed from the configuration: it takes no new "
                                                  "jobs, and is removed once its unfinished jobs finish (from the "
                                                  "pod label flotilla.io/queue)"})
