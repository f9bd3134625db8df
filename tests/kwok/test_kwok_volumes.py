"""Persistent volume claims on a KWOK cluster whose kube-controller-manager runs the persistentvolume-binder
controller: pods naming claims are placed as kube-scheduler's VolumeBinding plugin places them, and
WaitForFirstConsumer claims are bound (static: the PV's claimRef; dynamic: the claim's selected-node) before
the pod. Everything asserted is read back from the API server."""

from __future__ import annotations

import os
import time

import pytest

from tests.support.kwok import NODE_TEMPLATE, TestCluster, _toolchain
from tests.support.incluster import Harness, condition, make_namespace, make_pod

pytestmark = pytest.mark.kwok

NODES = 4
PVS = "/api/v1/persistentvolumes"
CLASSES = "/apis/storage.k8s.io/v1/storageclasses"


def claims_path(namespace: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{namespace}/persistentvolumeclaims" + (f"/{name}" if name else "")


@pytest.fixture(scope="module")
def pvcluster(tmp_path_factory):
    """One 4-node fake cluster running kube-controller-manager's persistentvolume-binder controller."""
    from flotilla.kwok.cluster import down, up

    bin_dir = _toolchain()
    kubeconfig = str(tmp_path_factory.mktemp("kwok-pv") / "kubeconfig")
    template = tmp_path_factory.mktemp("kwok-pv-node") / "node.yaml"
    template.write_text(NODE_TEMPLATE)
    name = f"fltest-{os.getpid()}-pv"
    try:
        fake = up(name, NODES, template, kubeconfig=kubeconfig, bin_dir=bin_dir, timeout=120,
                  controllers=("persistentvolume-binder",))
        yield TestCluster(fake.name, fake.kubeconfig, fake.context, fake.client())
    finally:
        down(name, kubeconfig=kubeconfig, bin_dir=bin_dir)


@pytest.fixture
def harness(pvcluster, tmp_path):
    cluster = pvcluster
    cluster.reset(NODES)
    client = cluster.client
    # (Their protection finalizers off first: no pvc-protection controller runs here to take them off.)
    for pvc in client.get("/api/v1/persistentvolumeclaims")["items"]:
        path = claims_path(pvc["metadata"]["namespace"], pvc["metadata"]["name"])
        client.patch(path, {"metadata": {"finalizers": None}})
        client.delete(path)
    for pv in client.get(PVS)["items"]:
        client.patch(f"{PVS}/{pv['metadata']['name']}", {"metadata": {"finalizers": None}})
        client.delete(f"{PVS}/{pv['metadata']['name']}")
    for sc in client.get(CLASSES)["items"]:
        client.delete(f"{CLASSES}/{sc['metadata']['name']}")
    deadline = time.monotonic() + 30
    while (client.get(PVS)["items"] or client.get("/api/v1/persistentvolumeclaims")["items"]) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    make_namespace(cluster, "team-a", "A")
    h = Harness(tmp_path, cluster)
    yield h
    h.close()


def storage_class(cluster, name: str, provisioner: str = "kubernetes.io/no-provisioner",
                  mode: str = "WaitForFirstConsumer") -> None:
    cluster.client.post(CLASSES, {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                                  "metadata": {"name": name}, "provisioner": provisioner,
                                  "volumeBindingMode": mode})


def local_pv(cluster, name: str, node: str, size: str = "1Gi", storage_class: str = "local",
             claim: tuple[str, str] | None = None) -> None:
    spec = {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain", "storageClassName": storage_class,
            "local": {"path": f"/mnt/{name}"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}
    if claim is not None:
        spec["claimRef"] = {"namespace": claim[0], "name": claim[1]}
    cluster.client.post(PVS, {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
                              "spec": spec})


def claim(cluster, namespace: str, name: str, storage_class: str = "local", size: str = "1Gi",
          volume: str = "") -> None:
    spec = {"accessModes": ["ReadWriteOnce"], "storageClassName": storage_class,
            "resources": {"requests": {"storage": size}}}
    if volume:
        spec["volumeName"] = volume
    cluster.client.post(claims_path(namespace), {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                                 "metadata": {"name": name, "namespace": namespace}, "spec": spec})


def mounting(claim_name: str) -> dict:
    return {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}]}


