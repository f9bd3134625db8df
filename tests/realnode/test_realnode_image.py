"""Flotilla's image as ``scripts/image`` builds it (Debian's packages and the project's wheel, no registry): its
OCI archive loads into the real node's containerd with ``ctr images import``, and a pod on ``real-1`` running it
under the chart's security contexts (uid 65532, read-only root, no capabilities, seccomp) prints the package's
version.

The build takes minutes the first time (mmdebstrap, PyPI); later ones reuse ~/.cache/flotilla/image.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

import flotilla
from flotilla.kubernetes.client import pod_path

pytestmark = [pytest.mark.realnode, pytest.mark.image]

REPO = Path(__file__).resolve().parents[2]
TAG = f"flotilla.local/flotilla:{flotilla.__version__}"


def build_and_import(out: Path) -> str:
    """Build the archive into ``out``, import it into real-1's containerd; the image's name."""
    from flotilla.kwok.realnode import node

    built = subprocess.run([str(REPO / "scripts" / "image"), "--out", str(out)], capture_output=True, text=True,
                           timeout=3600, cwd=REPO)
    assert built.returncode == 0, built.stderr[-4000:]
    assert built.stdout.strip() == str(out)
    ctr = ["ctr", "--address", str(node().socket), "-n", "k8s.io", "images"]
    imported = subprocess.run([*ctr, "import", str(out)], capture_output=True, text=True, timeout=600)
    assert imported.returncode == 0, imported.stderr
    assert TAG in subprocess.run([*ctr, "ls", "-q"], capture_output=True, text=True, check=True).stdout.split()
    return TAG


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
