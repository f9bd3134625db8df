"""A default StorageClass of local volumes on ``real-1``, for charts whose claims name no class.

A cluster of one's own has a default class whose provisioner makes volumes;
the real node's cluster has none, so a test makes what a platform team would
for local disks: a class with no provisioner that binds when the pod is
scheduled (``WaitForFirstConsumer``, so kube-scheduler picks the node first),
marked default, and local PersistentVolumes on ``real-1`` in directories of
the test's own. The persistentvolume-binder controller binds a claim to one.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from flotilla.kubernetes.client import ApiError

CLASSES = "/apis/storage.k8s.io/v1/storageclasses"
PVS = "/api/v1/persistentvolumes"


def storage_class(name: str) -> dict:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": name, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer"}


def local_volume(name: str, storage_class_name: str, path: Path, node: str, size: str = "1Gi") -> dict:
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name}, "spec": {
        "capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"], "storageClassName": storage_class_name,
        "persistentVolumeReclaimPolicy": "Retain", "local": {"path": str(path)},
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}}


@contextmanager
def default_local_storage(real_node, directory: Path, volumes: int = 1, size: str = "1Gi"):
    """The default class ``<namespace>-local`` and ``volumes`` local PVs of ``size`` on real-1 (directories under
    ``directory``, writable by any user: the chart's pods run as non-root); yields the PVs' names. On leaving, the
    claims bound to them (a chart's are kept by ``helm uninstall``), the PVs and the class are deleted."""
    client, namespace = real_node.client, real_node.namespace
    sc = f"{namespace}-local"
    names = [f"{namespace}-pv-{i}" for i in range(volumes)]
    client.post(CLASSES, storage_class(sc))
    try:
        for name in names:
            path = directory / name
            path.mkdir(parents=True)
            path.chmod(0o777)
            client.post(PVS, local_volume(name, sc, path, real_node.node, size))
        yield names
    finally:
        for name in names:
            try:
                ref = client.get(f"{PVS}/{name}")["spec"].get("claimRef")
            except ApiError:
                continue
            if ref:
                try:
                    client.delete(f"/api/v1/namespaces/{ref['namespace']}/persistentvolumeclaims/{ref['name']}")
                except ApiError:
                    pass
            try:
                client.delete(f"{PVS}/{name}")
            except ApiError:
                pass
        try:
            client.delete(f"{CLASSES}/{sc}")
        except ApiError:
            pass
