"""flotilla/kwok/realnode/chartpod.py's :func:`workload_pod` on the chart's own workloads (``helm template``): the
standalone Deployment's pod and the bundled PostgreSQL StatefulSet's (the HA
real-node test) are their templates bound to real-1 on the host's network, owned by the workload, with the caller's
port, arguments and environment, no probes, and every claim an emptyDir. No cluster: the real-node tests run them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from flotilla.kwok.realnode.chartpod import TOKEN_MOUNT, workload_pod

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "flotilla"


def rendered(tmp_path: Path, *values: str) -> dict[tuple[str, str], dict]:
    from flotilla.kwok.cluster import KwokError, find_bin_dir

    env_bin = os.environ.get("FLOTILLA_K8S_BIN")
    try:
        helm = Path(env_bin) / "helm" if env_bin else find_bin_dir(build=False) / "helm"
    except KwokError as exc:
        pytest.skip(f"helm not built: {exc}")
    if not helm.exists():
        pytest.skip("helm not built")
    env = {**os.environ, **{f"HELM_{k}_HOME": str(tmp_path / k.lower()) for k in ("CACHE", "CONFIG", "DATA")}}
    result = subprocess.run([str(helm), "template", "flt", str(CHART), "--namespace", "ns", *values],
                            capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    return {(d["kind"], d["metadata"]["name"]): {**d, "metadata": {**d["metadata"], "uid": f"uid-{i}"}}
            for i, d in enumerate(docs)}


def test_the_standalone_deployments_pod_has_the_api_servers_address_a_token_and_its_claim_as_an_emptydir(tmp_path):
    deployment = rendered(tmp_path)[("Deployment", "flt-flotilla")]
    pod = workload_pod(deployment, "flt-flotilla-pod", server="https://127.0.0.1:6443", token="flt-flotilla-token",
                       args=["--listen", "127.0.0.1:18431"], port=18431)
    spec = pod["spec"]
    (container,) = spec["containers"]
    assert pod["metadata"] == {"name": "flt-flotilla-pod",
                               "labels": deployment["spec"]["template"]["metadata"]["labels"],
                               "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                                    "name": "flt-flotilla", "uid": deployment["metadata"]["uid"],
                                                    "controller": True, "blockOwnerDeletion": True}]}
    assert (spec["nodeName"], spec["dnsPolicy"], spec["hostNetwork"]) == ("real-1", "Default", True)
    assert container["args"][-2:] == ["--listen", "127.0.0.1:18431"]
    assert container["ports"] == [{"name": "http", "containerPort": 18431}]
    assert "readinessProbe" not in container and "livenessProbe" not in container
    assert container["env"][-2:] == [{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
                                     {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"}]
    assert container["volumeMounts"][-1] == {"name": "token", "mountPath": TOKEN_MOUNT, "readOnly": True}
    assert [v for v in spec["volumes"] if v["name"] in ("data", "token")] == [
        {"name": "data", "emptyDir": {}}, {"name": "token", "secret": {"secretName": "flt-flotilla-token"}}]
    # The workload itself is left as it was.
    assert "readinessProbe" in deployment["spec"]["template"]["spec"]["containers"][0]


def test_the_statefulsets_pod_has_its_claim_template_as_an_emptydir_and_the_callers_port_in_its_environment(
        tmp_path):
    values = ("--values", str(CHART / "ci" / "ha-values.yaml"), "--set", "postgresql.enabled=true")
    statefulset = rendered(tmp_path, *values)[("StatefulSet", "flt-flotilla-postgresql")]
    pod = workload_pod(statefulset, "flt-flotilla-postgresql-0", env={"PGPORT": "15432"}, port=15432)
    spec = pod["spec"]
    (container,) = spec["containers"]
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "StatefulSet"
    assert [(v["name"], v.get("value")) for v in container["env"]] == [
        ("POSTGRES_USER", "flotilla"), ("POSTGRES_DB", "flotilla"), ("POSTGRES_PASSWORD", None),
        ("PGDATA", "/var/lib/postgresql/data/pgdata"), ("PGPORT", "15432")]
    assert container["ports"] == [{"name": "postgresql", "containerPort": 15432}]
    assert spec["volumes"] == [{"name": "tmp", "emptyDir": {}}, {"name": "data", "emptyDir": {}}]
    assert [m["name"] for m in container["volumeMounts"]] == ["data", "tmp"]
    assert "KUBERNETES_SERVICE_HOST" not in {v["name"] for v in container["env"]}
