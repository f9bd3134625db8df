"""The chart installed with ``helm install`` on the real node's cluster as on a cluster of one's own: the
Deployment and ReplicaSet controllers make its standalone pod, kube-scheduler puts it on ``real-1`` once its claim
can bind (a default StorageClass of local volumes, WaitForFirstConsumer), ServiceAccount admission mounts the
chart's ServiceAccount's token, and the pod reaches the API server through the ``kubernetes`` Service (kube-proxy)
and runs the image of ``scripts/image``. From inside, under RBAC, it binds a pod made with kubectl
(``schedulerName: flotilla``, the queue label) in the release's namespace, which runs to completion, and the pods
of a kubectl ``batch/v1`` Job of 3 completions, which succeeds 3 of 3; ``flotilla`` from outside, through the
release's Service, submits a job set, ``helm upgrade`` adds a queue while it runs, ``flotilla queue list`` shows
the queue and every job succeeds once; ``helm rollback`` to the first revision removes the queue again (a config
queue with no unfinished job); ``helm uninstall`` leaves no Flotilla object, pod or lease behind (the claim is
kept, as the chart says, and deleted by the test).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from flotilla.kubernetes.client import ApiError, pod_path
from tests.support.image import REPO, imported_image
from tests.support.local_storage import default_local_storage

pytestmark = [pytest.mark.realnode, pytest.mark.image]

CHART = REPO / "deploy" / "helm" / "flotilla"


def run(*args: str, tmp_path: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "HELM_CACHE_HOME": str(tmp_path / "helm-cache"),
           "HELM_CONFIG_HOME": str(tmp_path / "helm-config"), "HELM_DATA_HOME": str(tmp_path / "helm-data")}
    result = subprocess.run(list(args), capture_output=True, text=True, env=env, timeout=300)
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


def flotilla(url: str, *args: str, tmp_path: Path):
    """The CLI against the release's API at ``url``, as the chart's example admin; its JSON answer."""
    env = {**os.environ, "FLOTILLA_URL": url, "FLOTILLA_TOKEN": "admin-secret", "HOME": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "flotilla.scheduler_main", *args], capture_output=True,
                            text=True, env=env, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def standalone_pod(real_node, timeout: float = 300) -> dict:
    """The release's one standalone pod once it runs and is ready."""
    selector = "app.kubernetes.io/instance=flt,app.kubernetes.io/name=flt-flotilla-standalone"

    def find():
        pods = real_node.client.get(pod_path(real_node.namespace), labelSelector=selector)["items"]
        ready = [p for p in pods if p["status"].get("phase") == "Running"
                 and all(s.get("ready") for s in p["status"].get("containerStatuses") or [{}])]
        return ready[0] if len(pods) == 1 and ready else None
    return real_node.wait(find, timeout, "the standalone pod running and ready", step=1)


def test_helm_install_runs_flotilla_on_real_1_and_uninstall_leaves_nothing(real_node, tmp_path):
    with default_local_storage(real_node, tmp_path / "volumes") as (volume,):
        installed_and_uninstalled(real_node, tmp_path, volume)


