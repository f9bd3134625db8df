"""deploy/: every manifest passes a server-side dry-run on a KWOK cluster's real kube-apiserver (the official
client), the ConfigMap's config loads as ``serve`` would load it, and the objects are the ones the docs name."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s, config as k8s_config, utils

from flotilla.config import parse_config

pytestmark = pytest.mark.kwok

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def manifests() -> list[dict]:
    """Every object of deploy/*.yaml, in file-name order (the order ``kubectl apply -f deploy/`` uses)."""
    return [doc for path in sorted(DEPLOY.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]


def test_the_manifests_are_the_documented_ones():
    kinds = {(doc["kind"], doc["metadata"]["name"]) for doc in manifests()}
    assert {("Namespace", "flotilla"), ("ConfigMap", "flotilla-config"), ("Deployment", "flotilla-api"),
            ("Service", "flotilla-api"), ("PodDisruptionBudget", "flotilla-api"),
            ("Deployment", "flotilla-scheduler"), ("PodDisruptionBudget", "flotilla-scheduler"),
            ("ServiceAccount", "flotilla"), ("ClusterRole", "flotilla"), ("ClusterRoleBinding", "flotilla")} <= kinds
    by_name = {(doc["kind"], doc["metadata"]["name"]): doc for doc in manifests()}
    for name, role in (("flotilla-api", "api"), ("flotilla-scheduler", "scheduler")):
        deployment = by_name[("Deployment", name)]
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        assert deployment["spec"]["replicas"] == 2
        assert ("ServiceAccount", deployment["spec"]["template"]["spec"]["serviceAccountName"]) in kinds
        assert container["args"][:3] == ["serve", "--role", role]
        assert (container["livenessProbe"]["httpGet"]["path"], container["readinessProbe"]["httpGet"]["path"]) == \
            ("/healthz", "/readyz")
    config = parse_config(by_name[("ConfigMap", "flotilla-config")]["data"]["config.yaml"], "config.yaml")
    assert [q.name for q in config.queues] == ["research", "production"]
    assert [(c.name, c.in_cluster) for c in config.clusters] == [("home", True)]
    assert (config.leader_election.lease_duration, config.lease.timeout) == (15.0, 60.0)
    containerfile = (DEPLOY / "Containerfile").read_text()
    assert "pip install" in containerfile and 'ENTRYPOINT ["flotilla"]' in containerfile


def test_every_manifest_passes_a_server_side_dry_run(kwok_clusters):
    cluster = kwok_clusters["a"]
    api = k8s_config.new_client_from_config(config_file=cluster.kubeconfig, context=cluster.context)
    docs = manifests()
    namespaces = [doc for doc in docs if doc["kind"] == "Namespace"]
    core = k8s.CoreV1Api(api)
    try:
        # A dry-run of a namespaced object needs its namespace to exist: dry-run the namespaces, then create them.
        utils.create_from_yaml(api, yaml_objects=namespaces, dry_run="All")
        utils.create_from_yaml(api, yaml_objects=namespaces)
        rest = [doc for doc in docs if doc["kind"] != "Namespace"]
        utils.create_from_yaml(api, yaml_objects=rest, dry_run="All")
        # The server checks what it is sent: the same Deployment with a bad field is refused.
        bad = next(doc for doc in rest if doc["kind"] == "Deployment")
        bad = {**bad, "spec": {**bad["spec"], "replicas": -1}}
        with pytest.raises(utils.FailToCreateError) as info:
            utils.create_from_yaml(api, yaml_objects=[bad], dry_run="All")
        assert "spec.replicas: Invalid value: -1: must be greater than or equal to 0" in str(info.value)
        # The dry run stored nothing.
        assert k8s.AppsV1Api(api).list_namespaced_deployment("flotilla").items == []
        assert [c.metadata.name for c in core.list_namespaced_config_map("flotilla").items
                if c.metadata.name.startswith("flotilla")] == []
    finally:
        for doc in namespaces:
            core.delete_namespace(doc["metadata"]["name"])
        api.close()


def test_the_podgroup_crd_is_volcanos_v1beta1_with_the_fields_of_its_schema():
    [crd] = [doc for doc in yaml.safe_load_all((DEPLOY / "crds" / "scheduling.volcano.sh_podgroups.yaml").read_text())
             if doc]
    assert (crd["kind"], crd["metadata"]["name"], crd["spec"]["group"], crd["spec"]["scope"]) == (
        "CustomResourceDefinition", "podgroups.scheduling.volcano.sh", "scheduling.volcano.sh", "Namespaced")
    assert crd["spec"]["names"] == {"kind": "PodGroup", "listKind": "PodGroupList", "plural": "podgroups",
                                    "singular": "podgroup", "shortNames": ["pg", "podgroup-v1beta1"]}
    [version] = crd["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"], version["subresources"]) == (
        "v1beta1", True, True, {"status": {}})
    schema = version["schema"]["openAPIV3Schema"]["properties"]
    assert sorted(schema["spec"]["properties"]) == ["minMember", "minResources", "minTaskMember", "networkTopology",
                                                   "preemptable", "priorityClassName", "queue"]
    assert sorted(schema["status"]["properties"]) == ["conditions", "failed", "phase", "running", "succeeded"]
    assert schema["spec"]["properties"]["minMember"] == {
        "description": schema["spec"]["properties"]["minMember"]["description"],
        "type": "integer", "format": "int32", "minimum": 0}
    assert "default" not in schema["spec"]["properties"]["queue"]
