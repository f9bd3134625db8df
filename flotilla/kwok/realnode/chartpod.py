"""The pod a chart's Deployment would make, made on the real node's cluster, which lacks what makes and runs it.

A cluster a platform team installs Flotilla on runs the Deployment and
ReplicaSet controllers (the Deployment's pod), kube-scheduler (its node),
ServiceAccount admission (its token) and kube-proxy (the ``kubernetes``
Service's address). The real node's cluster runs none of these (its
kube-controller-manager runs :data:`flotilla.kwok.realnode.CONTROLLERS`,
and kube-proxy is not in the toolchain), so :func:`chart_pod` stands in for
them, and only them:

* the pod is the Deployment's template as it is, bound to ``real-1``
  (``nodeName``), named ``DEPLOYMENT-pod``, with the template's labels,
  owned by the Deployment (deleting it, as ``helm uninstall`` does, deletes
  the pod through the garbage collector, which the cluster runs);
* its token is the chart's ServiceAccount's (a TokenRequest, as the kubelet
  asks for a projected token), with the cluster's CA and the namespace, in a
  Secret mounted where ServiceAccount admission mounts them;
* with no kube-proxy to reach the ``kubernetes`` Service, the pod shares the
  host's network and is told the API server's loopback address
  (``KUBERNETES_SERVICE_HOST``/``PORT``); it listens on a loopback port of
  its own, and its probes are left out (they would knock on the chart's
  port);
* its SQLite store's claim is an emptyDir (a claim on a local volume is
  tested in tests/realnode/test_realnode_volumes.py).

Everything else - image, command, config, RBAC, security contexts - is the
chart's, so the pod reads the real API server's objects with the chart's
ServiceAccount under RBAC and binds pods from inside the cluster.
"""

from __future__ import annotations

import time
from urllib.parse import urlparse

import yaml

from flotilla.kwok.realnode import CLUSTER, NODE, RealNode, RealNodeError

#: The loopback port the chart's pod listens on (the host's network: away from the chart's 8080).
LISTEN_PORT = 18431
TOKEN_SECONDS = 24 * 3600


def chart_pod(rn: RealNode, deployment: str, namespace: str, listen_port: int = LISTEN_PORT,
              timeout: float = 240.0) -> str:
    """Make the pod of ``deployment`` (see the module's docstring), wait until it runs; returns its name."""
    from flotilla.kubernetes.client import ApiError, pod_path
    from flotilla.kwok.cluster import workdir

    client = rn.client()
    try:
        try:
            owner = client.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{deployment}")
        except ApiError as exc:
            raise RealNodeError(f"deployment {namespace}/{deployment}: {exc}") from None
        template = owner["spec"]["template"]
        spec = template["spec"]
        # Owned by the Deployment: deleting it (helm uninstall) deletes them, through the garbage collector.
        owned = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment, "uid": owner["metadata"]["uid"],
                  "controller": True, "blockOwnerDeletion": True}]
        account = spec.get("serviceAccountName") or "default"
        token = client.post(f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token", {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": TOKEN_SECONDS}})["status"]["token"]
        secret = f"{deployment}-token"
        body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret, "ownerReferences": owned},
                "stringData": {"token": token, "namespace": namespace,
                               "ca.crt": (workdir(CLUSTER) / "pki" / "ca.crt").read_text()}}
        try:
            client.post(f"/api/v1/namespaces/{namespace}/secrets", body)
        except ApiError as exc:
            if exc.status != 409:
                raise
            client.request("PUT", f"/api/v1/namespaces/{namespace}/secrets/{secret}", body)
        server = urlparse(yaml.safe_load(rn.kubeconfig.read_text())["clusters"][0]["cluster"]["server"])
        spec.update(nodeName=NODE, dnsPolicy="Default", hostNetwork=True)
        (container,) = spec["containers"]
        container["args"] = [*container.get("args", []), "--listen", f"127.0.0.1:{listen_port}"]
        container["ports"] = [{"name": "http", "containerPort": listen_port}]
        container.pop("readinessProbe", None)
        container.pop("livenessProbe", None)
        container["env"] = [*container.get("env", []), {"name": "KUBERNETES_SERVICE_HOST", "value": server.hostname},
                            {"name": "KUBERNETES_SERVICE_PORT", "value": str(server.port)}]
        container["volumeMounts"].append({"name": "token", "readOnly": True,
                                          "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"})
        spec["volumes"] = [v for v in spec["volumes"] if v["name"] != "data"] + [
            {"name": "data", "emptyDir": {}}, {"name": "token", "secret": {"secretName": secret}}]
        name = f"{deployment}-pod"
        client.post(pod_path(namespace), {"apiVersion": "v1", "kind": "Pod", "spec": spec, "metadata": {
            "name": name, "labels": template["metadata"].get("labels", {}), "ownerReferences": owned}})
        deadline = time.monotonic() + timeout
        while (phase := client.get(pod_path(namespace, name))["status"].get("phase")) != "Running":
            if phase in ("Succeeded", "Failed") or time.monotonic() > deadline:
                raise RealNodeError(f"pod {namespace}/{name} is {phase or 'not started'} after "
                                    f"{time.monotonic() - deadline + timeout:.0f}s")
            time.sleep(0.5)
        return name
    finally:
        client.close()
