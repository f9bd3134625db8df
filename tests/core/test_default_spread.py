"""Cluster default spread constraints (config ``podTopologySpread``, kube-scheduler's PodTopologySpread
``defaultConstraints``): given to in-cluster pods that carry none, selecting by kube-scheduler's default selector
(the pod's services' selectors, merged, and its ReplicaSet's, StatefulSet's or ReplicationController's)."""

from __future__ import annotations

import pytest

from flotilla.config import parse_config
from flotilla.config.errors import ConfigError
from flotilla.kubernetes.intake import IntakeTracker

ZONE_SKEW_1 = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"}


def pod(name: str, labels: dict, owner: tuple[str, str, str] | None = None, spread=None) -> dict:
    meta = {"name": name, "namespace": "team-a", "uid": f"uid-{name}", "labels": labels,
            "creationTimestamp": "2026-11-28T00:00:00Z"}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": owner[0], "kind": owner[1], "name": owner[2], "uid": "o",
                                    "controller": True}]
    spec = {"schedulerName": "flotilla", "containers": [{"name": "c", "image": "x",
                                                         "resources": {"requests": {"cpu": "1"}}}]}
    if spread is not None:
        spec["topologySpreadConstraints"] = spread
    return {"metadata": meta, "spec": spec, "status": {"phase": "Pending"}}


def tracker() -> IntakeTracker:
    intake = IntakeTracker("flotilla", default_spread=(ZONE_SKEW_1,))
    intake.replace_selector_objects("services", [
        {"metadata": {"namespace": "team-a", "name": "web"}, "spec": {"selector": {"app": "web"}}},
        {"metadata": {"namespace": "team-a", "name": "all"}, "spec": {}},           # no selector: selects nothing
        {"metadata": {"namespace": "team-b", "name": "web"}, "spec": {"selector": {"tier": "x"}}}])
    intake.replace_selector_objects("replicasets", [
        {"metadata": {"namespace": "team-a", "name": "web-5d8f"},
         "spec": {"selector": {"matchLabels": {"app": "web", "pod-template-hash": "5d8f"},
                               "matchExpressions": [{"key": "track", "operator": "In", "values": ["a"]}]}}}])
    for kind in ("statefulsets", "replicationcontrollers"):
        intake.replace_selector_objects(kind, [])
    return intake


def spread_of(intake: IntakeTracker, name: str):
    return next(p for p in intake.waiting.values() if p.name == name).pod_rules


def test_a_replica_set_pod_gets_the_defaults_selecting_its_services_and_replica_set():
    intake = tracker()
    assert intake.ready is False  # namespaces, PodGroups and Jobs not read yet; the selector informers are
    assert intake.selectors_synced == {"services", "replicasets", "statefulsets", "replicationcontrollers"}
    intake.on_pod("ADDED", pod("web-1", {"app": "web", "pod-template-hash": "5d8f", "track": "a"},
                               ("apps/v1", "ReplicaSet", "web-5d8f")))
    assert spread_of(intake, "web-1") == {"topologySpreadConstraints": [{
        **ZONE_SKEW_1, "labelSelector": {"matchLabels": {"app": "web", "pod-template-hash": "5d8f"},
                                         "matchExpressions": [{"key": "track", "operator": "In", "values": ["a"]}]}}]}


def test_a_pod_selected_by_a_service_only_gets_the_services_selector_and_one_with_nothing_none():
    intake = tracker()
    intake.on_pod("ADDED", pod("lone-web", {"app": "web"}))
    intake.on_pod("ADDED", pod("batch", {"app": "batch"}, ("batch/v1", "Job", "train")))
    assert spread_of(intake, "lone-web") == {"topologySpreadConstraints": [
        {**ZONE_SKEW_1, "labelSelector": {"matchLabels": {"app": "web"}}}]}
    # No service selects it and a Job is not among the controllers kube-scheduler reads: no defaults.
    assert spread_of(intake, "batch") is None


def test_a_pod_with_its_own_constraints_keeps_them():
    own = [{"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}]
    intake = tracker()
    intake.on_pod("ADDED", pod("web-2", {"app": "web"}, spread=own))
    assert spread_of(intake, "web-2") == {"topologySpreadConstraints": own}


def test_a_service_made_later_gives_waiting_pods_their_selector_and_its_deletion_takes_it_back():
    intake = tracker()
    intake.on_pod("ADDED", pod("db-1", {"app": "db"}))
    intake.changed.clear()
    assert spread_of(intake, "db-1") is None
    intake.on_selector_object("services", "ADDED", {"metadata": {"namespace": "team-a", "name": "db"},
                                                    "spec": {"selector": {"app": "db"}}})
    assert spread_of(intake, "db-1") == {"topologySpreadConstraints": [
        {**ZONE_SKEW_1, "labelSelector": {"matchLabels": {"app": "db"}}}]}
    assert intake.changed == {"uid-db-1"}
    intake.on_selector_object("services", "DELETED", {"metadata": {"namespace": "team-a", "name": "db"}})
    assert spread_of(intake, "db-1") is None


def test_off_unless_configured_and_refused_with_its_path_when_malformed():
    assert parse_config("queues: [{name: A}]\n", "f.yaml").pod_topology_spread.constraints() == ()
    system = parse_config("podTopologySpread: {defaultingType: System}\n", "f.yaml").pod_topology_spread
    assert system.constraints() == (
        {"maxSkew": 3, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"},
        {"maxSkew": 5, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"})
    for text, message in (
            ("podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: "
             "DoNotSchedule, labelSelector: {matchLabels: {a: b}}}]}\n",
             "f.yaml:1: podTopologySpread.defaultConstraints[0].labelSelector: must not be set in default "
             "constraints: the selector is made for each pod from its services and controller"),
            ("podTopologySpread: {defaultConstraints: [{maxSkew: 0, topologyKey: zone, whenUnsatisfiable: "
             "DoNotSchedule}]}\n",
             "f.yaml:1: podTopologySpread.defaultConstraints[0].maxSkew: must be greater than zero, got 0"),
            ("podTopologySpread: {defaultingType: System, defaultConstraints: [{maxSkew: 1, topologyKey: zone, "
             "whenUnsatisfiable: DoNotSchedule}]}\n",
             "f.yaml:1: podTopologySpread.defaultConstraints: must be empty when defaultingType is System "
             "(kube-scheduler's system defaults)")):
        with pytest.raises(ConfigError) as caught:
            parse_config(text, "f.yaml")
        assert str(caught.value) == message
