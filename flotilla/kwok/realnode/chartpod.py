"""The bundled PostgreSQL and the HA roles' pods of the chart, made by hand on the real node's cluster.

The node's cluster runs the workload controllers, kube-scheduler,
ServiceAccount admission, kube-proxy and DNS, so the chart's default
install (the standalone pod) runs there as on a cluster of one's own
(tests/realnode/test_realnode_helm.py, deploy/README.md's walk). The HA
test (tests/realnode/test_realnode_helm_ha.py) still makes its pods with
this module, on the host's network, each named by the caller:

* a pod is its workload's template as it is (:func:`workload_pod`), bound to
  ``real-1`` (``nodeName``), with the template's labels, owned by the
  workload (deleting it, as ``helm uninstall`` does, deletes the pod through
  the garbage collector);
* its token is the chart's ServiceAccount's (a TokenRequest, as the kubelet
  asks for a projected token), with the cluster's CA and the namespace, in a
  Secret mounted where ServiceAccount admission mounts them
  (:func:`token_secret`);
* on the host's network it is told the API server's loopback address
  (``KUBERNETES_SERVICE_HOST``/``PORT``); it listens on a loopback port the
  caller gives (its one container port becomes that port), and its probes
  are left out (they would knock on the template's port);
* environment variables the caller gives set or replace the container's
  (e.g. a store URL naming the host's loopback instead of a Service's name);
* every claim - a claim volume or a StatefulSet's claim template - is an
  emptyDir.

Everything else - image, command, config, RBAC, security contexts - is the
chart's.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import urlparse

import yaml

from flotilla.kwok.realnode import CLUSTER, NODE, RealNodeError

TOKEN_SECONDS = 24 * 3600
TOKEN_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def api_server(kubeconfig: str | Path) -> str:
    """The API server's URL as ``kubeconfig`` names it (the host's loopback)."""
    return yaml.safe_load(Path(kubeconfig).read_text())["clusters"][0]["cluster"]["server"]


def owner_reference(workload: Mapping) -> dict:
    """The reference a workload's controller puts on what it makes: deleting the workload deletes them."""
    return {"apiVersion": "apps/v1", "kind": workload["kind"], "name": workload["metadata"]["name"],
            "uid": workload["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def token_secret(client, namespace: str, service_account: str, name: str, *, owners: Iterable[dict] = (),
                 seconds: int = TOKEN_SECONDS) -> str:
    """A Secret ``name`` (made, or replaced if there) holding a token of ``service_account`` (a TokenRequest of
    ``seconds``), the cluster's CA and the namespace: what ServiceAccount admission would mount. Returns ``name``."""
    from flotilla.kubernetes.client import ApiError
    from flotilla.kwok.cluster import workdir

    token = client.post(f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": seconds}})["status"]["token"]
    metadata = {"name": name, **({"ownerReferences": list(owners)} if owners else {})}
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": metadata,
            "stringData": {"token": token, "namespace": namespace,
                           "ca.crt": (workdir(CLUSTER) / "pki" / "ca.crt").read_text()}}
    try:
        client.post(f"/api/v1/namespaces/{namespace}/secrets", body)
    except ApiError as exc:
        if exc.status != 409:
            raise
        client.request("PUT", f"/api/v1/namespaces/{namespace}/secrets/{name}", body)
    return name


def workload_pod(workload: Mapping, name: str, *, server: str | None = None, token: str | None = None,
                 env: Mapping[str, str] | None = None, args: Iterable[str] = (), port: int | None = None) -> dict:
    """The pod the workload's controller would make, named ``name``, owned by the workload, bound to real-1 on the
    host's network.

    ``server`` (:func:`api_server`) and ``token`` (a Secret of :func:`token_secret`) give it the API server and its
    ServiceAccount's token; ``env`` sets (or replaces) variables of its one container, ``args`` are appended to its
    arguments, and ``port`` replaces its one container port. Probes are dropped (they name the template's port),
    and every claim template or claim volume becomes an emptyDir."""
    template = copy.deepcopy(workload["spec"]["template"])
    spec = template["spec"]
    spec.update(nodeName=NODE, dnsPolicy="Default", hostNetwork=True)
    (container,) = spec["containers"]
    container["args"] = [*container.get("args", []), *args]
    if port is not None:
        (declared,) = container["ports"]
        container["ports"] = [{**declared, "containerPort": port}]
    container.pop("readinessProbe", None)
    container.pop("livenessProbe", None)
    variables = dict(env or {})
    if server is not None:
        host = urlparse(server)
        variables.update(KUBERNETES_SERVICE_HOST=host.hostname, KUBERNETES_SERVICE_PORT=str(host.port))
    kept = [v for v in container.get("env", []) if v["name"] not in variables]
    container["env"] = kept + [{"name": key, "value": value} for key, value in variables.items()]
    claims = [c["metadata"]["name"] for c in workload["spec"].get("volumeClaimTemplates", [])]
    volumes = [v if "persistentVolumeClaim" not in v else {"name": v["name"], "emptyDir": {}}
               for v in spec.get("volumes", [])]
    volumes += [{"name": claim, "emptyDir": {}} for claim in claims]
    if token is not None:
        container.setdefault("volumeMounts", []).append({"name": "token", "mountPath": TOKEN_MOUNT,
                                                         "readOnly": True})
        volumes.append({"name": "token", "secret": {"secretName": token}})
    spec["volumes"] = volumes
    return {"apiVersion": "v1", "kind": "Pod", "spec": spec, "metadata": {
        "name": name, "labels": template["metadata"].get("labels", {}), "ownerReferences": [owner_reference(workload)]}}


def wait_running(client, namespace: str, name: str, timeout: float = 240.0) -> dict:
    """The pod once Running (its container started); RealNodeError if it ends or is not running by ``timeout``."""
    from flotilla.kubernetes.client import pod_path

    deadline = time.monotonic() + timeout
    while (phase := (pod := client.get(pod_path(namespace, name)))["status"].get("phase")) != "Running":
        if phase in ("Succeeded", "Failed") or time.monotonic() > deadline:
            raise RealNodeError(f"pod {namespace}/{name} is {phase or 'not started'} after "
                                f"{time.monotonic() - deadline + timeout:.0f}s")
        time.sleep(0.5)
    return pod