def installed_and_uninstalled(real_node, tmp_path: Path, volume: str) -> None:
    image = imported_image(tmp_path / "flotilla.oci.tar")
    bin_dir = real_node.bin_dir
    helm, kubectl = str(bin_dir / "helm"), str(bin_dir / "kubectl")
    client, namespace = real_node.client, real_node.namespace
    kube = ("--kubeconfig", real_node.kubeconfig, "--kube-context", real_node.context, "--namespace", namespace)
    name, tag = image.rsplit(":", 1)
    run(helm, "install", "flt", str(CHART), *kube, "--set", f"image.repository={name}", "--set", f"image.tag={tag}",
        tmp_path=tmp_path)
    try:
        config = yaml.safe_load(client.get(f"/api/v1/namespaces/{namespace}/configmaps/flt-flotilla-config")
                                ["data"]["config.yaml"])
        assert [(q["name"], q["namespaces"]) for q in config["queues"]] == [("research", [namespace]),
                                                                            ("production", [namespace])]
        pod = standalone_pod(real_node)
        standalone = pod["metadata"]["name"]
        assert (pod["spec"]["schedulerName"], pod["spec"]["nodeName"], pod["spec"]["serviceAccountName"]) == (
            "default-scheduler", "real-1", "flt-flotilla")
        [(owner_kind, replicaset)] = [(o["kind"], o["name"]) for o in pod["metadata"]["ownerReferences"]]
        assert owner_kind == "ReplicaSet"
        assert [(o["kind"], o["name"]) for o in client.get(
            f"/apis/apps/v1/namespaces/{namespace}/replicasets/{replicaset}")["metadata"]["ownerReferences"]] == [
            ("Deployment", "flt-flotilla")]
        claim = client.get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/flt-flotilla-data")
        assert (claim["status"]["phase"], claim["spec"]["volumeName"]) == ("Bound", volume)
        service = client.get(f"/api/v1/namespaces/{namespace}/services/flt-flotilla-api")["spec"]
        url = f"http://{service['clusterIP']}:{service['ports'][0]['port']}"

        client.post(pod_path(namespace), {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "kubectl-made", "labels": {"flotilla.io/queue": "research"}}, "spec": {
            "schedulerName": "flotilla", "restartPolicy": "Never", "dnsPolicy": "Default",
            "automountServiceAccountToken": False,
            "containers": [{"name": "c", "image": real_node.image, "command": ["sh", "-c", "echo ran"],
                            "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}}}]}})
        done = real_node.wait(lambda: (p := client.get(pod_path(namespace, "kubectl-made")))["status"].get("phase")
                              in ("Succeeded", "Failed") and p, timeout=240, what="the kubectl-made pod to end")
        assert (done["status"]["phase"], done["spec"]["nodeName"]) == ("Succeeded", "real-1"), done["status"]

        # A batch/v1 Job of 3 completions, applied with kubectl: the Job controller makes its pods, Flotilla binds
        # them, the kubelet runs them; the Job completes 3 of 3.
        job_manifest = tmp_path / "job.yaml"
        job_manifest.write_text(yaml.safe_dump({"apiVersion": "batch/v1", "kind": "Job", "metadata": {
            "name": "three", "labels": {"flotilla.io/queue": "research"}}, "spec": {
            "completions": 3, "parallelism": 2, "backoffLimit": 0, "template": {
                "metadata": {"labels": {"flotilla.io/queue": "research"}}, "spec": {
                    "schedulerName": "flotilla", "restartPolicy": "Never", "dnsPolicy": "Default",
                    "automountServiceAccountToken": False,
                    "containers": [{"name": "c", "image": real_node.image, "command": ["sh", "-c", "echo done"],
                                    "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}}}]}}}}))
        run(kubectl, "--kubeconfig", real_node.kubeconfig, "--context", real_node.context, "-n", namespace,
            "apply", "-f", str(job_manifest), tmp_path=tmp_path)
        ended = real_node.wait(lambda: (j := client.get(f"/apis/batch/v1/namespaces/{namespace}/jobs/three"))
                               ["status"].get("completionTime") or j["status"].get("failed") and j,
                               timeout=300, step=2, what="the Job to complete")
        finished = client.get(f"/apis/batch/v1/namespaces/{namespace}/jobs/three")["status"]
        assert (finished.get("succeeded"), finished.get("failed", 0)) == (3, 0), (ended, finished)
        assert [c["type"] for c in finished["conditions"] if c["status"] == "True"] == ["SuccessCriteriaMet",
                                                                                        "Complete"]
        job_pods = [p for p in real_node.pods(namespace) if p["metadata"]["name"].startswith("three-")]
        assert sorted((p["status"]["phase"], p["spec"]["nodeName"]) for p in job_pods) == [("Succeeded", "real-1")] * 3

        # From outside, through the release's Service (kube-proxy routes its ClusterIP to the pod): a job set submitted, the chart upgraded with a new
        # queue while it runs; the queue appears, and every job succeeds exactly once.
        job = {"podSpec": {"restartPolicy": "Never", "dnsPolicy": "Default", "containers": [{
            "name": "c", "image": real_node.image, "command": ["sh", "-c", "sleep 8"],
            "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"cpu": "50m", "memory": "32Mi"}}}]}}
        jobs = tmp_path / "jobs.yaml"
        jobs.write_text(yaml.safe_dump({"queue": "research", "jobSetId": "across", "jobs": [
            {**job, "clientId": f"j{i}"} for i in range(3)]}))
        ids = flotilla(url, "submit", str(jobs), "--output", "json", tmp_path=tmp_path)["jobs"]
        assert len(ids) == 3
        values = tmp_path / "upgrade.yaml"
        values.write_text(yaml.safe_dump({"config": {"queues": [
            {"name": "research", "weight": 1, "groupOwners": ["research"]},
            {"name": "production", "weight": 3, "groupOwners": ["production"]},
            {"name": "added", "weight": 1}]}}))
        run(helm, "upgrade", "flt", str(CHART), *kube, "--reuse-values", "--values", str(values), tmp_path=tmp_path)
        real_node.wait(lambda: "added" in [q["name"] for q in flotilla(url, "queue", "list", "--output", "json",
                                                                          tmp_path=tmp_path)["queues"]],
                       timeout=240, step=2, what="the upgraded config's queue in flotilla queue list")
        states = real_node.wait(lambda: (rows := flotilla(url, "status", "--job-set", "research", "across", "--output",
                                                          "json", tmp_path=tmp_path)["jobs"])
                                and all(r["state"] in ("succeeded", "failed", "cancelled") for r in rows) and rows,
                                timeout=300, step=2, what="the job set to end")
        assert sorted((r["clientId"], r["state"], r["retries"]) for r in states) == [
            ("j0", "succeeded", 0), ("j1", "succeeded", 0), ("j2", "succeeded", 0)]
        restarts = client.get(pod_path(namespace, standalone))["status"]["containerStatuses"][0]["restartCount"]
        assert restarts == 0

        # helm rollback to the first revision: its ConfigMap lists no "added", the pod reloads it, and the queue
        # (a config queue with no unfinished job) is removed.
        run(helm, "rollback", "flt", "1", *kube, tmp_path=tmp_path)
        real_node.wait(lambda: [q["name"] for q in flotilla(url, "queue", "list", "--output", "json",
                                                            tmp_path=tmp_path)["queues"]] == ["production", "research"],
                       timeout=240, step=2, what="the queue the rollback dropped gone from flotilla queue list")
    finally:
        try:    # its pods go with it (the garbage collector)
            client.delete(f"/apis/batch/v1/namespaces/{namespace}/jobs/three", {"propagationPolicy": "Background"})
        except ApiError:
            pass
        run(helm, "uninstall", "flt", *kube, "--wait", tmp_path=tmp_path, check=False)
        # The release's pod goes with its Deployment (the garbage collector); the test's own pods are deleted.
        for pod in real_node.pods(namespace):
            if pod["metadata"].get("labels", {}).get("app.kubernetes.io/instance") != "flt":
                client.delete(pod_path(namespace, pod["metadata"]["name"]), {"gracePeriodSeconds": 1})
    real_node.wait(lambda: not real_node.pods(namespace), timeout=180, step=1, what="every pod gone")
    real_node.wait(lambda: not [s for s in client.get(f"/api/v1/namespaces/{namespace}/secrets")["items"]
                                if s["metadata"]["name"].startswith(("flt-", "sh.helm.release.v1.flt."))],
                   timeout=60, what="the release's Secrets gone")
    for kind in ("deployments", "configmaps", "services", "serviceaccounts"):
        group = "apis/apps/v1" if kind == "deployments" else "api/v1"
        left = [o["metadata"]["name"] for o in client.get(f"/{group}/namespaces/{namespace}/{kind}")["items"]
                if o["metadata"]["name"].startswith("flt-")]
        assert left == [], (kind, left)
    assert real_node.pods(namespace) == []
    # The store's claim is kept (helm.sh/resource-policy: keep), so a reinstall finds the jobs' history.
    assert [c["metadata"]["name"] for c in client.get(
        f"/api/v1/namespaces/{namespace}/persistentvolumeclaims")["items"]] == ["flt-flotilla-data"]
    leases = client.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases")["items"]
    assert leases == []
    with pytest.raises(ApiError) as gone:
        client.get("/apis/rbac.authorization.k8s.io/v1/clusterroles/flt-flotilla")
    assert gone.value.status == 404
