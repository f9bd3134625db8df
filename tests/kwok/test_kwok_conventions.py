"""Kubernetes' conventions on a KWOK cluster: cluster priority classes, Flotilla as the cluster's only scheduler
(``schedulerName: default-scheduler`` with a namespace-per-queue placement rule), Volcano's other group key.

The preemption test reproduces the shapes of Kubernetes' e2e spec "validates basic preemption works"
(test/e2e/scheduling/preemption.go): the spec's own PriorityClass objects (low 1, medium 100, high 1000), made
in the cluster and not in Flotilla's config; one victim per node pinned by ``matchFields`` on
``metadata.name``, the first low, the others medium; a high preemptor of the same request. Then the spec
"validates lower priority pod preemption by critical pod": a ``system-cluster-critical`` pod in
``kube-system``. Cores stand in for the spec's extended resource.
"""

from __future__ import annotations

import time

import pytest

from tests.support import incluster
from tests.support.incluster import (Harness, bound_per_node, ensure_podgroup_crd, fill, live,
                                     make_namespace, make_pod)

from flotilla.kubernetes.client import KubeError, pod_path
from flotilla.kubernetes.priorityclasses import NO_CLASS, PRIORITY_CLASSES_PATH
from flotilla.service.placement import placement_of

pytestmark = pytest.mark.kwok

ONLY_SCHEDULER = """
priorityClasses:
  - {name: armada-default, priority: 30000, preemptible: false}
  - {name: armada-preemptible, priority: 20000, preemptible: true}
  - {name: conv-shadowed, priority: 50000, preemptible: false}
  - {name: conv-made, priority: 40000, preemptible: false}
defaultPriorityClass: armada-default
queues:
  - {name: A, weight: 1, namespaces: [team-a]}
  - {name: B, weight: 1, namespaces: [team-b, team-b2]}
  - {name: tenants, weight: 1}
placement:
  - {kind: namespace, parent: tenants}
lease: {timeout: 120s, maxRetries: 3}
cycle: {period: 0.2s}
clusters:
  - {name: a, kind: kubernetes, kubeconfig: KUBECONFIG, context: CONTEXT, namespace: flotilla-jobs,
     schedulerName: default-scheduler}
"""

E2E_CLASSES = {"sched-preemption-low-priority": 1, "sched-preemption-medium-priority": 100,
               "sched-preemption-high-priority": 1000}


def make_class(cluster, name: str, value: int, **extra) -> None:
    try:
        cluster.client.post(PRIORITY_CLASSES_PATH, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                                    "metadata": {"name": name}, "value": value, **extra})
    except KubeError as exc:
        if getattr(exc, "status", None) != 409:
            raise


def delete_class(cluster, name: str) -> None:
    try:
        cluster.client.delete(f"{PRIORITY_CLASSES_PATH}/{name}")
    except KubeError:
        pass


def pinned(node: str) -> dict:
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}}


def gone_or_terminating(cluster, namespace: str, name: str) -> bool:
    try:
        pod = cluster.client.get(pod_path(namespace, name))
    except KubeError as exc:
        return getattr(exc, "status", None) == 404
    return bool(pod["metadata"].get("deletionTimestamp"))


def job_of(h, queue: str, state: str = "running", timeout: float = 30.0) -> dict:
    """The queue's one job, once the store says ``state`` (liveness only: cycles until it does)."""
    deadline = time.monotonic() + timeout
    while True:
        jobs = h.store.list_jobs(queue=queue)
        if jobs and jobs[0]["state"] == state or time.monotonic() > deadline:
            return jobs[0]
        h.cycle()
        time.sleep(0.1)


