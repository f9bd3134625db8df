"""deploy/helm/flotilla: ``helm lint`` passes, the default values give one standalone pod on a claim, the HA values
render deploy/*.yaml, its RBAC holds exactly the verbs of deploy/rbac.yaml, values.schema.json is the config
model's and refuses a misspelt key, and the renderings (default values, the HA values file) pass a server-side
dry-run on a KWOK cluster's kube-apiserver. helm is built by ``scripts/k8s-tools`` beside the KWOK toolchain."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s, config as k8s_config, utils

from flotilla.config import parse_config

pytestmark = pytest.mark.kwok

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
CHART = DEPLOY / "helm" / "flotilla"
HA_VALUES = CHART / "ci" / "ha-values.yaml"
#: HA with the bundled PostgreSQL (postgresql.enabled).
BUNDLED = ("--values", str(HA_VALUES), "--set", "postgresql.enabled=true")
#: The requests set down for a trial cluster of one small node (deploy/README.md's HA section adds it).
SMALL_NODE = CHART / "ci" / "small-node-values.yaml"


@pytest.fixture(scope="module")
def helm() -> Path:
    """helm from ``FLOTILLA_K8S_BIN`` (or the toolchain cache); the tests that need no API server need nothing else."""
    from flotilla.kwok.cluster import KwokError, find_bin_dir

    env = os.environ.get("FLOTILLA_K8S_BIN")
    if env and (Path(env) / "helm").exists():
        return Path(env) / "helm"
    try:
        path = find_bin_dir(build=bool(os.environ.get("CI"))) / "helm"
        why = f"{path} is missing; run scripts/k8s-tools"
    except KwokError as exc:
        path, why = None, str(exc)
    if path is None or not path.exists():
        if os.environ.get("CI"):
            pytest.fail(f"helm missing under CI: {why}")
        pytest.skip(f"helm not built: {why}")
    return path


def run_helm(helm: Path, *args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    # helm keeps caches and config under HOME-derived paths: give each run its own.
    env = {**os.environ, "HELM_CACHE_HOME": str(tmp_path / "cache"), "HELM_CONFIG_HOME": str(tmp_path / "config"),
           "HELM_DATA_HOME": str(tmp_path / "data")}
    return subprocess.run([str(helm), *args], capture_output=True, text=True, env=env)


def render(helm: Path, tmp_path: Path, *values: str, release: str = "flotilla",
           namespace: str = "flotilla") -> list[dict]:
    result = run_helm(helm, "template", release, str(CHART), "--namespace", namespace, *values, tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def objects(docs: list[dict]) -> list[dict]:
    """The release's objects, without its ``helm test`` hooks."""
    return [doc for doc in docs if "helm.sh/hook" not in (doc["metadata"].get("annotations") or {})]


