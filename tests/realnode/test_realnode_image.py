"""Flotilla's image as ``scripts/image`` builds it (Debian's packages and the project's wheel, no registry): its
OCI archive loads into the real node's containerd with ``ctr images import``, and a pod on ``real-1`` running it
under the chart's security contexts (uid 65532, read-only root, no capabilities, seccomp) prints the package's
version.

The build takes minutes the first time (mmdebstrap, PyPI); later ones reuse ~/.cache/flotilla/image.
"""

from __future__ import annotations

import time

import pytest

import flotilla
from flotilla.kubernetes.client import pod_path
from tests.support.image import build_and_import

pytestmark = [pytest.mark.realnode, pytest.mark.image]


def test_the_images_flotilla_version_is_the_packages(real_node, tmp_path):
    image = build_and_import(tmp_path / "flotilla.oci.tar")
    client, namespace = real_node.client, real_node.namespace
    client.post(pod_path(namespace), {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "version"}, "spec": {
        "nodeName": real_node.node, "restartPolicy": "Never", "dnsPolicy": "Default",
        "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "flotilla", "image": image, "imagePullPolicy": "IfNotPresent", "args": ["--version"],
                        "securityContext": {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
                                            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}}]}})
    deadline = time.monotonic() + 180
    while (phase := client.get(pod_path(namespace, "version"))["status"].get("phase")) not in ("Succeeded", "Failed"):
        assert time.monotonic() < deadline, f"pod still {phase}"
        time.sleep(0.5)
    pod = client.get(pod_path(namespace, "version"))
    assert phase == "Succeeded", pod["status"]
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    response = client.pod_log(namespace, "version")
    try:
        log = response.read().decode()
    finally:
        response.release_conn()
    assert log == f"flotilla, version {flotilla.__version__}\n"