def test_the_cluster_only_scheduler_with_cluster_priority_classes(kwok, tmp_path, monkeypatch):
    cluster = kwok["a"]
    namespace = f"e2e-sched-preemption-{int(time.time() * 1000) % 100000}"
    make_class(cluster, "conv-shadowed", 7)    # the cluster's own class, named like one of Flotilla's
    for name, value in E2E_CLASSES.items():
        make_class(cluster, name, value)
    monkeypatch.setattr(incluster, "CONFIG", ONLY_SCHEDULER)
    h = Harness(tmp_path, cluster)
    try:
        # The cluster's own class keeps its value; the one it lacked is made, labelled as Flotilla's.
        shadowed = cluster.client.get(f"{PRIORITY_CLASSES_PATH}/conv-shadowed")
        made = cluster.client.get(f"{PRIORITY_CLASSES_PATH}/conv-made")
        assert (shadowed["value"], (shadowed["metadata"].get("labels") or {})) == (7, {})
        assert (made["value"], made["metadata"]["labels"]) == (40000, {"app.kubernetes.io/managed-by": "flotilla"})

        # A namespace made after start, with no queue label: the placement rule gives it a queue under tenants.
        make_namespace(cluster, namespace)
        make_pod(cluster, namespace, "plain", "1", scheduler="default-scheduler")
        h.seen(1)
        pods = h.settle(lambda pods: sum(bound_per_node(pods, namespace).values()) == 1, "the plain pod bound",
                        cycles=5)
        plain = next(p for p in live(pods, namespace) if p["metadata"]["name"] == "plain")
        assert (plain["spec"].get("priority"), plain["spec"].get("priorityClassName")) == (0, None)
        job = job_of(h, namespace)
        assert (job["priorityClass"], job["priority"], job["state"]) == (NO_CLASS, 0, "running")
        queue = h.store.get_queue(namespace)
        assert queue.namespaces == (namespace,)
        assert placement_of(h.settings.queues, h.settings.placement, queue) == "namespace under tenants"
        cluster.client.delete(pod_path(namespace, "plain"), {"gracePeriodSeconds": 0})
        h.settle(lambda pods: not live(pods, namespace), "the plain pod gone")

        # The e2e spec's victims: 20 of 32 cores on each node, the first low, the second medium.
        make_pod(cluster, namespace, "pod0-low", "20", scheduler="default-scheduler",
                 priority_class="sched-preemption-low-priority", extra_spec=pinned("node-1"))
        make_pod(cluster, namespace, "pod1-medium", "20", scheduler="default-scheduler",
                 priority_class="sched-preemption-medium-priority", extra_spec=pinned("node-2"))
        h.seen(2)
        h.settle(lambda pods: bound_per_node(pods, namespace) == {"node-1": 1, "node-2": 1}, "victims bound",
                 cycles=5)
        make_pod(cluster, namespace, "preemptor-pod", "20", scheduler="default-scheduler",
                 priority_class="sched-preemption-high-priority")

        def preemptor_bound(pods):
            return any(p["metadata"]["name"] == "preemptor-pod" and p["spec"].get("nodeName") for p in live(pods))

        pods = h.settle(preemptor_bound, "the preemptor bound", cycles=20, timeout=90)
        assert gone_or_terminating(cluster, namespace, "pod0-low")
        assert not gone_or_terminating(cluster, namespace, "pod1-medium")
        assert next(p for p in live(pods) if p["metadata"]["name"] == "preemptor-pod")["spec"]["nodeName"] == "node-1"

        # The critical pod spec: a system-cluster-critical pod in kube-system takes the medium pod's place (the
        # lowest priority on the full nodes), the high one stays.
        make_pod(cluster, "kube-system", "critical-pod", "20", scheduler="default-scheduler",
                 priority_class="system-cluster-critical")

        def critical_bound(pods):
            return any(p["metadata"]["name"] == "critical-pod" and p["spec"].get("nodeName") for p in live(pods))

        try:
            pods = h.settle(critical_bound, "the critical pod bound", cycles=20, timeout=90)
            assert gone_or_terminating(cluster, namespace, "pod1-medium")
            assert not gone_or_terminating(cluster, namespace, "preemptor-pod")
            job = h.store.list_jobs(queue="kube-system")[0]
            assert (job["priorityClass"], job["priority"]) == ("system-cluster-critical", -2_000_000_000)
        finally:
            try:
                cluster.client.delete(pod_path("kube-system", "critical-pod"), {"gracePeriodSeconds": 0})
            except KubeError:
                pass
    finally:
        h.close()
        for name in [*E2E_CLASSES, "conv-shadowed"]:
            delete_class(cluster, name)


