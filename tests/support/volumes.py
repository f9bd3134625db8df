"""PersistentVolume, PersistentVolumeClaim and StorageClass objects as the API server gives them (claims in
namespace ``ns``), for the Kubernetes volume view and the backend's binding."""

from __future__ import annotations

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def pv(name, node=None, size="1Gi", sc="local", modes=("ReadWriteOnce",), labels=None, claim_ref=None,
       phase="Available"):
    spec = {"capacity": {"storage": size}, "accessModes": list(modes), "storageClassName": sc}
    if node:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": HOST, "operator": "In", "values": [node]}]}]}}
    if claim_ref:
        spec["claimRef"] = {"namespace": claim_ref[0], "name": claim_ref[1]}
    return {"metadata": {"name": name, "labels": labels or {}, "resourceVersion": "7"}, "spec": spec,
            "status": {"phase": phase}}


def pvc(name, sc="local", size="1Gi", modes=("ReadWriteOnce",), volume="", phase="Pending", annotations=None,
        selector=None, deleting=False):
    meta = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "3",
            "annotations": annotations or {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec = {"storageClassName": sc, "accessModes": list(modes), "resources": {"requests": {"storage": size}}}
    if volume:
        spec["volumeName"] = volume
    if selector:
        spec["selector"] = selector
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def storage_class(name, mode="WaitForFirstConsumer", provisioner="kubernetes.io/no-provisioner", topology=None):
    obj = {"metadata": {"name": name}, "provisioner": provisioner, "volumeBindingMode": mode}
    if topology:
        obj["allowedTopologies"] = [{"matchLabelExpressions": [{"key": ZONE, "values": topology}]}]
    return obj