def plain_manifests() -> list[dict]:
    return [doc for path in sorted(DEPLOY.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]


def comparable(doc: dict) -> dict:
    """The object with its ConfigMap's config parsed, so YAML layout and comments do not count, meaning does."""
    if doc["kind"] == "ConfigMap":
        return {**doc, "data": {key: yaml.safe_load(value) for key, value in doc["data"].items()}}
    return doc


def by_key(docs: list[dict]) -> dict[tuple[str, str], dict]:
    return {(doc["kind"], doc["metadata"]["name"]): comparable(doc) for doc in docs}


def test_helm_lint_passes_with_default_and_ha_values(helm, tmp_path):
    for values in ((), ("--values", str(HA_VALUES)), ("--set", "serviceMonitor.enabled=true"),
                   ("--set", "networkPolicy.enabled=true"), BUNDLED,
                   (*BUNDLED, "--set", "networkPolicy.enabled=true"), (*BUNDLED, "--values", str(SMALL_NODE))):
        result = run_helm(helm, "lint", "--strict", str(CHART), *values, tmp_path=tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def test_the_plain_manifests_are_the_charts_ha_rendering(helm, tmp_path):
    rendered = by_key(objects(render(helm, tmp_path, "--values", str(HA_VALUES))))
    plain = by_key([doc for doc in plain_manifests() if doc["kind"] != "Namespace"])
    assert sorted(rendered) == sorted(plain)
    for key in plain:
        # deploy/*.yaml and the chart's templates change together (deploy/helm/flotilla/templates/).
        assert rendered[key] == plain[key], f"{key}: deploy/*.yaml and the chart's rendering differ"


def test_default_values_render_one_standalone_pod_with_its_sqlite_store_on_a_claim(helm, tmp_path):
    docs = by_key(objects(render(helm, tmp_path)))
    assert sorted(docs) == [
        ("ClusterRole", "flotilla"), ("ClusterRoleBinding", "flotilla"), ("ConfigMap", "flotilla-config"),
        ("Deployment", "flotilla"), ("PersistentVolumeClaim", "flotilla-data"), ("Service", "flotilla-api"),
        ("ServiceAccount", "flotilla")]
    deployment = docs[("Deployment", "flotilla")]
    assert (deployment["spec"]["replicas"], deployment["spec"]["strategy"]) == (1, {"type": "Recreate"})
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == ["serve", "--role", "all", "--config", "/etc/flotilla/config/config.yaml",
                                 "--store", "sqlite:////var/lib/flotilla/flotilla.db"]
    assert [e["name"] for e in container["env"]] == ["POD_NAME"]
    assert container["image"] == "flotilla.local/flotilla:0.1.0"   # the name scripts/image gives it
    assert container["resources"] == {"requests": {"cpu": "500m", "memory": "768Mi"},
                                      "limits": {"cpu": "2", "memory": "2Gi"}}
    assert container["securityContext"] == {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
                                            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
    assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                      "fsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts == {"config": "/etc/flotilla/config", "tmp": "/tmp", "data": "/var/lib/flotilla",
                      "kubeconfigs": "/etc/flotilla/kubeconfigs"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"] == {"claimName": "flotilla-data"}
    assert volumes["tmp"]["emptyDir"] == {}
    claim = docs[("PersistentVolumeClaim", "flotilla-data")]
    assert claim["spec"] == {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    assert claim["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    service = docs[("Service", "flotilla-api")]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "flotilla-standalone", "app.kubernetes.io/instance": "flotilla"}
    config = parse_config(yaml.safe_dump(docs[("ConfigMap", "flotilla-config")]["data"]["config.yaml"]),
                          "config.yaml")
    # The release's namespace is every queue's and the in-cluster cluster's (releaseNamespace).
    assert [(q.name, q.namespaces) for q in config.queues] == [("research", ["flotilla"]),
                                                               ("production", ["flotilla"])]
    assert [(c.name, c.in_cluster, c.namespace) for c in config.clusters] == [("home", True, "flotilla")]


def test_the_release_namespace_joins_the_queues_own_and_can_be_left_out(helm, tmp_path):
    def queues(*values):
        docs = by_key(objects(render(helm, tmp_path, *values, namespace="batch")))
        config = docs[("ConfigMap", "flotilla-config")]["data"]["config.yaml"]
        return [(q["name"], q.get("namespaces")) for q in config["queues"]], config["clusters"][0].get("namespace")

    own = ("--set", "config.queues[0].name=a", "--set", "config.queues[0].namespaces={team-a,batch}",
           "--set", "config.queues[1].name=b", "--set", "config.queues[1].namespaces={team-b}")
    assert queues(*own) == ([("a", ["team-a", "batch"]), ("b", ["team-b", "batch"])], "batch")
    assert queues(*own, "--set", "releaseNamespace=false") == ([("a", ["team-a", "batch"]), ("b", ["team-b"])],
                                                                None)


def test_a_storage_class_or_an_existing_claim_is_used_as_given(helm, tmp_path):
    docs = by_key(objects(render(helm, tmp_path, "--set", "standalone.persistence.storageClassName=local",
                                 "--set", "standalone.persistence.size=5Gi")))
    assert docs[("PersistentVolumeClaim", "flotilla-data")]["spec"] == {
        "accessModes": ["ReadWriteOnce"], "storageClassName": "local", "resources": {"requests": {"storage": "5Gi"}}}
    docs = by_key(objects(render(helm, tmp_path, "--set", "standalone.persistence.existingClaim=mine")))
    assert not [key for key in docs if key[0] == "PersistentVolumeClaim"]
    volumes = docs[("Deployment", "flotilla")]["spec"]["template"]["spec"]["volumes"]
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "mine"}} in volumes


def test_the_helm_test_hook_submits_a_job_to_the_service_and_waits_for_it(helm, tmp_path):
    hooks = {(doc["kind"], doc["metadata"]["name"]): doc for doc in render(helm, tmp_path)
             if "helm.sh/hook" in (doc["metadata"].get("annotations") or {})}
    assert sorted(hooks) == [("Pod", "flotilla-test"), ("Secret", "flotilla-test")]
    assert {doc["metadata"]["annotations"]["helm.sh/hook"] for doc in hooks.values()} == {"test"}
    pod = hooks[("Pod", "flotilla-test")]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["sh", "-c", "flotilla submit /etc/flotilla-test/job.yaml && "
                                                "flotilla watch research helm-test --until-done"]
    assert container["env"][0] == {"name": "FLOTILLA_URL", "value": "http://flotilla-api:80"}
    secret = hooks[("Secret", "flotilla-test")]["stringData"]
    assert secret["token"] == "admin-secret"
    job = yaml.safe_load(secret["job.yaml"])
    assert (job["queue"], job["jobSetId"]) == ("research", "helm-test")
    assert job["jobs"][0]["podSpec"]["containers"][0]["args"] == ["--version"]


def test_the_network_policy_admits_only_the_api_port(helm, tmp_path):
    docs = by_key(objects(render(helm, tmp_path, "--set", "networkPolicy.enabled=true")))
    policy = docs[("NetworkPolicy", "flotilla")]
    assert policy["spec"] == {"podSelector": {"matchLabels": {"app.kubernetes.io/part-of": "flotilla",
                                                              "app.kubernetes.io/instance": "flotilla"}},
                              "policyTypes": ["Ingress"], "ingress": [{"ports": [{"port": 8080, "protocol": "TCP"}]}]}
    assert ("NetworkPolicy", "flotilla") not in by_key(render(helm, tmp_path))


def test_the_values_schema_is_the_config_models():
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "chart-schema"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["properties"]["config"]["additionalProperties"] is False
    assert {"queues", "leaderElection", "leader_election"} <= set(schema["properties"]["config"]["properties"])


@pytest.mark.parametrize("values, refusal", [
    (("--set", "config.queuess=[]"), "- at '/config': additional properties 'queuess' not allowed"),
    (("--set", "config.queues[0].weight=-1"), "- at '/config/queues/0/weight': "),
    (("--set", "mode=cluster"), "- at '/mode': value must be one of 'standalone', 'ha'"),
    (("--set", "standalone.persistence.sise=1Gi"),
     "- at '/standalone/persistence': additional properties 'sise' not allowed"),
], ids=["config-key", "config-value", "mode", "chart-key"])
def test_a_misspelt_value_is_refused_by_helm_itself_naming_it(helm, tmp_path, values, refusal):
    for command in (("template", "flotilla"), ("lint", "--strict")):
        result = run_helm(helm, *command, str(CHART), *values, tmp_path=tmp_path)
        assert result.returncode != 0
        assert refusal in result.stdout + result.stderr, result.stdout + result.stderr


def test_the_ha_values_give_two_replicas_per_role_a_secret_store_url_and_pdbs(helm, tmp_path):
    docs = by_key(render(helm, tmp_path, "--values", str(HA_VALUES), "--set", "store.secret.name=pg",
                         "--set", "store.secret.key=dsn"))
    for role in ("api", "scheduler"):
        deployment = docs[("Deployment", f"flotilla-{role}")]
        assert deployment["spec"]["replicas"] == 2
        env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        assert env[0] == {"name": "FLOTILLA_STORE_URL", "valueFrom": {"secretKeyRef": {"name": "pg", "key": "dsn"}}}
        pdb = docs[("PodDisruptionBudget", f"flotilla-{role}")]
        assert pdb["spec"] == {"minAvailable": 1, "selector": {"matchLabels": {
            "app.kubernetes.io/name": f"flotilla-{role}", "app.kubernetes.io/instance": "flotilla"}}}


def test_the_small_node_values_set_the_requests_down_and_keep_the_limits(helm, tmp_path):
    docs = by_key(render(helm, tmp_path, *BUNDLED, "--values", str(SMALL_NODE)))
    workloads = {name: (doc["spec"]["replicas"], doc["spec"]["template"]["spec"]["containers"][0]["resources"])
                 for (kind, name), doc in docs.items() if kind in ("Deployment", "StatefulSet")}
    assert workloads == {
        "flotilla-api": (2, {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "2", "memory": "2Gi"}}),
        "flotilla-scheduler": (2, {"requests": {"cpu": "100m", "memory": "256Mi"},
                                   "limits": {"cpu": "2", "memory": "8Gi"}}),
        "flotilla-postgresql": (1, {"requests": {"cpu": "100m", "memory": "128Mi"},
                                    "limits": {"cpu": "1", "memory": "1Gi"}})}
    (claim,) = docs[("StatefulSet", "flotilla-postgresql")]["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"] == {"requests": {"storage": "1Gi"}}


def test_the_bundled_postgresql_is_a_statefulset_service_and_secret_whose_url_the_roles_read(helm, tmp_path):
    docs = by_key(render(helm, tmp_path, *BUNDLED, "--set", "postgresql.password=pa ss/w@rd+"))
    added = sorted(set(docs) - set(by_key(render(helm, tmp_path, "--values", str(HA_VALUES)))))
    assert added == [("Secret", "flotilla-postgresql"), ("Service", "flotilla-postgresql"),
                     ("StatefulSet", "flotilla-postgresql")]
    assert docs[("Secret", "flotilla-postgresql")]["stringData"] == {
        "password": "pa ss/w@rd+",
        "url": "postgresql+psycopg://flotilla:pa%20ss%2Fw%40rd%2B@flotilla-postgresql.flotilla.svc:5432/flotilla"}
    for role in ("api", "scheduler"):
        env = docs[("Deployment", f"flotilla-{role}")]["spec"]["template"]["spec"]["containers"][0]["env"]
        assert env[0] == {"name": "FLOTILLA_STORE_URL", "valueFrom": {"secretKeyRef": {
            "name": "flotilla-postgresql", "key": "url"}}}
    selector = {"app.kubernetes.io/name": "flotilla-postgresql", "app.kubernetes.io/instance": "flotilla"}
    assert docs[("Service", "flotilla-postgresql")]["spec"] == {
        "selector": selector, "ports": [{"name": "postgresql", "port": 5432, "targetPort": "postgresql"}]}
    statefulset = docs[("StatefulSet", "flotilla-postgresql")]["spec"]
    assert (statefulset["replicas"], statefulset["serviceName"], statefulset["selector"]) == (
        1, "flotilla-postgresql", {"matchLabels": selector})
    pod = statefulset["template"]["spec"]
    assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 999, "runAsGroup": 999, "fsGroup": 999,
                                      "seccompProfile": {"type": "RuntimeDefault"}}
    (container,) = pod["containers"]
    assert container["image"] == "flotilla.local/postgresql:15"
    assert container["env"] == [
        {"name": "POSTGRES_USER", "value": "flotilla"}, {"name": "POSTGRES_DB", "value": "flotilla"},
        {"name": "POSTGRES_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "flotilla-postgresql",
                                                                      "key": "password"}}},
        {"name": "PGPORT", "value": "5432"}, {"name": "PGDATA", "value": "/var/lib/postgresql/data/pgdata"}]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["volumeMounts"] == [{"name": "data", "mountPath": "/var/lib/postgresql/data"},
                                         {"name": "tmp", "mountPath": "/tmp"}]
    (claim,) = statefulset["volumeClaimTemplates"]
    assert (claim["metadata"]["name"], claim["spec"]["resources"]) == ("data", {"requests": {"storage": "8Gi"}})