def get_claim(cluster, namespace: str, name: str) -> dict:
    return cluster.client.get(claims_path(namespace, name))


def node_of(pods, name: str):
    return next((p["spec"].get("nodeName") for p in pods if p["metadata"]["name"] == name), None)


def wait(predicate, what: str, timeout: float = 60.0, seen=None):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}" + (f"; saw {seen()}" if seen else ""))
        time.sleep(0.1)


def test_a_pod_naming_a_claim_that_does_not_exist_is_never_bound_and_told_which(harness):
    cluster = harness.cluster
    make_pod(cluster, "team-a", "lonely", extra_spec=mounting("does-not-exist"))
    make_pod(cluster, "team-a", "plain")
    harness.seen(2)
    pods = harness.settle(lambda pods: node_of(pods, "plain") and (condition(
        next(p for p in pods if p["metadata"]["name"] == "lonely"), "PodScheduled") or {}).get("message"),
        "plain bound, lonely told why", cycles=5)
    assert node_of(pods, "lonely") is None
    lonely = next(p for p in pods if p["metadata"]["name"] == "lonely")
    message = condition(lonely, "PodScheduled")["message"]
    assert '4 persistentvolumeclaim "does-not-exist" not found' in message, message
    for _ in range(3):
        harness.cycle()
    assert node_of(cluster.pods(), "lonely") is None


def test_a_wait_for_first_consumer_claim_binds_to_its_only_volume_and_the_pod_goes_to_its_node(harness):
    cluster = harness.cluster
    storage_class(cluster, "local")
    local_pv(cluster, "pv-node-3", "node-3")
    local_pv(cluster, "pv-small-node-1", "node-1", size="100Mi")   # too small for the claim
    claim(cluster, "team-a", "data")
    make_pod(cluster, "team-a", "consumer", extra_spec=mounting("data"))
    harness.seen(1)
    wait(lambda: harness.backend.volumes.ready and ("team-a", "data") in harness.backend.volumes.pvcs,
         "the claim informed")
    harness.cycle()
    # The claim is bound first (the binder's claimRef, then the PV controller), the pod only after.
    pods = harness.settle(lambda pods: node_of(pods, "consumer"), "consumer bound", timeout=90)
    assert node_of(pods, "consumer") == "node-3"
    pvc = get_claim(cluster, "team-a", "data")
    assert (pvc["spec"].get("volumeName"), pvc["status"].get("phase")) == ("pv-node-3", "Bound")
    pv = cluster.client.get(f"{PVS}/pv-node-3")
    assert pv["metadata"]["annotations"].get("pv.kubernetes.io/bound-by-controller") == "yes"
    assert (pv["spec"]["claimRef"]["namespace"], pv["spec"]["claimRef"]["name"]) == ("team-a", "data")


def test_three_pods_sharing_a_claim_bound_to_a_volume_on_node_4_all_go_to_node_4(harness):
    cluster = harness.cluster
    storage_class(cluster, "manual", mode="Immediate")
    local_pv(cluster, "pv-node-4", "node-4", storage_class="manual", claim=("team-a", "shared"))
    claim(cluster, "team-a", "shared", storage_class="manual", volume="pv-node-4")
    wait(lambda: get_claim(cluster, "team-a", "shared")["status"].get("phase") == "Bound", "the claim bound",
         seen=lambda: get_claim(cluster, "team-a", "shared"))
    for k in range(3):
        make_pod(cluster, "team-a", f"reader-{k}", extra_spec=mounting("shared"))
    harness.seen(3)
    pods = harness.settle(lambda pods: all(node_of(pods, f"reader-{k}") for k in range(3)), "3 readers bound",
                          cycles=5)
    assert [node_of(pods, f"reader-{k}") for k in range(3)] == ["node-4"] * 3


def test_an_unbound_immediate_claim_keeps_its_pod_waiting_with_kube_schedulers_words(harness):
    cluster = harness.cluster
    storage_class(cluster, "slow", provisioner="example.com/never", mode="Immediate")
    claim(cluster, "team-a", "pending", storage_class="slow")
    make_pod(cluster, "team-a", "waiter", extra_spec=mounting("pending"))
    harness.seen(1)
    pods = harness.settle(lambda pods: (condition(pods[0], "PodScheduled") or {}).get("message"), "waiter told why",
                          cycles=5)
    assert node_of(pods, "waiter") is None
    assert "pod has unbound immediate PersistentVolumeClaims" in condition(pods[0], "PodScheduled")["message"]


