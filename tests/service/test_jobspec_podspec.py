"""Submission checks a podSpec against the Kubernetes schema (the official client's models): refusals name the path.

Each refused file stores nothing; what is accepted is stored as submitted,
with the API's own field names.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from flotilla.service.api import create_app
from flotilla.service.store import Store
from tests.support.service import headers, job, job_file, settings


@pytest.fixture
def env(tmp_path):
    s = settings()
    store = Store(f"sqlite:///{tmp_path}/api.db")
    store.sync_queues(s.queues)
    yield TestClient(create_app(store, s)), store
    store.close()


def refused(env, body) -> list[str]:
    client, store = env
    r = client.post("/v1/submit", json=body, headers=headers("alice"))
    assert r.status_code == 422, r.text
    assert store.count_jobs() == 0
    return [e["text"] for e in r.json()["error"]["errors"]]


def test_a_typo_in_a_pod_spec_field_is_refused_with_its_path(env):
    bad = job("a")
    bad["podSpec"]["containers"][0]["imagee"] = "busybox"
    worse = job("b")
    worse["podSpec"]["contianers"] = worse["podSpec"].pop("containers")
    assert refused(env, job_file("A", "s", [bad, worse])) == [
        "job 0 (clientId 'a'): podSpec.containers[0].imagee: Extra inputs are not permitted",
        "job 1 (clientId 'b'): podSpec.containers: Field required",
        "job 1 (clientId 'b'): podSpec.contianers: Extra inputs are not permitted",
    ]


def test_a_wrong_type_deep_in_a_pod_spec_is_refused_with_its_path(env):
    bad = job("a", volumes=[{"name": "v", "emptyDir": {"medium": 3}}])
    bad["podSpec"]["containers"][0]["env"] = [{"name": "X", "valueFrom": {"fieldRef": {"fieldPathh": "x"}}}]
    assert refused(env, job_file("A", "s", [bad])) == [
        "job 0 (clientId 'a'): podSpec.containers[0].env[0].valueFrom.fieldRef.fieldPath: Field required",
        "job 0 (clientId 'a'): podSpec.containers[0].env[0].valueFrom.fieldRef.fieldPathh: "
        "Extra inputs are not permitted",
        "job 0 (clientId 'a'): podSpec.volumes[0].emptyDir.medium: Input should be a valid string",
    ]


def test_restart_policy_always_and_owned_fields_are_refused(env):
    assert refused(env, job_file("A", "s", [job("a", restartPolicy="Always"), job("b", nodeName="node-1"),
                                            job("c", schedulerName="default-scheduler")])) == [
        "job 0 (clientId 'a'): podSpec.restartPolicy: Value error, restartPolicy Always is refused: a batch job "
        "must end (use Never, the default, or OnFailure)",
        "job 1 (clientId 'b'): podSpec.nodeName: Value error, nodeName is set by the scheduler: leave it out "
        "(use nodeSelector to choose nodes)",
        "job 2 (clientId 'c'): podSpec.schedulerName: Value error, schedulerName is set by Flotilla from its "
        "cluster settings: leave it out",
    ]


def test_an_unknown_job_field_is_refused_with_its_name(env):
    bad = job("a")
    bad["lables"] = {"team": "ml"}
    assert refused(env, job_file("A", "s", [bad])) == [
        "job 0 (clientId 'a'): lables: Extra inputs are not permitted"]


def test_a_bad_namespace_is_refused(env):
    bad = job("a")
    bad["namespace"] = "Team_A"
    assert refused(env, job_file("A", "s", [bad])) == [
        "job 0 (clientId 'a'): namespace: String should match pattern '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'"]


def test_the_whole_pod_spec_is_stored_with_the_api_field_names(env):
    client, store = env
    good = job("a", cpu=2, restartPolicy="OnFailure",
               volumes=[{"name": "v", "emptyDir": {}}], securityContext={"runAsUser": 1000})
    good["podSpec"]["containers"][0].update({"command": ["sh", "-c"], "args": ["echo hi"],
                                             "env": [{"name": "A", "value": "1"}],
                                             "volumeMounts": [{"name": "v", "mountPath": "/v"}]})
    good.update(namespace="team-a", labels={"team": "ml"})
    r = client.post("/v1/submit", json=job_file("A", "s", [good]), headers=headers("alice"))
    assert r.status_code == 200, r.text
    spec = store.job_spec(r.json()["jobs"][0]["id"])
    assert spec["namespace"] == "team-a" and spec["labels"] == {"team": "ml"}
    assert spec["podSpec"] == {
        "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c"], "args": ["echo hi"],
                        "env": [{"name": "A", "value": "1"}], "volumeMounts": [{"name": "v", "mountPath": "/v"}],
                        "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "2"}}}],
        "restartPolicy": "OnFailure", "volumes": [{"name": "v", "emptyDir": {}}],
        "securityContext": {"runAsUser": 1000},
        "terminationGracePeriodSeconds": 1.0, "activeDeadlineSeconds": 259200.0,
    }


def test_service_and_ingress_ports_must_be_container_ports_and_fields_known(env):
    bad = job("a", containers=[{"name": "web", "image": "nginx", "ports": [{"containerPort": 8080}]}])
    bad.update(services=[{"type": "NodePort", "ports": [8080, 9090]}],
               ingress=[{"ports": [7070], "useClusterIP": True}])
    other = job("b")
    other["services"] = [{"type": "LoadBalancer", "ports": [80]}]
    assert refused(env, job_file("A", "s", [bad, other])) == [
        "job 0 (clientId 'a'): ingress[0].useClusterIP: Extra inputs are not permitted",
        "job 1 (clientId 'b'): services[0].type: Input should be 'NodePort' or 'Headless'",
    ]
    bad["ingress"][0].pop("useClusterIP")
    assert refused(env, job_file("A", "s", [bad])) == [
        "job 0 (clientId 'a'): services[0].ports[1]: port 9090 is not a containerPort of the job's first pod "
        "(exposed: 8080)",
        "job 0 (clientId 'a'): ingress[0].ports[0]: port 7070 is not a containerPort of the job's first pod "
        "(exposed: 8080)",
    ]


def test_a_date_time_is_an_rfc3339_string_only(env):
    """metav1.Time as the API server parses it: a Unix time, a bare date or a time without offset is refused."""
    def claim_metadata(metadata):
        return [{"name": "v", "ephemeral": {"volumeClaimTemplate": {"metadata": metadata, "spec": {}}}}]

    bad = job("a", volumes=claim_metadata({"creationTimestamp": 0, "deletionTimestamp": "2024-05-01",
                                           "managedFields": [{"time": "2024-05-01T12:00:00"}]}))
    path = "podSpec.volumes[0].ephemeral.volumeClaimTemplate.metadata"
    expected = "expected an RFC 3339 date-time string such as 2024-05-01T12:00:00Z, got"
    assert refused(env, job_file("A", "s", [bad])) == [
        f"job 0 (clientId 'a'): {path}.creationTimestamp: Value error, {expected} 0",
        f"job 0 (clientId 'a'): {path}.deletionTimestamp: Value error, {expected} '2024-05-01'",
        f"job 0 (clientId 'a'): {path}.managedFields[0].time: Value error, {expected} '2024-05-01T12:00:00'",
    ]
    client, store = env
    good = job("b", volumes=claim_metadata({"creationTimestamp": "2024-05-01T12:00:00Z",
                                            "managedFields": [{"time": "2024-05-01T12:00:00.5+02:00"}]}))
    r = client.post("/v1/submit", json=job_file("A", "s", [good]), headers=headers("alice"))
    assert r.status_code == 200, r.text
    assert store.job_spec(r.json()["jobs"][0]["id"])["podSpec"]["volumes"] == claim_metadata(
        {"creationTimestamp": "2024-05-01T12:00:00Z", "managedFields": [{"time": "2024-05-01T12:00:00.500000+02:00"}]})


def test_a_field_is_spelt_as_the_kubernetes_api_spells_it(env):
    """The client's Python names (host_network) are not the API's: refused with where and the API's name."""
    bad = job("a", host_network=True)
    bad["podSpec"]["containers"][0]["security_context"] = {}
    assert refused(env, job_file("A", "s", [bad])) == [
        "job 0 (clientId 'a'): podSpec: Value error, containers[0].security_context: unknown field, Kubernetes "
        "spells it securityContext; host_network: unknown field, Kubernetes spells it hostNetwork",
    ]
