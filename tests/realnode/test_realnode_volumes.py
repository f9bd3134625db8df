"""A WaitForFirstConsumer local volume on the real kubelet: Flotilla binds the claim to the node's PV before the
pod, the kubelet mounts it, and the job's write lands in the PV's directory on this machine.

The node is ``real-1`` (``scripts/real-node``, whose kube-controller-manager runs the persistentvolume-binder
controller); the job goes through the service's store and loop, in this process (tests/kwok/test_kwok_incluster.py's
harness).
"""

from __future__ import annotations

import time

import pytest
from tests.support.service import job_file
from tests.support.incluster import Harness
from tests.support.realnode_jobs import busybox

from flotilla.service.jobspec import prepare

pytestmark = pytest.mark.realnode

PVS = "/api/v1/persistentvolumes"
CLASSES = "/apis/storage.k8s.io/v1/storageclasses"


def test_a_wait_for_first_consumer_local_volume_is_bound_then_mounted_and_written(real_node, tmp_path):
    client, namespace = real_node.client, real_node.namespace
    directory = tmp_path / "pv"
    directory.mkdir()
    directory.chmod(0o777)
    sc, pv = f"{namespace}-local", f"{namespace}-pv"
    client.post(CLASSES, {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": sc},
                          "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer"})
    client.post(PVS, {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv}, "spec": {
        "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": sc,
        "persistentVolumeReclaimPolicy": "Retain", "local": {"path": str(directory)},
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [real_node.node]}]}]}}}})
    client.post(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims", {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": namespace},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": sc,
                 "resources": {"requests": {"storage": "1Gi"}}}})
    h = Harness(tmp_path, real_node)
    try:
        job = busybox(real_node, "echo written-by-the-job > /data/out",
                      container={"volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                      volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}])
        job.update(clientId="writer", namespace=namespace)
        _, new = prepare(job_file("A", "s", [job]), h.settings)
        assert new[0].pods[0].claims == [f"{namespace}/data"]
        [submitted] = h.store.submit("A", "s", "alice", new)
        job_id = submitted.id
        deadline = time.monotonic() + 180
        while h.store.get_job(job_id)["state"] not in ("succeeded", "failed") \
                and time.monotonic() < deadline:
            h.cycle()
            time.sleep(0.5)
        record = h.store.get_job(job_id)
        assert (record["state"], record["node"]) == ("succeeded", real_node.node), record
        claim = client.get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/data")
        assert (claim["spec"]["volumeName"], claim["status"]["phase"]) == (pv, "Bound")
        assert (directory / "out").read_text() == "written-by-the-job\n"
    finally:
        h.close()
        for path in (f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/data", f"{PVS}/{pv}", f"{CLASSES}/{sc}"):
            try:
                client.delete(path)
            except Exception:  # noqa: BLE001 - cleanup of a test's own objects
                pass
