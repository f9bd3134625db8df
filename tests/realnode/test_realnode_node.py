"""The real node itself: ``scripts/real-node`` brings up ``real-1``, whose kubelet runs the local image.

The scheduling and lifecycle tests through ``flotilla serve`` are in
test_realnode.py; these check the node they stand on.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from flotilla.kubernetes.client import pod_path
from flotilla.kwok.realnode import IMAGE, NODE_LABEL, images
from tests.support.realnode_jobs import bare_pod


@pytest.mark.realnode
def test_real_node_is_ready_and_runs_the_local_image(real_node):
    node = real_node.client.get("/api/v1/nodes/real-1")
    assert real_node.image == IMAGE
    assert real_node.context == "kwok-flotilla-realnode"
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "real-1"
    assert node["metadata"]["labels"][NODE_LABEL] == "true"
    assert "kwok.x-k8s.io/node" not in (node["metadata"].get("annotations") or {})   # kwok-controller leaves it be
    assert real_node.node_ready() == "True"

    ns = real_node.namespace
    real_node.client.post(pod_path(ns), bare_pod("hello", "echo hello; exit 3", real_node.image))
    pod = real_node.wait(lambda: (lambda p: p if p["status"].get("phase") in ("Succeeded", "Failed") else None)(
        real_node.client.get(pod_path(ns, "hello"))), what="pod hello to finish")
    state = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (pod["status"]["phase"], state["exitCode"], state["reason"]) == ("Failed", 3, "Error")
    assert real_node.client.pod_log(ns, "hello").read() == b"hello\n"


def test_busybox_image_links_every_applet_and_is_reproducible(tmp_path):
    from flotilla.kwok.realnode import busybox_path

    try:
        busybox = busybox_path()
    except Exception as exc:  # noqa: BLE001 - not every machine has busybox-static
        pytest.skip(str(exc))
    first = images.busybox_image(tmp_path / "a.tar", "flotilla.local/busybox:1", busybox)
    second = images.busybox_image(tmp_path / "b.tar", "flotilla.local/busybox:1", busybox)
    assert first.read_bytes() == second.read_bytes()
    with tarfile.open(first) as archive:
        manifest = json.load(archive.extractfile("manifest.json"))
        assert manifest[0]["RepoTags"] == ["flotilla.local/busybox:1"]
        with tarfile.open(fileobj=archive.extractfile(manifest[0]["Layers"][0])) as layer:
            members = {m.name: m for m in layer.getmembers()}
    assert members["bin/busybox"].mode == 0o755
    for applet in ("sh", "sleep", "head", "tail", "echo", "kill"):
        assert members[f"bin/{applet}"].issym() and members[f"bin/{applet}"].linkname == "busybox"


def test_max_pods_is_rewritten_in_the_kubelet_config_and_nothing_else(tmp_path):
    from flotilla.kwok.realnode import MAX_PODS, RealNode, RealNodeError, restart_kubelet
    from flotilla.kwok.realnode.config import render, set_max_pods

    rn = RealNode(tmp_path)
    (tmp_path / "config").mkdir()
    config = tmp_path / "config" / "kubelet.yaml"
    config.write_text(render("kubelet.yaml", DIR=str(tmp_path), CGROUP_ROOT="/x", PORT="10250",
                              HEALTHZ_PORT="10248", MAX_PODS=str(MAX_PODS)))
    before = config.read_text().splitlines()
    assert [line for line in before if line.startswith("maxPods:")] == ["maxPods: 110"]
    assert (set_max_pods(rn, 20), set_max_pods(rn, 20)) == (True, False)
    after = config.read_text().splitlines()
    assert [(a, b) for a, b in zip(before, after) if a != b] == [("maxPods: 110", "maxPods: 20")]
    assert len(after) == len(before)
    with pytest.raises(RealNodeError, match=r"^maxPods must be a whole number of pods of at least 1, not 0$"):
        restart_kubelet(rn, max_pods=0)
    with pytest.raises(RealNodeError, match=r"^no real node in /nonexistent \(scripts/real-node start\)$"):
        restart_kubelet(RealNode(Path("/nonexistent")), max_pods=20)
