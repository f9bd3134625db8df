"""The chart's workloads run on the real node's cluster, which has no controllers to run them.

The node's cluster runs no Deployment or StatefulSet controller and no kube-scheduler, so a test makes each pod a
controller would, from the workload's own template, bound to ``real-1``. It has no ServiceAccount admission (KWOK
turns it off), no kube-proxy and no cluster DNS, so a pod gets a token of the chart's ServiceAccount (TokenRequest)
at the usual path, runs on the host's network and reaches the API server on the host's loopback
(``KUBERNETES_SERVICE_HOST``), and each pod listens on a port of its own there. A claim template becomes an
emptyDir (claims themselves are tested with a local volume in test_realnode_volumes.py). The pods are owned by
their workloads, so ``helm uninstall`` deletes them through the garbage collector, as in any cluster.
"""

from __future__ import annotations

import copy
import os
import subprocess
from pathlib import Path
from urllib.parse import urlparse

import yaml

from flotilla.kubernetes.client import pod_path

TOKEN_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def run(*args: str, tmp_path: Path, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    """A helm or kubectl command, helm's caches and config under ``tmp_path``."""
    env = {**os.environ, "HELM_CACHE_HOME": str(tmp_path / "helm-cache"),
           "HELM_CONFIG_HOME": str(tmp_path / "helm-config"), "HELM_DATA_HOME": str(tmp_path / "helm-data")}
    result = subprocess.run(list(args), capture_output=True, text=True, env=env, timeout=timeout)
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


def api_server(real_node) -> str:
    """The API server's URL as the kubeconfig names it (the host's loopback)."""
    return yaml.safe_load(Path(real_node.kubeconfig).read_text())["clusters"][0]["cluster"]["server"]


def token_secret(real_node, service_account: str, name: str, tmp_path: Path) -> str:
    """A Secret ``name`` holding a token of ``service_account`` (TokenRequest, one hour), the cluster's CA and the
    namespace: what ServiceAccount admission would mount."""
    from flotilla.kwok.cluster import workdir

    token = run(str(real_node.bin_dir / "kubectl"), "--kubeconfig", str(real_node.kubeconfig), "--context",
                real_node.context, "-n", real_node.namespace, "create", "token", service_account, "--duration", "1h",
                tmp_path=tmp_path).stdout.strip()
    ca = (workdir("flotilla-realnode") / "pki" / "ca.crt").read_text()
    real_node.client.post(f"/api/v1/namespaces/{real_node.namespace}/secrets", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
        "stringData": {"token": token, "ca.crt": ca, "namespace": real_node.namespace}})
    return name


def workload_pod(workload: dict, name: str, *, server: str | None = None, token: str | None = None,
                 env: dict[str, str] | None = None, args: list[str] = (), port: int | None = None) -> dict:
    """The pod the workload's controller would make, named ``name``, owned by the workload, bound to real-1 on the
    host's network.

    ``server`` and ``token`` (a Secret from :func:`token_secret`) give it the API server and its ServiceAccount's
    token; ``env`` sets (or replaces) variables of its one container, ``args`` are appended to its arguments, and
    ``port`` replaces its one container port. Probes are dropped (they name the template's port), and every claim
    template or claim volume becomes an emptyDir."""
    template = copy.deepcopy(workload["spec"]["template"])
    spec = template["spec"]
    spec.update(nodeName="real-1", dnsPolicy="Default", hostNetwork=True)
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
        container["volumeMounts"].append({"name": "token", "mountPath": TOKEN_MOUNT, "readOnly": True})
        volumes.append({"name": "token", "secret": {"secretName": token}})
    spec["volumes"] = volumes
    # Owned by the workload, as its controller's pods are: deleting it (helm uninstall) deletes them, through the
    # garbage collector the node's cluster runs.
    owner = {"apiVersion": "apps/v1", "kind": workload["kind"], "name": workload["metadata"]["name"],
             "uid": workload["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": template["metadata"]["labels"],
                                                            "ownerReferences": [owner]}, "spec": spec}


def running(real_node, name: str, timeout: float = 240) -> dict:
    """The pod once Running (its container started), after the kubelet pulled nothing and started it."""
    client, namespace = real_node.client, real_node.namespace
    return real_node.wait(lambda: (pod := client.get(pod_path(namespace, name)))["status"].get("phase") == "Running"
                          and pod, timeout=timeout, what=f"pod {name} running")
