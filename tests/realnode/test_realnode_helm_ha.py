"""deploy/README.md's section "HA with the bundled PostgreSQL", run as written on the real node's cluster, with a
failover between its install and its take-down.

After the walk's first three blocks (the toolchain, Flotilla's image on the node, the storage), the section's
blocks run verbatim in one ``bash``: the PostgreSQL image built and imported, ``helm install`` of
``ci/ha-values.yaml`` with the bundled PostgreSQL and ``ci/small-node-values.yaml``, the three rollouts, ``helm
test``. As on a cluster of one's own, the StatefulSet and Deployment controllers make the pods, kube-scheduler puts
them on ``real-1`` (PostgreSQL's claim binds to the walk's local volume), the roles reach the API server through
the ``kubernetes`` Service and PostgreSQL by its Service's name (kube-proxy, CoreDNS). Then: PostgreSQL, two API
replicas and two schedulers run, one scheduler leads; a job set runs; the leader's pod is deleted while its jobs
run; the standby takes the lead and schedules what is submitted after; every job succeeds exactly once. ``helm
upgrade`` keeps the generated password. The section's take-down block, in the environment the blocks before it
left, leaves no Flotilla object, pod, claim or lease behind. The PostgreSQL image without a password exits at
once, saying what is missing.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from flotilla.kubernetes.client import ApiError, pod_path
from tests.support.helm import run
from tests.support.image import REPO, imported_postgres_image
from tests.support.readme import HA_BUNDLED, WALK, blocks, kept_env, remove_release, run_blocks, said

pytestmark = [pytest.mark.realnode, pytest.mark.image]

CHART = REPO / "deploy" / "helm" / "flotilla"
#: The release and namespace of the README's section.
RELEASE = NAMESPACE = "flotilla"


def flotilla(url: str, *args: str, tmp_path: Path):
    """The CLI against one API replica, as the chart's example admin; its JSON answer."""
    env = {**os.environ, "FLOTILLA_URL": url, "FLOTILLA_TOKEN": "admin-secret", "HOME": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "flotilla.scheduler_main", *args, "--output", "json"],
                            capture_output=True, text=True, env=env, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def leads(address: str) -> bool:
    """Whether the scheduler at ``address`` (its pod's IP and port) reports itself the leader."""
    try:
        text = httpx.get(f"http://{address}/metrics", timeout=5).text
    except httpx.HTTPError:
        return False
    return any(sample.value == 1.0 for family in text_string_to_metric_families(text)
               for sample in family.samples if sample.name == "flotilla_scheduler_leader")


def role_pods(real_node, role: str, count: int, timeout: float = 300) -> dict[str, str]:
    """The release's ``count`` pods of ``role`` once each runs and is ready: name -> IP:port."""
    selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/name={RELEASE}-{role}"

    def find():
        pods = real_node.client.get(pod_path(NAMESPACE), labelSelector=selector)["items"]
        ready = {p["metadata"]["name"]: "{}:{}".format(p["status"]["podIP"],
                                                        p["spec"]["containers"][0]["ports"][0]["containerPort"])
                 for p in pods if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
                 and all(s.get("ready") for s in p["status"].get("containerStatuses") or [{}])}
        return ready if len(ready) == count == len(pods) else None
    return real_node.wait(find, timeout, f"{count} {role} pods running and ready", step=1)


