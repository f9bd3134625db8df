"""deploy/helm/flotilla: ``helm lint`` passes, the chart renders deploy/*.yaml, its RBAC holds exactly the verbs of
deploy/rbac.yaml, and its renderings (default values, the HA values file) pass a server-side dry-run on a KWOK
cluster's kube-apiserver. helm is built by ``scripts/k8s-tools`` beside the KWOK toolchain."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s, config as k8s_config, utils

from flotilla.config import parse_config

pytestmark = pytest.mark.kwok

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CHART = DEPLOY / "helm" / "flotilla"
HA_VALUES = CHART / "ci" / "ha-values.yaml"


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
    for values in ((), ("--values", str(HA_VALUES)), ("--set", "serviceMonitor.enabled=true")):
        result = run_helm(helm, "lint", "--strict", str(CHART), *values, tmp_path=tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def test_the_plain_manifests_are_the_charts_ha_rendering(helm, tmp_path):
    rendered = by_key(render(helm, tmp_path, "--values", str(HA_VALUES)))
    plain = by_key([doc for doc in plain_manifests() if doc["kind"] != "Namespace"])
    assert sorted(rendered) == sorted(plain)
    for key in plain:
        # deploy/*.yaml and the chart's templates change together (deploy/helm/flotilla/templates/).
        assert rendered[key] == plain[key], f"{key}: deploy/*.yaml and the chart's rendering differ"


def test_default_values_render_one_replica_per_role_without_pdbs(helm, tmp_path):
    docs = by_key(render(helm, tmp_path))
    assert sorted(docs) == [
        ("ClusterRole", "flotilla"), ("ClusterRoleBinding", "flotilla"), ("ConfigMap", "flotilla-config"),
        ("Deployment", "flotilla-api"), ("Deployment", "flotilla-scheduler"), ("Service", "flotilla-api"),
        ("ServiceAccount", "flotilla")]
    for role in ("api", "scheduler"):
        deployment = docs[("Deployment", f"flotilla-{role}")]
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        assert deployment["spec"]["replicas"] == 1
        assert container["args"] == ["serve", "--role", role, "--config", "/etc/flotilla/config/config.yaml",
                                     "--store", "$(FLOTILLA_STORE_URL)"]
        assert container["env"][0]["valueFrom"] == {"secretKeyRef": {"name": "flotilla-store", "key": "url"}}
        assert container["image"] == "flotilla:0.1.0"
    config = parse_config(yaml.safe_dump(docs[("ConfigMap", "flotilla-config")]["data"]["config.yaml"]),
                          "config.yaml")
    assert [q.name for q in config.queues] == ["research", "production"]
    assert [(c.name, c.in_cluster) for c in config.clusters] == [("home", True)]


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
    assert ("Deployment", "batch-flotilla-api") in names and ("ClusterRole", "batch-flotilla") in names
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


@pytest.mark.parametrize("values", [(), ("--values", str(HA_VALUES))], ids=["default", "ha"])
def test_the_rendering_passes_a_server_side_dry_run(helm, kwok_clusters, tmp_path, values):
    namespace = f"flotilla-helm-{len(values)}"
    docs = render(helm, tmp_path, *values, release=f"fl{len(values)}", namespace=namespace)
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


def test_every_value_is_documented_in_the_charts_readme():
    """Each key of values.yaml (maps of free-form content count as one key) is a row of the README's table."""
    free_form = {"config", "resources", "securityContext", "podAnnotations", "nodeSelector", "affinity", "labels"}

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
    assert len(keys) == 39
    assert [key for key in keys if key not in documented] == []