def test_a_pod_given_the_clusters_global_default_class_is_bound(kwok, tmp_path):
    cluster = kwok["a"]
    make_namespace(cluster, "team-a", "A")
    make_class(cluster, "conv-cluster-default", 10, globalDefault=True)
    h = Harness(tmp_path, cluster)
    try:
        make_pod(cluster, "team-a", "defaulted", "1")
        h.seen(1)
        pods = h.settle(lambda pods: sum(bound_per_node(pods, "team-a").values()) == 1, "the pod bound", cycles=5)
        pod = live(pods, "team-a")[0]
        assert (pod["spec"]["priorityClassName"], pod["spec"]["priority"]) == ("conv-cluster-default", 10)
        job = job_of(h, "A")
        assert (job["priorityClass"], job["priority"], job["state"]) == ("conv-cluster-default", -10, "running")
    finally:
        delete_class(cluster, "conv-cluster-default")   # before anything else: it would class every pod
        h.close()


def test_a_volcano_group_name_gang_of_3_on_room_for_2_binds_none_and_says_why(kwok, tmp_path):
    cluster = kwok["a"]
    ensure_podgroup_crd(cluster)
    make_namespace(cluster, "team-b", "B")
    h = Harness(tmp_path, cluster)
    try:
        cluster.client.post("/apis/scheduling.volcano.sh/v1beta1/namespaces/team-b/podgroups", {
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "pg", "namespace": "team-b"}, "spec": {"minMember": 3}})
        fill(cluster, {"node-1": 4, "node-2": 4})   # room for 2 pods of 3 cores, one per node
        for i in range(3):
            make_pod(cluster, "team-b", f"v-{i}", "3", annotations={"scheduling.volcano.sh/group-name": "pg"})
        h.seen(3)
        for _ in range(3):
            h.cycle()
        assert bound_per_node(cluster.pods(), "team-b") == {}
        jobs = h.store.list_jobs(queue="B")
        assert len(jobs) == 3 and {j["gang"]["id"] for j in jobs} == {"podgroup/team-b/pg"}
        deadline = time.monotonic() + 30
        while True:
            group = cluster.client.get("/apis/scheduling.volcano.sh/v1beta1/namespaces/team-b/podgroups/pg")
            status = group.get("status") or {}
            if status.get("phase") or time.monotonic() > deadline:
                break
            h.cycle()
            time.sleep(0.2)
        condition = (status.get("conditions") or [{}])[0]
        assert (status.get("phase"), status.get("running"), status.get("succeeded"), status.get("failed"),
                condition.get("type"), condition.get("status"), condition.get("reason")) == (
            "Inqueue", 0, 0, 0, "Unschedulable", "True", "NotEnoughResources")
        assert condition["message"].startswith("flotilla: ") and "gang" in condition["message"]
    finally:
        h.close()


def test_a_kueue_labelled_jobs_pods_queue_in_the_queue_it_names(kwok, tmp_path):
    """Kueue's habit: the queue label on the Job, not on its pod template; team-b2 has no queue label."""
    cluster = kwok["a"]
    make_namespace(cluster, "team-b2")
    h = Harness(tmp_path, cluster)
    try:
        job = {"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": "kueued", "namespace": "team-b2", "labels": {"kueue.x-k8s.io/queue-name": "B"}},
               "spec": {"parallelism": 2, "completions": 2, "backoffLimit": 0, "template": {"spec": {
                   "schedulerName": "flotilla", "terminationGracePeriodSeconds": 1, "restartPolicy": "Never",
                   "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                   "resources": {"requests": {"cpu": "1"}}}]}}}}
        cluster.client.post("/apis/batch/v1/namespaces/team-b2/jobs", job)
        h.seen(2, timeout=120)   # (a Job controller just started syncs its informers first)
        pods = h.settle(lambda pods: sum(bound_per_node(pods, "team-b2").values()) == 2, "the Job's pods bound",
                        cycles=5)
        assert len(live(pods, "team-b2")) == 2
        assert sorted((j["queue"], j["jobSet"]) for j in h.store.list_jobs()) == [("B", "kueued"), ("B", "kueued")]
    finally:
        h.close()
