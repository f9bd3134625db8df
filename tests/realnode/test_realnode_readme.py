"""deploy/README.md's walk from nothing to a job on the real node, run as a reader runs it.

Every ``sh`` block of the section "From nothing to a job on this machine's
real node" runs verbatim, in order, in one ``bash`` (``set -euo pipefail``:
the first command that fails stops it), from the repository's root with this
process's environment, as the README tells its reader (root, the toolchain
on the ``PATH`` it exports). Then: what the commands printed (the Deployment
rolled out, the Job's ``3 of 3 succeeded``, the release uninstalled) and
what they left (no pod, Deployment, Secret or claim of the release in its
namespace, no volume or class of the walk's).
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.support.image import REPO

pytestmark = [pytest.mark.realnode, pytest.mark.image]

README = REPO / "deploy" / "README.md"
SECTION = "## From nothing to a job on this machine's real node"


def walk_blocks(text: str) -> list[str]:
    """The ``sh`` blocks of the walk's section, in order."""
    section = text.split(SECTION + "\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```sh\n(.*?)^```$", section, flags=re.S | re.M)


def test_the_readme_walk_builds_the_image_installs_the_chart_and_runs_a_job_3_of_3(real_node):
    blocks = walk_blocks(README.read_text())
    assert [block.split()[0] for block in blocks] == ["export", "scripts/image", "mkdir", "helm", "kubectl", "kubectl"]
    kube = ["--kubeconfig", real_node.kubeconfig, "--kube-context", real_node.context, "--namespace", "flotilla"]
    # A release an interrupted earlier run left would make `helm install` refuse the name: gone first.
    subprocess.run([str(real_node.bin_dir / "helm"), "uninstall", "flotilla", *kube, "--wait"], capture_output=True,
                   timeout=300)
    real_node.delete_pods("flotilla")
    for args in (("--namespace", "flotilla", "delete", "persistentvolumeclaim", "flotilla-data"),
                 ("delete", "persistentvolume", "flotilla-store"), ("delete", "storageclass", "local")):
        subprocess.run([str(real_node.bin_dir / "kubectl"), "--kubeconfig", real_node.kubeconfig, "--context",
                        real_node.context, "--ignore-not-found", *args], capture_output=True, timeout=300)
    walk = subprocess.run(["bash", "-c", "set -euo pipefail\n" + "\n".join(blocks)], cwd=REPO, capture_output=True,
                          text=True, timeout=3600, env=dict(os.environ))
    assert walk.returncode == 0, walk.stdout[-3000:] + walk.stderr[-3000:]
    # helm test reports each hook of the test (its Secret, then its pod) with its phase.
    expected = ['deployment "flotilla" successfully rolled out', *["TEST SUITE: flotilla-test", "Phase: Succeeded"] * 2,
                "job.batch/hello created", "job.batch/hello condition met", "3 of 3 succeeded",
                'job.batch "hello" deleted from flotilla namespace', 'release "flotilla" uninstalled']
    # helm aligns its test report's values with spaces: compared with single spaces.
    said = [line for line in (" ".join(raw.split()) for raw in walk.stdout.splitlines()) if line in expected]
    assert said == expected, walk.stdout[-3000:]
    client = real_node.client
    # The release's pod is owned by its ReplicaSet, that by its Deployment: the garbage collector removes them.
    real_node.wait(lambda: not real_node.pods("flotilla"), timeout=120, step=1, what="the release's pods gone")
    real_node.wait(lambda: not [s for s in client.get("/api/v1/namespaces/flotilla/secrets")["items"]
                                if s["metadata"]["name"].startswith(("flotilla", "sh.helm.release.v1.flotilla."))],
                   timeout=60, step=1, what="the release's Secrets gone")
    assert client.get("/apis/apps/v1/namespaces/flotilla/deployments")["items"] == []
    assert client.get("/apis/batch/v1/namespaces/flotilla/jobs")["items"] == []
    assert client.get("/api/v1/namespaces/flotilla/persistentvolumeclaims")["items"] == []
    assert [v["metadata"]["name"] for v in client.get("/api/v1/persistentvolumes")["items"]
            if v["metadata"]["name"] == "flotilla-store"] == []
    assert [c["metadata"]["name"] for c in client.get("/apis/storage.k8s.io/v1/storageclasses")["items"]
            if c["metadata"]["name"] == "local"] == []
