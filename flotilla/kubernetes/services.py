"""A job's services and ingresses (Armada's ``services`` and ``ingress`` job fields), as Kubernetes objects.

They expose the job's first pod (pod number 0): each is created in the
job's namespace right after that pod, selects it by its job-id and
pod-number labels, and names it as its owner (``ownerReferences``), so the
cluster's garbage collector removes them with the pod. Flotilla also
deletes them itself when the pod goes (a fake cluster runs no garbage
collector): the pod's ``flotilla.io/owned`` annotation lists them.

* ``services``: ``type: NodePort`` (the default) or ``Headless`` (a
  ``ClusterIP: None`` service), on the listed ``ports``;
* ``ingress``: a ``ClusterIP`` service on the listed ``ports`` and an
  ``networking.k8s.io/v1`` Ingress routing to it: one rule per port, host
  ``<pod>-<port>.<ingressDomain>`` when the cluster has an ``ingressDomain``,
  else the path ``/<namespace>/<pod>/<port>``; ``tlsEnabled`` with
  ``certName`` adds TLS for those hosts; ``annotations`` go on the Ingress.

Every port must be a ``containerPort`` of the first pod's containers
(checked at submission).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, Strict

#: The pod annotation listing the objects Flotilla created with it: "services/NAME,ingresses/NAME".
OWNED = "flotilla.io/owned"

Port = Annotated[int, Strict(), Field(ge=1, le=65535)]   # a JSON integer: not "80", true or 80.0


class ServiceSpec(BaseModel):
    """One entry of a job's ``services``."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["NodePort", "Headless"] = "NodePort"
    ports: list[Port] = Field(min_length=1)


class IngressSpec(BaseModel):
    """One entry of a job's ``ingress``."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["Ingress"] = "Ingress"
    ports: list[Port] = Field(min_length=1)
    annotations: dict[str, str] = Field(default_factory=dict)
    tlsEnabled: bool = False
    certName: str | None = None


def exposed_ports(pod_spec: Mapping[str, Any]) -> set[int]:
    return {port.get("containerPort") for container in pod_spec.get("containers") or ()
            for port in container.get("ports") or ()}


def _ports(ports) -> list[dict]:
    return [{"name": f"port-{p}", "port": p, "targetPort": p, "protocol": "TCP"} for p in ports]


def exposure_manifests(pod: Mapping[str, Any], services: list[Mapping], ingresses: list[Mapping],
                       ingress_domain: str | None = None) -> list[tuple[str, dict]]:
    """``(resource, manifest)`` for each object exposing ``pod`` (a pod manifest), without owner references."""
    meta = pod["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    from flotilla.kubernetes.pods import JOB_ID, POD_NUMBER

    labels = dict(meta.get("labels") or {})
    selector = {JOB_ID: labels[JOB_ID], POD_NUMBER: labels.get(POD_NUMBER, "0")}

    def metadata(object_name: str, annotations: Mapping[str, str] | None = None) -> dict:
        out = {"name": object_name, "namespace": namespace, "labels": labels}
        if annotations:
            out["annotations"] = dict(annotations)
        return out

    out: list[tuple[str, dict]] = []
    for k, service in enumerate(services):
        spec: dict[str, Any] = {"selector": selector, "ports": _ports(service["ports"])}
        if service.get("type", "NodePort") == "Headless":
            spec.update(type="ClusterIP", clusterIP="None")
        else:
            spec["type"] = "NodePort"
        out.append(("services", {"apiVersion": "v1", "kind": "Service", "metadata": metadata(f"{name}-svc-{k}"),
                                 "spec": spec}))
    for k, ingress in enumerate(ingresses):
        backing = f"{name}-ing-{k}"
        out.append(("services", {"apiVersion": "v1", "kind": "Service", "metadata": metadata(backing),
                                 "spec": {"type": "ClusterIP", "selector": selector,
                                          "ports": _ports(ingress["ports"])}}))
        rules, hosts = [], []
        for port in ingress["ports"]:
            backend = {"service": {"name": backing, "port": {"number": port}}}
            if ingress_domain:
                host = f"{name}-{port}.{ingress_domain}"
                hosts.append(host)
                rules.append({"host": host, "http": {"paths": [
                    {"path": "/", "pathType": "Prefix", "backend": backend}]}})
            else:
                rules.append({"http": {"paths": [
                    {"path": f"/{namespace}/{name}/{port}", "pathType": "Prefix", "backend": backend}]}})
        spec = {"rules": rules}
        if ingress.get("tlsEnabled") and hosts:
            tls: dict[str, Any] = {"hosts": hosts}
            if ingress.get("certName"):
                tls["secretName"] = ingress["certName"]
            spec["tls"] = [tls]
        out.append(("ingresses", {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                                  "metadata": metadata(backing, ingress.get("annotations")), "spec": spec}))
    return out


def object_path(namespace: str, resource: str, name: str = "") -> str:
    group = "/apis/networking.k8s.io/v1" if resource == "ingresses" else "/api/v1"
    return f"{group}/namespaces/{namespace}/{resource}" + (f"/{name}" if name else "")


def owner_reference(pod: Mapping[str, Any]) -> dict:
    meta = pod["metadata"]
    return {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}


__all__ = ["IngressSpec", "OWNED", "ServiceSpec", "exposed_ports", "exposure_manifests", "object_path",
           "owner_reference"]
