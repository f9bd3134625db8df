"""The chart installed with ``helm install`` on the real node's cluster, its standalone pod running the image of
``scripts/image`` on ``real-1``: from inside, with the chart's ServiceAccount (the API server authorizes with
RBAC), it binds a pod made with kubectl (``schedulerName: flotilla``, the queue label) in the release's namespace,
which runs to completion, and the pods of a kubectl ``batch/v1`` Job of 3 completions, which succeeds 3 of 3 (the
cluster's Job controller makes its pods); ``flotilla`` from outside submits a job set, ``helm upgrade`` adds a
queue while it runs, ``flotilla queue list`` shows the queue and every job succeeds once; ``helm rollback`` to the
first revision removes the queue again (a config queue with no unfinished job); ``helm uninstall`` leaves no
Flotilla object, pod or lease behind.

What the node's cluster lacks is stood in for, and only that: no Deployment and ReplicaSet controllers, no
kube-scheduler, no ServiceAccount admission and no kube-proxy, so the standalone pod is made from the Deployment's
own template by :func:`flotilla.kwok.realnode.chartpod.chart_pod` (``scripts/real-node chart-pod``, which
deploy/README.md's walk runs too): bound to ``real-1``, owned by the Deployment, with a token of the chart's
ServiceAccount at the usual path, on the host's network reaching the API server on its loopback address, its
SQLite store's claim an emptyDir (the claim itself is tested with a local volume in test_realnode_volumes.py).
The Job, garbage-collector and ttl-after-finished controllers are the real ones
(:data:`flotilla.kwok.realnode.CONTROLLERS`).
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
from flotilla.kwok.realnode import node
from flotilla.kwok.realnode.chartpod import LISTEN_PORT, chart_pod
from tests.support.image import REPO, imported_image

pytestmark = [pytest.mark.realnode, pytest.mark.image]

CHART = REPO / "deploy" / "helm" / "flotilla"


def run(*args: str, tmp_path: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "HELM_CACHE_HOME": str(tmp_path / "helm-cache"),
           "HELM_CONFIG_HOME": str(tmp_path / "helm-config"), "HELM_DATA_HOME": str(tmp_path / "helm-data")}
    result = subprocess.run(list(args), capture_output=True, text=True, env=env, timeout=300)
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


def flotilla(*args: str, tmp_path: Path):
    """The CLI against the standalone pod's API, as the chart's example admin; its JSON answer."""
    env = {**os.environ, "FLOTILLA_URL": f"http://127.0.0.1:{LISTEN_PORT}", "FLOTILLA_TOKEN": "admin-secret",
           "HOME": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "flotilla.scheduler_main", *args], capture_output=True,
                            text=True, env=env, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def test_helm_install_runs_flotilla_on_real_1_and_uninstall_leaves_nothing(real_node, tmp_path):
    image = imported_image(tmp_path / "flotilla.oci.tar")
    bin_dir = real_node.bin_dir
    helm, kubectl = str(bin_dir / "helm"), str(bin_dir / "kubectl")
    client, namespace = real_node.client, real_node.namespace
    kube = ("--kubeconfig", real_node.kubeconfig, "--kube-context", real_node.context, "--namespace", namespace)
    name, tag = image.rsplit(":", 1)
    run(helm, "install", "flt", str(CHART), *kube, "--set", f"image.repository={name}", "--set", f"image.tag={tag}",
        "--set", "standalone.persistence.existingClaim=unused", tmp_path=tmp_path)
    try:
        config = yaml.safe_load(client.get(f"/api/v1/namespaces/{namespace}/configmaps/flt-flotilla-config")
                                ["data"]["config.yaml"])
        assert [(q["name"], q["namespaces"]) for q in config["queues"]] == [("research", [namespace]),
                                                                            ("production", [namespace])]
        standalone = chart_pod(node(), "flt-flotilla", namespace, LISTEN_PORT)

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

        # From outside (the pod listens on the host's loopback): a job set submitted, the chart upgraded with a new
        # queue while it runs; the queue appears, and every job succeeds exactly once.
        job = {"podSpec": {"restartPolicy": "Never", "dnsPolicy": "Default", "containers": [{
            "name": "c", "image": real_node.image, "command": ["sh", "-c", "sleep 8"],
            "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"cpu": "50m", "memory": "32Mi"}}}]}}
        jobs = tmp_path / "jobs.yaml"
        jobs.write_text(yaml.safe_dump({"queue": "research", "jobSetId": "across", "jobs": [
            {**job, "clientId": f"j{i}"} for i in range(3)]}))
        ids = flotilla("submit", str(jobs), "--output", "json", tmp_path=tmp_path)["jobs"]
        assert len(ids) == 3
        values = tmp_path / "upgrade.yaml"
        values.write_text(yaml.safe_dump({"config": {"queues": [
            {"name": "research", "weight": 1, "groupOwners": ["research"]},
            {"name": "production", "weight": 3, "groupOwners": ["production"]},
            {"name": "added", "weight": 1}]}}))
        run(helm, "upgrade", "flt", str(CHART), *kube, "--reuse-values", "--values", str(values), tmp_path=tmp_path)
        real_node.wait(lambda: "added" in [q["name"] for q in flotilla("queue", "list", "--output", "json",
                                                                          tmp_path=tmp_path)["queues"]],
                       timeout=240, step=2, what="the upgraded config's queue in flotilla queue list")
        states = real_node.wait(lambda: (rows := flotilla("status", "--job-set", "research", "across", "--output",
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
        real_node.wait(lambda: [q["name"] for q in flotilla("queue", "list", "--output", "json",
                                                            tmp_path=tmp_path)["queues"]] == ["production", "research"],
                       timeout=240, step=2, what="the queue the rollback dropped gone from flotilla queue list")
    finally:
        try:    # its pods go with it (the garbage collector)
            client.delete(f"/apis/batch/v1/namespaces/{namespace}/jobs/three", {"propagationPolicy": "Background"})
        except ApiError:
            pass
        real_node.delete_pods(namespace)
        run(helm, "uninstall", "flt", *kube, "--wait", tmp_path=tmp_path, check=False)
    # The token Secret the stand-in made, owned by the Deployment, goes with it (the garbage collector).
    real_node.wait(lambda: not [s for s in client.get(f"/api/v1/namespaces/{namespace}/secrets")["items"]
                                if s["metadata"]["name"].startswith(("flt-", "sh.helm.release.v1.flt."))],
                   timeout=60, what="the release's Secrets gone")
    for kind in ("deployments", "configmaps", "services", "serviceaccounts"):
        group = "apis/apps/v1" if kind == "deployments" else "api/v1"
        left = [o["metadata"]["name"] for o in client.get(f"/{group}/namespaces/{namespace}/{kind}")["items"]
                if o["metadata"]["name"].startswith("flt-")]
        assert left == [], (kind, left)
    assert real_node.pods(namespace) == []
    leases = client.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases")["items"]
    assert leases == []
    with pytest.raises(ApiError) as gone:
        client.get("/apis/rbac.authorization.k8s.io/v1/clusterroles/flt-flotilla")
    assert gone.value.status == 404