def test_a_generated_postgresql_password_is_alphanumeric_and_in_the_url(helm, tmp_path):
    secret = by_key(render(helm, tmp_path, *BUNDLED))[("Secret", "flotilla-postgresql")]["stringData"]
    password = secret["password"]
    assert len(password) == 32 and password.isalnum()
    assert secret["url"] == f"postgresql+psycopg://flotilla:{password}@flotilla-postgresql.flotilla.svc:5432/flotilla"


def test_the_bundled_postgresql_is_refused_in_standalone_mode_naming_why(helm, tmp_path):
    result = run_helm(helm, "template", "flotilla", str(CHART), "--set", "postgresql.enabled=true", tmp_path=tmp_path)
    assert result.returncode != 0
    assert "postgresql.enabled needs mode: ha (the standalone pod keeps its SQLite store on its claim)" in result.stderr


def test_with_the_network_policy_the_bundled_postgresql_admits_only_the_roles_on_its_port(helm, tmp_path):
    docs = by_key(render(helm, tmp_path, *BUNDLED, "--set", "networkPolicy.enabled=true"))
    assert docs[("NetworkPolicy", "flotilla-postgresql")]["spec"] == {
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "flotilla-postgresql",
                                        "app.kubernetes.io/instance": "flotilla"}},
        "policyTypes": ["Ingress"],
        "ingress": [{"ports": [{"port": 5432, "protocol": "TCP"}], "from": [
            {"podSelector": {"matchLabels": {"app.kubernetes.io/name": f"flotilla-{role}",
                                             "app.kubernetes.io/instance": "flotilla"}}}
            for role in ("api", "scheduler")]}]}


