"""Least privilege: Flotilla as the ServiceAccount of ``deploy/rbac.yaml`` on a KWOK API server with RBAC on.

The fake clusters' API servers authorize with RBAC (kwokctl's default); the
tests' own client is a cluster admin. The ServiceAccount's token comes from
the TokenRequest API and reaches Flotilla through the official client's
in-cluster loader (a token file, a CA file, ``KUBERNETES_SERVICE_HOST``
and ``_PORT``), as in a pod, and through a kubeconfig for ``flotilla serve``.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml
from tests.support.serve import Server, cli, wait_for, write_file
from tests.support.kwok_serve import CONFIG

from flotilla.core.backend import ClusterDecisions, PodTemplate
from flotilla.core.decisions import Placement
from flotilla.core.model import Job
from flotilla.kubernetes.backend import KubernetesCluster
from flotilla.kubernetes.client import ApiError, KubeClient

pytestmark = pytest.mark.kwok

RBAC = Path(__file__).resolve().parents[2] / "deploy" / "rbac.yaml"
PATHS = {"ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
         "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
         "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"}


def apply_rbac(cluster, without: tuple[str, str] | None = None) -> None:
    """Create or replace deploy/rbac.yaml's objects; ``without``: (resource, verb) taken out of the ClusterRole."""
    cluster.create_namespace("flotilla")
    for doc in yaml.safe_load_all(RBAC.read_text()):
        if doc["kind"] == "ClusterRole" and without is not None:
            for rule in doc["rules"]:
                if without[0] in rule["resources"]:
                    rule["verbs"] = [v for v in rule["verbs"] if v != without[1]]
            doc["rules"] = [rule for rule in doc["rules"] if rule["verbs"]]
        path = PATHS[doc["kind"]].format(ns=doc["metadata"].get("namespace", ""))
        try:
            cluster.client.post(path, doc)
        except ApiError as exc:
            assert exc.status == 409, exc
            current = cluster.client.get(f"{path}/{doc['metadata']['name']}")
            doc["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            cluster.client.request("PUT", f"{path}/{doc['metadata']['name']}", doc)


def service_account_token(cluster) -> str:
    answer = cluster.client.post("/api/v1/namespaces/flotilla/serviceaccounts/flotilla/token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}})
    return answer["status"]["token"]


def in_cluster_files(cluster, tmp_path) -> tuple[str, str, dict]:
    """What a pod of the ServiceAccount would have: token and CA files, and the service host and port."""
    token = tmp_path / "token"
    token.write_text(service_account_token(cluster))
    url = urlparse(cluster.client.configuration.host)
    return str(token), cluster.client.configuration.ssl_ca_cert, \
        {"KUBERNETES_SERVICE_HOST": url.hostname, "KUBERNETES_SERVICE_PORT": str(url.port)}


def template(**extra) -> PodTemplate:
    spec = {"containers": [{"name": "web", "image": "nginx", "ports": [{"containerPort": 8080}],
                            "resources": {"limits": {"cpu": "1"}}}]}
    return PodTemplate(spec, "team-a", {"team": "ml"}, {}, 0, **extra)


def test_the_service_account_of_deploy_rbac_runs_the_workloads_in_cluster(kwok, tmp_path):
    cluster = kwok["b"]
    cluster.create_namespace("team-a")
    apply_rbac(cluster)
    token, ca, environ = in_cluster_files(cluster, tmp_path)
    backends = [KubernetesCluster(f"rbac-{bind}", KubeClient.from_in_cluster(token, ca, environ), bind=bind,
                                  priority_classes=[("rbac-test", 1000, True)]) for bind in ("node-name", "binding")]
    try:
        for b in backends:
            assert b.wait_synced(30), b.health.error
        plain, binding = backends
        short = Job("short", "A", priority_class="rbac-test", requests={"cpu": 1000},
                    annotations={"flotilla.io/simulated-duration": "1s"})
        web = Job("web", "A", requests={"cpu": 1000}, annotations={"flotilla.io/simulated-duration": "600s"})
        bound = Job("bound", "A", requests={"cpu": 1000}, annotations={"flotilla.io/simulated-duration": "600s"})
        plain.apply(ClusterDecisions(start=[Placement(short, plain.name, "node-1"), Placement(web, plain.name, "node-2")],
                                     templates={"short": template(),
                                                "web": template(services=({"type": "NodePort", "ports": [8080]},),
                                                                ingresses=({"ports": [8080]},))}))
        binding.apply(ClusterDecisions(start=[Placement(bound, binding.name, "node-1")],
                                       templates={"bound": template()}))
        events: list = []
        wait_for(lambda: events.extend(plain.poll_events()) or {("short", "succeeded"), ("web", "running")} <=
                 {(e.job_id, e.kind) for e in events}, timeout=30)
        wait_for(lambda: ("bound", "running") in {(e.job_id, e.kind) for e in binding.poll_events()}, timeout=30)
        services = cluster.client.get("/api/v1/namespaces/team-a/services")["items"]
        ingresses = cluster.client.get("/apis/networking.k8s.io/v1/namespaces/team-a/ingresses")["items"]
        assert sorted(o["metadata"]["name"] for o in services + ingresses) == \
            ["flotilla-web-0-ing-0", "flotilla-web-0-ing-0", "flotilla-web-0-svc-0"]
        assert cluster.client.get("/apis/scheduling.k8s.io/v1/priorityclasses/rbac-test")["value"] == 1000

        plain.apply(ClusterDecisions(preempt=[web]))
        binding.apply(ClusterDecisions(cancel=[bound]))
        wait_for(lambda: events.extend(plain.poll_events()) or ("web", "preempted") in
                 {(e.job_id, e.kind) for e in events}, timeout=30)
        # The services go with the preempted pod's delete; under load this wait has taken over 30 s.
        wait_for(lambda: not cluster.client.get("/api/v1/namespaces/team-a/services")["items"], timeout=90)
        assert [e.kind for e in events if e.job_id == "web"] == ["running", "preempted"]
        # Both backends watch the same cluster, so `plain` also sees `bound`, which `binding` leased and
        # cancelled: from plain's side that pod was deleted by someone else. Only plain's own jobs count here.
        assert [(e.job_id, e.kind) for e in events if e.job_id in ("short", "web") and e.kind == "lost"] == []
    finally:
        for b in backends:
            b.close()


def test_a_missing_verb_is_one_error_naming_it_and_the_job_is_kept(kwok, tmp_path):
    cluster = kwok["b"]
    cluster.create_namespace("team-a")
    apply_rbac(cluster, without=("pods", "create"))
    kubeconfig = tmp_path / "sa.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "kwok", "cluster": {"server": cluster.client.configuration.host,
                                                  "certificate-authority": cluster.client.configuration.ssl_ca_cert}}],
        "users": [{"name": "flotilla", "user": {"token": service_account_token(cluster)}}],
        "contexts": [{"name": "sa", "context": {"cluster": "kwok", "user": "flotilla"}}]}))
    srv = Server(tmp_path, CONFIG.replace("maxRetries: 3", "maxRetries: 100")
                 + f"  - {{name: b, kind: kubernetes, kubeconfig: {kubeconfig}}}\n").start()
    try:
        body = {"queue": "A", "jobSetId": "denied", "jobs": [{"namespace": "team-a", "podSpec": {
            "containers": [{"name": "main", "image": "busybox", "resources": {"limits": {"cpu": "1"}}}]}}]}
        out = cli(srv, "alice", "submit", str(write_file(tmp_path, "denied.yaml", body)), "--output", "json")
        assert out.returncode == 0, out.stderr
        job_id = json.loads(out.stdout)["jobs"][0]["id"]

        def events():
            lines = cli(srv, "alice", "watch", "A", "denied", "--no-follow", "--output", "json").stdout
            return [json.loads(line) for line in lines.splitlines()]
        seen = wait_for(lambda: (lambda evs: evs if any(e["kind"] == "lease-expired" for e in evs) else None)(
            events()), timeout=60)
        expired = next(e for e in seen if e["kind"] == "lease-expired")
        assert expired["reason"] == (
            'lost on cluster b: permission missing: pods is forbidden: User "system:serviceaccount:flotilla:flotilla" '
            'cannot create resource "pods" in API group "" in the namespace "team-a" '
            "(grant it in the ClusterRole, see deploy/rbac.yaml)")
        assert seen[seen.index(expired) + 1]["kind"] == "queued"
        # Kept: never failed; once the verb is granted, it runs.
        apply_rbac(cluster)
        status = wait_for(lambda: (lambda s: s if s["state"] == "running" else None)(
            json.loads(cli(srv, "alice", "status", job_id, "--output", "json").stdout)), timeout=60)
        assert status["retries"] >= 1
        assert "failed" not in [e["kind"] for e in events()]
    finally:
        srv.kill()
        apply_rbac(cluster)