def test_a_dynamic_wait_for_first_consumer_claim_gets_the_selected_node_of_its_pod(harness):
    cluster = harness.cluster
    storage_class(cluster, "dynamic", provisioner="example.com/fake")
    claim(cluster, "team-a", "fresh", storage_class="dynamic")
    make_pod(cluster, "team-a", "maker", extra_spec={**mounting("fresh"),
                                                    "nodeSelector": {"kubernetes.io/hostname": "node-2"}})
    harness.seen(1)
    wait(lambda: harness.backend.volumes.ready and ("team-a", "fresh") in harness.backend.volumes.pvcs,
         "the claim informed")
    harness.cycle()
    annotations = wait(lambda: get_claim(cluster, "team-a", "fresh")["metadata"].get("annotations"),
                       "the claim annotated")
    assert annotations["volume.kubernetes.io/selected-node"] == "node-2"
    # No provisioner makes the volume: the pod is not bound while its claim is not.
    for _ in range(2):
        harness.cycle()
    assert node_of(cluster.pods(), "maker") is None


def test_a_claim_not_bound_within_the_timeout_returns_its_job_with_the_reason(harness):
    cluster = harness.cluster
    harness.backend.volume_bind_timeout = 2.0
    storage_class(cluster, "dynamic", provisioner="example.com/fake")
    claim(cluster, "team-a", "never", storage_class="dynamic")
    make_pod(cluster, "team-a", "patient", extra_spec=mounting("never"))
    harness.seen(1)
    wait(lambda: harness.backend.volumes.ready and ("team-a", "never") in harness.backend.volumes.pvcs,
         "the claim informed")
    harness.cycle()
    reason = "binding volumes: claims not bound within volumeBindTimeout 2s: team-a/never"

    def returned():
        harness.cycle()
        return [e for e in harness.store.all_events() if reason in (e.get("reason") or "")]

    events = wait(returned, "the job returned with the reason", timeout=30)
    # Returned to its queue using none of its retries, as kube-scheduler requeues a pod whose binding timed out.
    assert [(e["kind"], e["reason"]) for e in events[:1]] == [("returned", reason)]
    job_id = events[0]["jobId"]
    kinds = [e["kind"] for e in harness.store.all_events() if e["jobId"] == job_id]
    assert kinds[kinds.index("returned") + 1] == "queued", kinds
    assert harness.store.get_job(job_id)["retries"] == 0
    assert node_of(cluster.pods(), "patient") is None


def test_api_jobs_naming_a_claim_go_where_its_volume_is(harness):
    from flotilla.service.jobspec import prepare
    from tests.support.service import job, job_file

    cluster = harness.cluster
    cluster.create_namespace("flotilla-jobs")
    storage_class(cluster, "local")
    local_pv(cluster, "pv-api", "node-2")
    claim(cluster, "flotilla-jobs", "api-data")
    spec = job("j")
    spec["podSpec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "api-data"}}]
    spec["podSpec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    _, new = prepare(job_file("A", "api", [spec]), harness.settings)
    assert new[0].pods[0].claims == ["api-data"]
    harness.store.submit("A", "api", "alice", new)
    wait(lambda: harness.backend.volumes.ready and ("flotilla-jobs", "api-data") in harness.backend.volumes.pvcs,
         "the claim informed")
    harness.cycle()
    pods = harness.settle(lambda pods: [p for p in pods if p["metadata"]["namespace"] == "flotilla-jobs"
                                        and p["spec"].get("nodeName")], "the API job's pod bound", timeout=90)
    (pod,) = [p for p in pods if p["metadata"]["namespace"] == "flotilla-jobs"]
    assert pod["spec"]["nodeName"] == "node-2"
    assert pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "api-data"
    assert get_claim(cluster, "flotilla-jobs", "api-data")["spec"].get("volumeName") == "pv-api"