def test_the_rendered_rbac_has_exactly_the_verbs_of_deploy_rbac(helm, tmp_path):
    def rules(docs):
        (role,) = [doc for doc in docs if doc["kind"] == "ClusterRole"]
        return sorted((tuple(r["apiGroups"]), tuple(r["resources"]), tuple(sorted(r["verbs"])))
                      for r in role["rules"])

    plain = rules(yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()))
    assert rules(render(helm, tmp_path)) == plain, \
        "deploy/rbac.yaml and deploy/helm/flotilla/templates/rbac.yaml must grant the same verbs"
    assert rules(render(helm, tmp_path, "--values", str(HA_VALUES))) == plain
    assert ((""), ("pods",), ("create", "delete", "list", "watch")) in [(g[0], r, v) for g, r, v in plain]


def test_the_chart_ships_deploy_crds_unchanged(helm, tmp_path):
    shipped = sorted(p.name for p in (CHART / "crds").iterdir())
    assert shipped == sorted(p.name for p in (DEPLOY / "crds").glob("*.yaml")) == ["scheduling.volcano.sh_podgroups.yaml"]
    for name in shipped:
        assert (CHART / "crds" / name).read_text() == (DEPLOY / "crds" / name).read_text(), name
    crds = [doc for doc in render(helm, tmp_path, "--include-crds") if doc["kind"] == "CustomResourceDefinition"]
    assert [doc["metadata"]["name"] for doc in crds] == ["podgroups.scheduling.volcano.sh"]