def test_deploy_rbac_lets_flotilla_read_pod_logs_and_no_more_of_pods(kwok, tmp_path):
    """``flotilla logs`` reads pods/log with get: granted by the ClusterRole; exec and attach are not."""
    cluster = kwok["b"]
    cluster.create_namespace("team-a")
    apply_rbac(cluster)
    cluster.client.post("/api/v1/namespaces/team-a/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "logged", "namespace": "team-a"},
        "spec": {"nodeName": "node-1", "containers": [{"name": "main", "image": "busybox"}]}})

    def allowed(verb: str, subresource: str) -> bool:
        review = cluster.client.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": "system:serviceaccount:flotilla:flotilla",
                     "groups": ["system:serviceaccounts", "system:serviceaccounts:flotilla"],
                     "resourceAttributes": {"namespace": "team-a", "verb": verb, "resource": "pods",
                                            "subresource": subresource}}})
        return review["status"]["allowed"]

    assert [allowed("get", "log"), allowed("create", "exec"), allowed("get", "attach")] == [True, False, False]
    token, ca, environ = in_cluster_files(cluster, tmp_path)
    client = KubeClient.from_in_cluster(token, ca, environ)
    try:
        # Allowed: the API server asks the node (kwok-controller stands in for its kubelet), which has no log.
        with pytest.raises(ApiError) as granted:
            client.pod_log("team-a", "logged")
        assert granted.value.status == 400
        apply_rbac(cluster, without=("pods/log", "get"))
        wait_for(lambda: not allowed("get", "log"), timeout=10)
        with pytest.raises(ApiError) as denied:
            client.pod_log("team-a", "logged")
        assert denied.value.status == 403
        assert denied.value.body["message"] == ('pods "logged" is forbidden: User "system:serviceaccount:flotilla:'
                                                'flotilla" cannot get resource "pods/log" in API group "" in the '
                                                'namespace "team-a"')
    finally:
        client.close()
        apply_rbac(cluster)


