"""The user's own workload on Kubernetes: pods built from the submitted podSpecs, read back from a KWOK API server.

A real ``flotilla serve`` process leases onto one fake cluster; every
assertion reads the pod objects from the API server, not Flotilla's view.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from tests.support.serve import Server, cli, wait_for, write_file
from tests.support.kwok_serve import CONFIG

pytestmark = pytest.mark.kwok

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

#: The fields of a pod's spec the scheduler owns, with what it sets them to for the example job.
OWNED = {"nodeName", "schedulerName", "priorityClassName", "terminationGracePeriodSeconds", "activeDeadlineSeconds",
         "restartPolicy"}
#: Fields the API server fills in with its defaults when a pod leaves them out.
API_DEFAULTS = {"dnsPolicy", "enableServiceLinks", "preemptionPolicy", "priority", "tolerations",
                "imagePullPolicy", "terminationMessagePath", "terminationMessagePolicy", "protocol",
                "apiVersion"}  # fieldRef.apiVersion: v1


def contains(given, actual, path="spec") -> list[str]:
    """Where ``actual`` differs from ``given``: every field given must be there with the same value."""
    if isinstance(given, dict):
        if not isinstance(actual, dict):
            return [f"{path}: expected a mapping, got {actual!r}"]
        out = []
        for key, value in given.items():
            if key not in actual:
                out.append(f"{path}.{key}: missing")
            else:
                out.extend(contains(value, actual[key], f"{path}.{key}"))
        return out
    if isinstance(given, list):
        if not isinstance(actual, list) or len(actual) != len(given):
            return [f"{path}: expected {given!r}, got {actual!r}"]
        return [d for k, (g, a) in enumerate(zip(given, actual)) for d in contains(g, a, f"{path}[{k}]")]
    return [] if given == actual else [f"{path}: expected {given!r}, got {actual!r}"]


def added(given, actual, path="spec") -> set[str]:
    """Fields of ``actual`` that ``given`` does not have (by name, at any depth)."""
    out: set[str] = set()
    if isinstance(given, dict) and isinstance(actual, dict):
        for key, value in actual.items():
            if key not in given:
                out.add(key)
            else:
                out |= added(given[key], value, f"{path}.{key}")
    elif isinstance(given, list) and isinstance(actual, list):
        for g, a in zip(given, actual):
            out |= added(g, a, path)
    return out


def one_cluster(c, namespace=None) -> str:
    extra = f", namespace: {namespace}" if namespace else ""
    return f"  - {{name: a, kind: kubernetes, kubeconfig: {c.kubeconfig}, context: {c.context}{extra}}}\n"


def our_pods(cluster) -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in cluster.pods() if "flotilla.io/job-id" in p["metadata"].get("labels", {})}


def test_the_example_job_reaches_the_api_server_as_submitted(kwok, tmp_path):
    """examples/jobs/train.yaml: the pod read back is the podSpec field by field, but for the owned fields."""
    cluster = kwok["a"]
    cluster.create_namespace("team-a")
    srv = Server(tmp_path, CONFIG + one_cluster(cluster)).start()
    try:
        example = EXAMPLES / "jobs" / "train.yaml"
        submitted = yaml.safe_load(example.read_text())
        out = cli(srv, "alice", "submit", str(example), "--output", "json")
        assert out.returncode == 0, out.stderr
        job_id = json.loads(out.stdout)["jobs"][0]["id"]
        pod = wait_for(lambda: next((p for p in our_pods(cluster).values()
                                     if p["status"].get("phase") == "Running"), None), timeout=60)
    finally:
        srv.kill()
    given = submitted["jobs"][0]
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["namespace"] == "team-a"
    assert meta["name"] == f"flotilla-{job_id.lower()}-0"
    assert {k: v for k, v in meta["labels"].items() if not k.startswith("flotilla.io/")} == \
        {"team": "ml", "app": "trainer"}
    assert meta["labels"]["flotilla.io/job-id"] == job_id and meta["labels"]["flotilla.io/pod-number"] == "0"
    assert meta["annotations"]["example.com/owner"] == "ml-platform"
    assert meta["annotations"]["flotilla.io/pod-number"] == "0"

    # Every field submitted is on the pod, unchanged, but for those the scheduler owns.
    expected = copy.deepcopy(given["podSpec"])
    expected.update({"restartPolicy": "Never", "schedulerName": "flotilla", "priorityClassName": "armada-default",
                     "terminationGracePeriodSeconds": 20, "activeDeadlineSeconds": 3 * 86400,
                     "nodeName": spec["nodeName"]})
    assert contains(expected, spec) == []
    assert spec["nodeName"] in ("node-1", "node-2")
    # What the pod has beyond the submission: the owned fields and the API server's defaults, nothing else.
    assert added(given["podSpec"], spec) - OWNED - API_DEFAULTS == set()
    assert [c["name"] for c in spec["containers"]] == ["train", "metrics"]
    assert [c["name"] for c in spec["initContainers"]] == ["fetch-data"]


def test_a_job_in_a_namespace_that_does_not_exist_fails_with_that_reason(kwok, tmp_path):
    cluster = kwok["a"]
    srv = Server(tmp_path, CONFIG + one_cluster(cluster)).start()
    try:
        body = {"queue": "A", "jobSetId": "nowhere", "jobs": [{
            "namespace": "no-such-team", "podSpec": {"containers": [{
                "name": "main", "image": "busybox", "resources": {"limits": {"cpu": "1"}}}]}}]}
        out = cli(srv, "alice", "submit", str(write_file(tmp_path, "nowhere.yaml", body)), "--output", "json")
        assert out.returncode == 0, out.stderr
        watched = cli(srv, "alice", "watch", "A", "nowhere", "--until-done", "--output", "json", timeout=60)
        assert watched.returncode == 5, watched.stderr
        events = [json.loads(line) for line in watched.stdout.splitlines()]
        assert [e["kind"] for e in events] == ["submitted", "queued", "leased", "pending", "failed"]
        assert events[-1]["reason"] == "namespace 'no-such-team' does not exist on cluster a"
    finally:
        srv.kill()
    assert our_pods(cluster) == {}


def test_a_jobs_service_and_ingress_exist_while_it_runs_and_go_with_it(kwok, tmp_path):
    cluster = kwok["a"]
    cluster.create_namespace("team-a")
    srv = Server(tmp_path, CONFIG + one_cluster(cluster).replace("}\n", ", ingressDomain: jobs.example.com}\n")).start()
    try:
        body = {"queue": "A", "jobSetId": "web", "jobs": [{
            "namespace": "team-a", "annotations": {"flotilla.io/simulated-duration": "4s"},
            "services": [{"type": "NodePort", "ports": [8080]}, {"type": "Headless", "ports": [9090]}],
            "ingress": [{"ports": [8080], "tlsEnabled": True, "certName": "web-cert",
                         "annotations": {"nginx.ingress.kubernetes.io/rewrite-target": "/"}}],
            "podSpec": {"containers": [{
                "name": "web", "image": "nginx", "resources": {"limits": {"cpu": "1"}},
                "ports": [{"containerPort": 8080}, {"containerPort": 9090}]}]}}]}
        out = cli(srv, "alice", "submit", str(write_file(tmp_path, "web.yaml", body)), "--output", "json")
        assert out.returncode == 0, out.stderr
        job_id = json.loads(out.stdout)["jobs"][0]["id"]
        pod_name = f"flotilla-{job_id.lower()}-0"

        def objects():
            services = cluster.client.get("/api/v1/namespaces/team-a/services")["items"]
            ingresses = cluster.client.get("/apis/networking.k8s.io/v1/namespaces/team-a/ingresses")["items"]
            return {**{("Service", o["metadata"]["name"]): o for o in services},
                    **{("Ingress", o["metadata"]["name"]): o for o in ingresses}}
        found = wait_for(lambda: (lambda o: o if len(o) == 4 else None)(objects()), timeout=60)
        pod = wait_for(lambda: our_pods(cluster).get(pod_name), timeout=30)
        assert pod["metadata"]["annotations"]["flotilla.io/owned"] == (
            f"services/{pod_name}-svc-0,services/{pod_name}-svc-1,services/{pod_name}-ing-0,"
            f"ingresses/{pod_name}-ing-0")
        selector = {"flotilla.io/job-id": job_id, "flotilla.io/pod-number": "0"}
        owner = [{"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod["metadata"]["uid"]}]
        assert {key: (o["spec"].get("type"), o["spec"].get("clusterIP") == "None",
                      [p["port"] for p in o["spec"].get("ports", [])], o["spec"].get("selector"),
                      o["metadata"]["ownerReferences"]) for key, o in found.items()} == {
            ("Service", f"{pod_name}-svc-0"): ("NodePort", False, [8080], selector, owner),
            ("Service", f"{pod_name}-svc-1"): ("ClusterIP", True, [9090], selector, owner),
            ("Service", f"{pod_name}-ing-0"): ("ClusterIP", False, [8080], selector, owner),
            ("Ingress", f"{pod_name}-ing-0"): (None, False, [], None, owner),
        }
        ingress = found[("Ingress", f"{pod_name}-ing-0")]
        host = f"{pod_name}-8080.jobs.example.com"
        assert ingress["spec"] == {
            "rules": [{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": {
                "service": {"name": f"{pod_name}-ing-0", "port": {"number": 8080}}}}]}}],
            "tls": [{"hosts": [host], "secretName": "web-cert"}]}
        assert ingress["metadata"]["annotations"] == {"nginx.ingress.kubernetes.io/rewrite-target": "/"}

        watched = cli(srv, "alice", "watch", "A", "web", "--until-done", "--output", "json", timeout=60)
        assert watched.returncode == 0, watched.stderr
        wait_for(lambda: objects() == {}, timeout=30)
    finally:
        srv.kill()