def test_a_release_of_another_name_names_its_objects_after_it(helm, tmp_path):
    docs = render(helm, tmp_path, release="batch", namespace="sched")
    names = sorted((doc["kind"], doc["metadata"]["name"]) for doc in docs)
    assert ("Deployment", "batch-flotilla") in names and ("ClusterRole", "batch-flotilla") in names
    assert {doc["metadata"].get("namespace") for doc in docs} == {"sched", None}
    binding = next(doc for doc in docs if doc["kind"] == "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "batch-flotilla", "namespace": "sched"}]


def test_the_service_monitor_renders_when_enabled(helm, tmp_path):
    docs = by_key(render(helm, tmp_path, "--values", str(HA_VALUES), "--set", "serviceMonitor.enabled=true",
                         "--set", "serviceMonitor.labels.release=prom"))
    monitor = docs[("ServiceMonitor", "flotilla")]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "30s"}]
    selector = monitor["spec"]["selector"]["matchLabels"]
    # It selects the API Service and the schedulers' headless metrics Service, and nothing else of the release.
    services = [doc for doc in docs.values() if doc["kind"] == "Service"]
    assert sorted(s["metadata"]["name"] for s in services
                  if selector.items() <= s["metadata"]["labels"].items()) == \
        ["flotilla-api", "flotilla-scheduler-metrics"]
    metrics = docs[("Service", "flotilla-scheduler-metrics")]
    assert metrics["spec"]["clusterIP"] == "None"
    assert metrics["spec"]["selector"] == {"app.kubernetes.io/name": "flotilla-scheduler",
                                           "app.kubernetes.io/instance": "flotilla"}
    assert ("ServiceMonitor", "flotilla") not in by_key(render(helm, tmp_path, "--values", str(HA_VALUES)))