def granted(rbac_docs) -> set[tuple[str, str, str]]:
    role = next(doc for doc in rbac_docs if doc["kind"] == "ClusterRole")
    return {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def test_the_cluster_role_grants_exactly_the_verbs_flotilla_uses():
    assert granted(list(yaml.safe_load_all(RBAC.read_text()))) == {
        ("", "pods", "list"), ("", "pods", "watch"), ("", "pods", "create"), ("", "pods", "delete"),
        ("", "pods/log", "get"), ("", "pods/binding", "create"), ("", "pods/status", "patch"),
        ("", "events", "create"),
        ("", "nodes", "list"), ("", "nodes", "watch"), ("", "nodes", "patch"),
        ("", "namespaces", "get"), ("", "namespaces", "list"), ("", "namespaces", "watch"),
        ("scheduling.volcano.sh", "podgroups", "get"), ("scheduling.volcano.sh", "podgroups", "list"),
        ("scheduling.volcano.sh", "podgroups", "watch"),
        ("", "persistentvolumeclaims", "list"), ("", "persistentvolumeclaims", "watch"),
        ("", "persistentvolumeclaims", "patch"), ("", "persistentvolumes", "list"), ("", "persistentvolumes", "watch"),
        ("", "persistentvolumes", "patch"), ("storage.k8s.io", "storageclasses", "list"),
        ("storage.k8s.io", "storageclasses", "watch"),
        ("", "services", "create"), ("", "services", "delete"),
        # What cluster default spread constraints select by (read only when podTopologySpread defaults are set).
        ("", "services", "list"), ("", "services", "watch"), ("", "replicationcontrollers", "list"),
        ("", "replicationcontrollers", "watch"), ("apps", "replicasets", "list"), ("apps", "replicasets", "watch"),
        ("apps", "statefulsets", "list"), ("apps", "statefulsets", "watch"),
        ("networking.k8s.io", "ingresses", "create"), ("networking.k8s.io", "ingresses", "delete"),
        ("scheduling.k8s.io", "priorityclasses", "list"), ("scheduling.k8s.io", "priorityclasses", "watch"),
        ("scheduling.k8s.io", "priorityclasses", "create"),
        ("scheduling.volcano.sh", "podgroups/status", "patch"), ("batch", "jobs", "list"), ("batch", "jobs", "watch"),
        ("jobset.x-k8s.io", "jobsets", "list"), ("jobset.x-k8s.io", "jobsets", "watch")}


def test_the_service_account_tells_in_cluster_pods_why_and_reads_their_queues_and_gangs(kwok, tmp_path):
    """What in-cluster scheduling needs, as the API server authorizes it: allowed, and nothing next to it."""
    from flotilla.kubernetes.conditions import PodReporter

    cluster = kwok["b"]
    cluster.create_namespace("team-a")
    apply_rbac(cluster)

    def allowed(verb: str, resource: str, subresource: str = "", group: str = "") -> bool:
        review = cluster.client.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": "system:serviceaccount:flotilla:flotilla",
                     "groups": ["system:serviceaccounts", "system:serviceaccounts:flotilla"],
                     "resourceAttributes": {"namespace": "team-a", "verb": verb, "resource": resource,
                                            "subresource": subresource, "group": group}}})
        return review["status"]["allowed"]

    checks = {
        ("patch", "pods", "status", ""): True, ("update", "pods", "status", ""): False,
        ("create", "pods", "binding", ""): True,
        ("create", "events", "", ""): True, ("patch", "events", "", ""): False, ("delete", "events", "", ""): False,
        ("list", "events", "", ""): False, ("create", "events", "", "events.k8s.io"): False,
        ("get", "namespaces", "", ""): True, ("list", "namespaces", "", ""): True,
        ("watch", "namespaces", "", ""): True, ("create", "namespaces", "", ""): False,
        ("update", "namespaces", "", ""): False,
        ("get", "podgroups", "", "scheduling.volcano.sh"): True,
        ("list", "podgroups", "", "scheduling.volcano.sh"): True,
        ("watch", "podgroups", "", "scheduling.volcano.sh"): True,
        ("create", "podgroups", "", "scheduling.volcano.sh"): False,
        ("update", "podgroups", "", "scheduling.volcano.sh"): False,
        ("delete", "podgroups", "", "scheduling.volcano.sh"): False,
        ("patch", "podgroups", "status", "scheduling.volcano.sh"): True,    # Volcano's status, written back
        ("update", "podgroups", "status", "scheduling.volcano.sh"): False,
        ("list", "jobs", "", "batch"): True, ("watch", "jobs", "", "batch"): True,   # a Job's queue labels
        ("get", "jobs", "", "batch"): False, ("patch", "jobs", "", "batch"): False,
    }
    assert {key: allowed(*key) for key in checks} == checks

    # And through the ServiceAccount's own token, as Flotilla in a pod would do it.
    pod = cluster.client.post("/api/v1/namespaces/team-a/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "waiting", "namespace": "team-a"},
        "spec": {"schedulerName": "flotilla", "containers": [{"name": "main", "image": "busybox"}]}})
    cluster.client.post("/apis/scheduling.volcano.sh/v1beta1/namespaces/team-a/podgroups", {
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "gang", "namespace": "team-a"}, "spec": {"minMember": 2}})
    token, ca, environ = in_cluster_files(cluster, tmp_path)
    client = KubeClient.from_in_cluster(token, ca, environ)
    try:
        reporter = PodReporter(client)
        uid = pod["metadata"]["uid"]
        assert reporter.unschedulable("team-a", "waiting", uid, "namespace team-a may not use queue A") is True
        reporter.disruption_target("team-a", "waiting", uid, "flotilla: preempted")
        written = cluster.client.get("/api/v1/namespaces/team-a/pods/waiting")["status"]["conditions"]
        assert sorted((c["type"], c["status"], c["message"]) for c in written) == [
            ("DisruptionTarget", "True", "flotilla: preempted"),
            ("PodScheduled", "False", "flotilla: namespace team-a may not use queue A")]
        events = cluster.client.get("/api/v1/namespaces/team-a/events",
                                    fieldSelector=f"involvedObject.uid={uid}")["items"]
        assert sorted(e["reason"] for e in events) == ["FailedScheduling", "Preempted"]
        groups = client.get("/apis/scheduling.volcano.sh/v1beta1/podgroups")
        assert [g["metadata"]["name"] for g in groups["items"]] == ["gang"]
        assert client.get("/apis/scheduling.volcano.sh/v1beta1/namespaces/team-a/podgroups/gang")["spec"] == \
            {"minMember": 2}
        namespaces = client.get("/api/v1/namespaces")
        assert "team-a" in [n["metadata"]["name"] for n in namespaces["items"]]
        for path, version in (("/api/v1/namespaces", namespaces["metadata"]["resourceVersion"]),
                              ("/apis/scheduling.volcano.sh/v1beta1/podgroups",
                               groups["metadata"]["resourceVersion"])):
            assert [e for e in client.watch(path, version, timeout_seconds=1) if e["type"] != "BOOKMARK"] == []
    finally:
        client.close()