def jobs_file(path: Path, job_set: str, ids: range, image: str) -> Path:
    job = {"podSpec": {"restartPolicy": "Never", "dnsPolicy": "Default", "containers": [{
        "name": "c", "image": image, "command": ["sh", "-c", "sleep 10"],
        "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"cpu": "50m", "memory": "32Mi"}}}]}}
    path.write_text(yaml.safe_dump({"queue": "research", "jobSetId": job_set, "jobs": [
        {**job, "clientId": f"j{i}"} for i in ids]}))
    return path


def test_the_readmes_ha_section_installs_and_survives_the_leaders_pod_deleted_mid_run(real_node, tmp_path):
    walk, section = blocks(WALK)[:3], blocks(HA_BUNDLED)
    assert [block.split()[0] for block in walk] == ["export", "scripts/image", "mkdir"]
    assert [block.split()[0] for block in section] == ["scripts/image", "kubectl"]
    install, take_down = section
    remove_release(real_node, claims=("flotilla-data", "data-flotilla-postgresql-0"))
    left = tmp_path / "env"
    try:
        installed = run_blocks([*walk, install], dict(os.environ), keep=left)
        assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
        expected = ["partitioned roll out complete: 1 new pods have been updated...",
                    'deployment "flotilla-api" successfully rolled out',
                    'deployment "flotilla-scheduler" successfully rolled out',
                    *["TEST SUITE: flotilla-test", "Phase: Succeeded"] * 2]
        lines = said(installed)
        assert [line for line in lines if line in expected] == expected, installed.stdout[-3000:]
        notes = " ".join(installed.stdout.split("NOTES:", 1)[1].split())
        assert ("Its store is the bundled PostgreSQL flotilla-postgresql (a development database, one server; "
                "its password and URL are in the Secret flotilla-postgresql).") in notes
        failover(real_node, tmp_path)
    finally:
        # The jobs' pods the failover submitted go with the take-down's first command, as helm test's do.
        down = run_blocks([take_down], kept_env(left) if left.exists() else dict(os.environ))
    assert down.returncode == 0, down.stdout[-3000:] + down.stderr[-3000:]
    assert 'release "flotilla" uninstalled' in said(down)
    client = real_node.client
    real_node.wait(lambda: not real_node.pods(NAMESPACE), timeout=180, step=1, what="every pod gone")
    for group, kind in (("apis/apps/v1", "deployments"), ("apis/apps/v1", "statefulsets"), ("api/v1", "configmaps"),
                        ("api/v1", "services"), ("api/v1", "serviceaccounts"), ("api/v1", "secrets"),
                        ("api/v1", "persistentvolumeclaims"), ("apis/policy/v1", "poddisruptionbudgets")):
        left_over = [o["metadata"]["name"] for o in client.get(f"/{group}/namespaces/{NAMESPACE}/{kind}")["items"]
                     if o["metadata"]["name"].startswith(("flotilla", "data-flotilla", "sh.helm.release"))]
        assert left_over == [], (kind, left_over)
    assert client.get(f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases")["items"] == []
    for path in ("/apis/rbac.authorization.k8s.io/v1/clusterroles/flotilla", "/api/v1/persistentvolumes/flotilla-store",
                 "/apis/storage.k8s.io/v1/storageclasses/local"):
        with pytest.raises(ApiError) as gone:
            client.get(path)
        assert gone.value.status == 404, path


def failover(real_node, tmp_path: Path) -> None:
    """The installed release: its pods and store as the section says; the leader's pod deleted mid-run loses
    nothing; an upgrade keeps the password and restarts no pod."""
    helm = str(real_node.bin_dir / "helm")
    client = real_node.client
    kube = ("--kubeconfig", str(real_node.kubeconfig), "--kube-context", real_node.context, "--namespace", NAMESPACE)
    apps = f"/apis/apps/v1/namespaces/{NAMESPACE}"
    secret = client.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/flotilla-postgresql")
    url = urlparse(base64.b64decode(secret["data"]["url"]).decode())
    assert (url.scheme, url.username, url.hostname, url.port, url.path) == (
        "postgresql+psycopg", "flotilla", f"flotilla-postgresql.{NAMESPACE}.svc", 5432, "/flotilla")
    assert url.password == base64.b64decode(secret["data"]["password"]).decode()

    assert client.get(f"{apps}/deployments/flotilla-api")["spec"]["replicas"] == 2
    assert client.get(f"{apps}/deployments/flotilla-scheduler")["spec"]["replicas"] == 2
    postgresql = role_pods(real_node, "postgresql", 1)
    assert list(postgresql) == ["flotilla-postgresql-0"]
    claim = client.get(f"/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims/data-flotilla-postgresql-0")
    assert (claim["status"]["phase"], claim["spec"]["volumeName"]) == ("Bound", "flotilla-store")
    apis, addresses = role_pods(real_node, "api", 2), role_pods(real_node, "scheduler", 2)
    for pod in [*postgresql, *apis, *addresses]:
        spec = client.get(pod_path(NAMESPACE, pod))["spec"]
        assert (spec["schedulerName"], spec["nodeName"]) == ("default-scheduler", "real-1"), pod
    schedulers = sorted(addresses)
    leader = real_node.wait(lambda: [p for p in schedulers if leads(addresses[p])], timeout=120, step=1,
                            what="a scheduler to lead")
    assert len(leader) == 1, leader
    (leader,) = leader
    (standby,) = [p for p in schedulers if p != leader]
    api = [f"http://{apis[pod]}" for pod in sorted(apis)]

    # Four jobs through one API replica; once they run, the leader's pod is deleted (SIGTERM, as kubectl
    # delete does) and the standby takes the lead; two more jobs, through the other replica, run under it.
    submitted = flotilla(api[0], "submit", str(jobs_file(tmp_path / "before.yaml", "failover", range(4),
                                                         real_node.image)), tmp_path=tmp_path)["jobs"]
    assert len(submitted) == 4

    def states():
        return {r["clientId"]: r for r in flotilla(api[1], "status", "--job-set", "research", "failover",
                                                   tmp_path=tmp_path)["jobs"]}

    real_node.wait(lambda: any(r["state"] == "running" for r in states().values()), timeout=240, step=1,
                   what="a job of the set running")
    client.delete(pod_path(NAMESPACE, leader))
    real_node.wait(lambda: leads(addresses[standby]), timeout=120, step=1, what=f"the standby {standby} to lead")
    real_node.wait(lambda: not [p for p in real_node.pods(NAMESPACE) if p["metadata"]["name"] == leader],
                   timeout=120, step=1, what=f"the leader's pod {leader} gone")
    submitted += flotilla(api[1], "submit", str(jobs_file(tmp_path / "after.yaml", "failover", range(4, 6),
                                                          real_node.image)), tmp_path=tmp_path)["jobs"]
    ids = {job["clientId"]: job["id"] for job in submitted}
    assert sorted(ids) == [f"j{i}" for i in range(6)] and len(set(ids.values())) == 6
    ended = real_node.wait(lambda: (rows := states()) and all(
        r["state"] in ("succeeded", "failed", "cancelled") for r in rows.values()) and rows,
        timeout=420, step=2, what="the job set to end")
    assert sorted((r["clientId"], r["id"], r["state"], r["retries"], r["node"]) for r in ended.values()) == [
        (f"j{i}", ids[f"j{i}"], "succeeded", 0, "real-1") for i in range(6)]
    assert leads(addresses[standby])
    # No pod has restarted: a role that started ahead of PostgreSQL waited for it (serve --store-wait), its
    # /healthz answering meanwhile. An upgrade keeps the generated password (read back from the Secret): the
    # database made with it still takes it, so no pod restarts across it either.
    def restarts() -> dict[str, int]:
        return {pod: client.get(pod_path(NAMESPACE, pod))["status"]["containerStatuses"][0]["restartCount"]
                for pod in [*apis, *addresses, *postgresql] if pod != leader}
    unrestarted = {pod: 0 for pod in [*apis, *addresses, *postgresql] if pod != leader}
    assert restarts() == unrestarted
    run(helm, "upgrade", RELEASE, str(CHART), *kube, "--reuse-values", tmp_path=tmp_path)
    assert client.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/flotilla-postgresql")["data"] == secret["data"]
    time.sleep(10)
    assert restarts() == unrestarted


def test_the_postgresql_image_without_a_password_exits_naming_what_is_missing(real_node, tmp_path):
    image = imported_postgres_image(tmp_path / "postgresql.oci.tar")
    client, namespace = real_node.client, real_node.namespace
    client.post(pod_path(namespace), {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "no-password"}, "spec": {
        "nodeName": real_node.node, "restartPolicy": "Never", "dnsPolicy": "Default",
        "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 999, "runAsGroup": 999, "fsGroup": 999,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "postgresql", "image": image, "imagePullPolicy": "IfNotPresent",
                        "securityContext": {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
                                            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}},
                        "volumeMounts": [{"name": "data", "mountPath": "/var/lib/postgresql/data"},
                                         {"name": "tmp", "mountPath": "/tmp"}]}],
        "volumes": [{"name": "data", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}]}})
    pod = real_node.wait(lambda: (p := client.get(pod_path(namespace, "no-password")))["status"].get("phase")
                         in ("Succeeded", "Failed") and p, timeout=240, what="the pod to end")
    assert (pod["status"]["phase"],
            pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"]) == ("Failed", 1)
    response = client.pod_log(namespace, "no-password")
    try:
        log = response.read().decode()
    finally:
        response.release_conn()
    assert log == ("postgres-entrypoint: POSTGRES_PASSWORD is empty: give the superuser's password to make the "
                   "cluster in /var/lib/postgresql/data/pgdata\n")