@pytest.mark.parametrize("values", [(), ("--values", str(HA_VALUES)), BUNDLED], ids=["default", "ha", "bundled"])
def test_the_rendering_passes_a_server_side_dry_run(helm, kwok_clusters, tmp_path, values):
    namespace = f"flotilla-helm-{len(values)}"
    docs = objects(render(helm, tmp_path, *values, release=f"fl{len(values)}", namespace=namespace))
    cluster = kwok_clusters["a"]
    api = k8s_config.new_client_from_config(config_file=cluster.kubeconfig, context=cluster.context)
    core = k8s.CoreV1Api(api)
    try:
        core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace)))
        utils.create_from_yaml(api, yaml_objects=docs, dry_run="All")
        # The server checks what it is sent: the same rendering with a bad field is refused.
        bad = [{**doc, "spec": {**doc["spec"], "replicas": -1}} for doc in docs if doc["kind"] == "Deployment"]
        with pytest.raises(utils.FailToCreateError) as info:
            utils.create_from_yaml(api, yaml_objects=bad, dry_run="All")
        assert "spec.replicas: Invalid value: -1: must be greater than or equal to 0" in str(info.value)
        assert k8s.AppsV1Api(api).list_namespaced_deployment(namespace).items == []
        assert [c.metadata.name for c in core.list_namespaced_config_map(namespace).items
                if c.metadata.name != "kube-root-ca.crt"] == []
    finally:
        core.delete_namespace(namespace)
        api.close()


def test_helm_install_refuses_a_misspelt_key_before_any_object_is_made(helm, kwok_clusters, tmp_path):
    cluster = kwok_clusters["a"]
    namespace = "flotilla-helm-typo"
    base = ("--kubeconfig", cluster.kubeconfig, "--kube-context", cluster.context, "--namespace", namespace,
            "--create-namespace")
    refused = run_helm(helm, "install", "typo", str(CHART), *base, "--set", "config.queuess=[]", tmp_path=tmp_path)
    assert refused.returncode != 0
    assert "- at '/config': additional properties 'queuess' not allowed" in refused.stderr
    api = k8s_config.new_client_from_config(config_file=cluster.kubeconfig, context=cluster.context)
    try:
        assert namespace not in [n.metadata.name for n in k8s.CoreV1Api(api).list_namespace().items]
    finally:
        api.close()
    # The same install without the typo passes the API server's own checks (dry run: nothing is made), and its
    # notes say how to submit.
    accepted = run_helm(helm, "install", "flotilla", str(CHART), *base, "--dry-run=server", tmp_path=tmp_path)
    assert accepted.returncode == 0, accepted.stderr
    notes = accepted.stdout.split("NOTES:", 1)[1]
    assert f"kubectl -n {namespace} port-forward service/flotilla-api 8080:80" in notes
    assert "flotilla submit job.yaml" in notes and "flotilla watch research hello --until-done" in notes
    assert "flotilla.io/queue: research" in notes


def test_every_value_is_documented_in_the_charts_readme():
    """Each key of values.yaml (maps of free-form content count as one key) is a row of the README's table."""
    free_form = {"config", "resources", "securityContext", "podSecurityContext", "podAnnotations", "nodeSelector", "affinity", "labels"}

    def leaves(values: dict, prefix: str = ""):
        for key, value in values.items():
            if isinstance(value, dict) and key not in free_form:
                yield from leaves(value, f"{prefix}{key}.")
            else:
                yield f"{prefix}{key}"

    readme = (CHART / "README.md").read_text()
    rows = [line.split("|")[1] for line in readme.splitlines() if line.startswith("| `")]
    documented = {name.strip(" `") for row in rows for name in row.split(",")}
    keys = list(leaves(yaml.safe_load((CHART / "values.yaml").read_text())))
    assert len(keys) == 73
    assert [key for key in keys if key not in documented] == []
