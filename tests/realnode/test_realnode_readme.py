"""deploy/README.md's walk from nothing to a job on the real node, and its plain manifests, run as a reader runs them.

Every ``sh`` block of the section "From nothing to a job on this machine's
real node" runs verbatim, in order, in one ``bash`` (``set -euo pipefail``:
the first command that fails stops it), from the repository's root with this
process's environment, as the README tells its reader (root, the toolchain
on the ``PATH`` it exports). Then: what the commands printed (the Deployment
rolled out, the Job's ``3 of 3 succeeded``, the release uninstalled) and
what they left (no pod, Deployment, Secret or claim of the release in its
namespace, no volume or class of the walk's).

The section "HA on your PostgreSQL: the plain manifests" runs the same way
after the walk's first two blocks (the toolchain, the image on the node),
up to its take-down; then the store (the host's PostgreSQL the section
starts) names one of the two schedulers' pods as the leader and the Job's
pods ran where Flotilla bound them; then the take-down block, in the
environment the blocks before it left, and what it left: no namespace,
ClusterRole, binding or PodGroup definition, and the PostgreSQL stopped.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import sqlalchemy as sa

from flotilla.kubernetes.client import ApiError
from tests.support.image import REPO
from tests.support.readme import PLAIN, WALK, blocks, kept_env, remove_release, run_blocks, said

pytestmark = [pytest.mark.realnode, pytest.mark.image]

#: The stand-in for the reader's PostgreSQL the plain manifests' section starts (its FLOTILLA_PG_DIR).
STORE_PG = {"FLOTILLA_PG_DIR": "/tmp/flotilla-store-pg"}


def test_the_readme_walk_builds_the_image_installs_the_chart_and_runs_a_job_3_of_3(real_node):
    walk_blocks = blocks(WALK)
    assert [block.split()[0] for block in walk_blocks] == ["export", "scripts/image", "mkdir", "helm", "kubectl",
                                                           "kubectl"]
    remove_release(real_node, claims=("flotilla-data",))
    walk = run_blocks(walk_blocks, dict(os.environ))
    assert walk.returncode == 0, walk.stdout[-3000:] + walk.stderr[-3000:]
    # helm test reports each hook of the test (its Secret, then its pod) with its phase.
    expected = ['deployment "flotilla" successfully rolled out', *["TEST SUITE: flotilla-test", "Phase: Succeeded"] * 2,
                "job.batch/hello created", "job.batch/hello condition met", "3 of 3 succeeded",
                'job.batch "hello" deleted from flotilla namespace', 'release "flotilla" uninstalled']
    assert [line for line in said(walk) if line in expected] == expected, walk.stdout[-3000:]
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


def test_the_plain_manifests_run_ha_on_the_hosts_postgresql_and_a_job_2_of_2(real_node, tmp_path):
    walk, plain = blocks(WALK)[:2], blocks(PLAIN)
    assert [block.split()[0] for block in walk] == ["export", "scripts/image"]
    assert [block.split()[0] for block in plain] == ["export", "kubectl", "kubectl", "kubectl"]
    *setup, take_down = plain
    client = real_node.client
    kubectl = [str(real_node.bin_dir / "kubectl"), "--kubeconfig", real_node.kubeconfig, "--context", real_node.context]
    # What an interrupted earlier run left would make `create secret` refuse: gone first.
    subprocess.run([*kubectl, "delete", "-f", str(REPO / "deploy"), "--ignore-not-found", "--wait"],
                   capture_output=True, timeout=300)
    subprocess.run(["scripts/postgres-test", "stop"], cwd=REPO, capture_output=True, timeout=120,
                   env={**os.environ, **STORE_PG})
    left = tmp_path / "env"
    ran = run_blocks([*walk, *setup], dict(os.environ), keep=left)
    try:
        assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
        expected = ['deployment "flotilla-api" successfully rolled out',
                    'deployment "flotilla-scheduler" successfully rolled out', "job.batch/hello-ha created",
                    "job.batch/hello-ha condition met", "2 of 2 succeeded"]
        assert [line for line in said(ran) if line in expected] == expected, ran.stdout[-3000:]
        pods = client.get("/api/v1/namespaces/flotilla/pods")["items"]
        schedulers = sorted(p["metadata"]["name"] for p in pods if p["metadata"]["name"].startswith("flotilla-scheduler-")
                            and not p["metadata"].get("deletionTimestamp"))
        jobs = sorted((p["spec"]["schedulerName"], p["spec"]["nodeName"], p["status"]["phase"])
                      for p in pods if p["metadata"].get("labels", {}).get("job-name") == "hello-ha")
        assert (len(schedulers), jobs) == (2, [("flotilla", "real-1", "Succeeded")] * 2), (schedulers, jobs)
        url = subprocess.run(["scripts/postgres-test", "url"], cwd=REPO, capture_output=True, text=True, timeout=60,
                             env={**os.environ, **STORE_PG}).stdout.strip()
        engine = sa.create_engine(url)
        try:
            with engine.connect() as connection:
                holders = connection.execute(sa.text("SELECT holder FROM scheduler_leader")).scalars().all()
        finally:
            engine.dispose()
        # The holder is POD_NAME-PID-RANDOM (election.default_identity).
        assert [holder.rsplit("-", 2)[0] in schedulers for holder in holders] == [True], (holders, schedulers)
    finally:
        down = run_blocks([take_down], kept_env(left) if left.exists() else {**os.environ, **STORE_PG})
    assert down.returncode == 0, down.stdout[-3000:] + down.stderr[-3000:]
    assert 'namespace "flotilla" deleted' in down.stdout.splitlines()
    for path in ("/api/v1/namespaces/flotilla", "/apis/rbac.authorization.k8s.io/v1/clusterroles/flotilla",
                 "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/flotilla",
                 "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/podgroups.scheduling.volcano.sh"):
        with pytest.raises(ApiError) as gone:
            client.get(path)
        assert gone.value.status == 404, path
    assert not Path(STORE_PG["FLOTILLA_PG_DIR"]).exists()
