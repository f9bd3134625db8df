"""The real node's cluster runs workloads as a cluster of one's own does: a Deployment and a StatefulSet of one
replica each make their pods (kube-controller-manager's deployment, replicaset and statefulset controllers),
kube-scheduler binds them to ``real-1``, ServiceAccount admission gives them the namespace's ``default`` account
and its token volume, and the kubelet mounts the token, the namespace and the cluster's CA at
``/var/run/secrets/kubernetes.io/serviceaccount``. The token is one the API server accepts for that account.
"""

from __future__ import annotations

import pytest

from flotilla.kubernetes.client import ApiError

pytestmark = pytest.mark.realnode

MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
#: What each pod prints once: the mount's files, the namespace it holds, the token, then the CA (PEM).
SCRIPT = (f"cd {MOUNT} && ls && echo \"namespace=$(cat namespace)\" && echo \"token=$(cat token)\" && cat ca.crt "
          "&& exec sleep 3600")


def _template(real_node, app: str) -> dict:
    return {"metadata": {"labels": {"app": app}}, "spec": {
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "main", "image": real_node.image, "imagePullPolicy": "Never",
                        "command": ["sh", "-c", SCRIPT],
                        "resources": {"limits": {"cpu": "100m", "memory": "32Mi"}}}]}}


def _running(real_node, app: str) -> dict:
    def find():
        pods = real_node.client.get(f"/api/v1/namespaces/{real_node.namespace}/pods",
                                    labelSelector=f"app={app}")["items"]
        running = [p for p in pods if p["status"].get("phase") == "Running"
                   and all(s.get("ready") for s in p["status"].get("containerStatuses") or [{}])]
        return running[0] if len(pods) == 1 and running else None
    return real_node.wait(find, 180, f"the one pod of {app} running", step=0.5)


def _printed(real_node, name: str) -> dict:
    def read():
        try:
            response = real_node.client.pod_log(real_node.namespace, name)
        except ApiError:
            return None
        try:
            text = response.read().decode()
        finally:
            response.release_conn()
        return text if "-----END CERTIFICATE-----" in text else None
    text = real_node.wait(read, 60, f"pod {name}'s output")
    lines = text.splitlines()
    return {"files": lines[:3], "namespace": lines[3], "token": lines[4], "ca": "\n".join(lines[5:]) + "\n"}


def _user(real_node, token: str) -> str:
    review = real_node.client.post("/apis/authentication.k8s.io/v1/tokenreviews", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})
    assert review["status"].get("authenticated") is True, review["status"]
    return review["status"]["user"]["username"]


def _delete_and_wait(real_node, path: str) -> None:
    """Delete a workload in the foreground (its pods first, by the garbage collector) and wait until it is gone."""
    try:
        real_node.client.delete(path, {"propagationPolicy": "Foreground"})
    except ApiError as exc:
        if exc.status != 404:
            raise

    def gone():
        try:
            real_node.client.get(path)
            return False
        except ApiError as exc:
            return exc.status == 404
    real_node.wait(gone, 120, f"{path} deleted", step=0.5)


def test_a_deployment_and_a_statefulset_run_on_real_1_with_the_service_account_token(real_node):
    client, namespace = real_node.client, real_node.namespace
    apps = f"/apis/apps/v1/namespaces/{namespace}"
    deployment, statefulset = f"{apps}/deployments/web", f"{apps}/statefulsets/db"
    try:
        client.post(f"{apps}/deployments", {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": _template(real_node, "web")}})
        client.post(f"/api/v1/namespaces/{namespace}/services", {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "db"},
            "spec": {"clusterIP": "None", "selector": {"app": "db"}, "ports": [{"port": 80}]}})
        client.post(f"{apps}/statefulsets", {
            "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
            "spec": {"replicas": 1, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                     "template": _template(real_node, "db")}})

        ca = client.get(f"/api/v1/namespaces/{namespace}/configmaps/kube-root-ca.crt")["data"]["ca.crt"]
        web, db = _running(real_node, "web"), _running(real_node, "db")
        [replicaset] = client.get(f"{apps}/replicasets", labelSelector="app=web")["items"]
        owners = {pod["metadata"]["name"]: [(o["kind"], o["name"]) for o in pod["metadata"]["ownerReferences"]]
                  for pod in (web, db)}
        assert owners == {web["metadata"]["name"]: [("ReplicaSet", replicaset["metadata"]["name"])],
                          "db-0": [("StatefulSet", "db")]}
        assert [(o["kind"], o["name"]) for o in replicaset["metadata"]["ownerReferences"]] == [("Deployment", "web")]
        for pod in (web, db):
            spec = pod["spec"]
            scheduled = [c["status"] for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
            assert (spec["schedulerName"], spec["nodeName"], scheduled) == ("default-scheduler", "real-1", ["True"])
            assert spec["serviceAccountName"] == "default"
            [token_volume] = [v for v in spec["volumes"] if v["name"].startswith("kube-api-access-")]
            sources = [next(iter(set(s) - {"defaultMode"})) for s in token_volume["projected"]["sources"]]
            assert sources == ["serviceAccountToken", "configMap", "downwardAPI"]
            assert [m["mountPath"] for m in spec["containers"][0]["volumeMounts"]] == [MOUNT]
            printed = _printed(real_node, pod["metadata"]["name"])
            assert (printed["files"], printed["namespace"]) == (["ca.crt", "namespace", "token"], f"namespace={namespace}")
            assert printed["ca"] == ca
            assert printed["token"].startswith("token=")
            assert _user(real_node, printed["token"][len("token="):]) == f"system:serviceaccount:{namespace}:default"
        ready = lambda: (client.get(deployment)["status"].get("readyReplicas"),  # noqa: E731
                         client.get(statefulset)["status"].get("readyReplicas"))
        real_node.wait(lambda: ready() == (1, 1), 60, "both workloads' status at 1 ready replica", step=0.5)
        assert ready() == (1, 1)
    finally:
        _delete_and_wait(real_node, deployment)
        _delete_and_wait(real_node, statefulset)
        try:
            client.delete(f"/api/v1/namespaces/{namespace}/services/db")
        except ApiError:
            pass
