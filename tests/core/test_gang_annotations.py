"""Gang annotations read the same wherever jobs are read: state files, job files, pods (core/gangannotations.py)."""

from __future__ import annotations

import json

import pytest

from flotilla.core.gangannotations import GangAnnotations, read_gang_annotations
from flotilla.core.model import Gang, Job
from flotilla.kubernetes.pods import PodSettings, job_from_pod, pod_manifest
from tests.support.scenario import config, invoke, placements, run_once

ID, CARD = "armadaproject.io/gangId", "armadaproject.io/gangCardinality"
MIN, LABEL = "flotilla.io/gang-min-available", "armadaproject.io/gangNodeUniformityLabel"


def state(cpu: int, *members: str) -> str:
    return f"""
clusters:
  - name: c1
    nodes:
      - {{name: node-1, resources: {{cpu: {cpu}}}}}
jobs:
""" + "".join(f"  - {{id: g-{i}, queue: A, requests: {{cpu: 1}}, submitted: {i}, annotations: {{{m}}}}}\n"
              for i, m in enumerate(members, 1))


def gang_of(n: int, extra: str = "") -> list[str]:
    return [f'{ID}: g, {CARD}: "{n}"{extra}'] * n


def test_a_three_member_gang_in_annotations_places_none_where_two_fit(tmp_path):
    out = run_once(tmp_path, config(), state(2, *gang_of(3)))
    assert out["scheduled"] == []
    assert out["reasons"] == {f"g-{i}": "gang g: 2 of 3 members fit" for i in (1, 2, 3)}


def test_the_same_gang_places_all_three_where_three_fit(tmp_path):
    out = run_once(tmp_path, config(), state(3, *gang_of(3)))
    assert placements(out) == {"g-1": "node-1", "g-2": "node-1", "g-3": "node-1"}


def test_an_elastic_minimum_in_annotations_starts_what_fits(tmp_path):
    out = run_once(tmp_path, config(), state(2, *gang_of(3, f', {MIN}: "2"')))
    assert placements(out) == {"g-1": "node-1", "g-2": "node-1"}
    assert out["queued"] == ["g-3"]


@pytest.mark.parametrize("members, line", [
    # One member short: the cardinality's annotation of the last member is named.
    (gang_of(3)[:2], f"jobs[1].annotations.{CARD}: gang 'g' has cardinality 3 but 2 jobs"),
    ([f'{CARD}: "2"', f'{CARD}: "2"'], f"jobs[0].annotations.{ID}: a gang needs both {ID} and {CARD}; gangId is missing"),
    ([f"{ID}: g, {CARD}: two"], f"jobs[0].annotations.{CARD}: gang cardinality must be a whole number of jobs, at least "
                                f"1; got 'two'"),
    ([f'{MIN}: "1"'], f"jobs[0].annotations.{MIN}: only a gang has a minimum; set {ID} too"),
    ([f'{ID}: g, {CARD}: "2"', f'{ID}: g, {CARD}: "3"'],
     f"jobs[1].annotations.{CARD}: gang 'g' members disagree on cardinality: 3 here, 2 at jobs[0]"),
])
def test_a_wrong_gang_annotation_is_one_line_with_its_path(tmp_path, members, line):
    result = invoke(tmp_path, config(), state(4, *members))
    assert result.exit_code == 2
    at = 7 + int(line.startswith("jobs[1]"))      # the file's line of the job named
    assert result.stderr.splitlines() == [f"error: {tmp_path / 'state.yaml'}:{at}: {line}"]


def test_gang_field_and_annotations_agree_or_are_refused(tmp_path):
    agree = state(2, *gang_of(3)).replace("annotations:", "gang: {id: g, cardinality: 3}, annotations:")
    assert run_once(tmp_path, config(), agree)["scheduled"] == []
    clash = state(4, f'{ID}: h, {CARD}: "1"').replace("annotations:", "gang: {id: g, cardinality: 1}, annotations:")
    result = invoke(tmp_path, config(), clash)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"error: {tmp_path / 'state.yaml'}:7: jobs[0].annotations.{ID}: says 'h' "
                                          f"but gang.id says 'g'; give the gang once, or the same in both"]


def test_the_reader_is_the_one_rule():
    assert read_gang_annotations({"team": "x"}) == GangAnnotations()
    read = read_gang_annotations({ID: "g", CARD: "4", MIN: "2", LABEL: "rack"})
    assert read.gang() == Gang("g", 4, 2, "rack") and read.problems == ()
    assert read_gang_annotations({ID: "g", CARD: "4", MIN: "4"}).gang() == Gang("g", 4)   # minimum = all: not elastic
    assert read_gang_annotations({MIN: "2"}, size=3, grouped_by="a gang or a job of several pods").min_available == 2
    assert read_gang_annotations({LABEL: "rack"}, unit="pods").problems == (
        (LABEL, f"only a gang runs in one domain of a label; set {ID} too"),)
    assert read_gang_annotations({ID: "g", CARD: "0"}, unit="pods").problems == (
        (CARD, "gang cardinality must be a whole number of pods, at least 1; got '0'"),)


def test_a_pod_reads_back_its_elastic_topology_gang():
    job = Job("j", "q", requests={"cpu": 1000}, gang=Gang("g", 4, 2, "rack"), annotations={MIN: "2"})
    pod = pod_manifest(job, "node-1", 0, PodSettings())
    pod["status"] = {"phase": "Running"}
    assert job_from_pod(pod, "c1").gang == Gang("g", 4, 2, "rack")


def cluster_pod(name: str, annotations: dict) -> dict:
    """A pod made in the cluster for Flotilla, in namespace team-a (queue A's)."""
    return {"metadata": {"name": name, "namespace": "team-a", "uid": f"u-{name}", "labels": {},
                         "annotations": annotations, "creationTimestamp": "2026-01-02T03:04:05Z"},
            "spec": {"schedulerName": "flotilla", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Pending"}}


def test_a_pod_made_in_the_cluster_reads_its_gang_annotations_by_the_same_rule(tmp_path):
    from flotilla.kubernetes.intake import Arrival, read_pod
    from flotilla.kubernetes.priorityclasses import NO_CLASS
    from flotilla.service.intake import ClusterIntake
    from flotilla.service.settings import QueueSpec
    from flotilla.service.store import Store

    store = Store(f"sqlite:///{tmp_path}/s.db")
    queues = [QueueSpec("A", namespaces=("team-a",))]
    store.sync_queues(queues)
    pods = {"min": {ID: "g", CARD: "2", MIN: "3"}, "card": {ID: "g", CARD: "two"}, "lone": {MIN: "1"},
            "label": {ID: "h", CARD: "1", LABEL: "rack"}, "bad-label": {ID: "k", CARD: "1", LABEL: "-rack"},
            "lone-label": {LABEL: "rack"}}
    arrivals = [Arrival(read_pod(cluster_pod(name, ann)), "A") for name, ann in pods.items()]
    rows, refused = ClusterIntake(store)._admit("east", arrivals, {q.name: q for q in queues}, {NO_CLASS}, NO_CLASS)
    assert [(r["pod_name"], r["gang_id"], json.loads(r["annotations"]).get(LABEL)) for r in rows] == [
        ("label", "team-a/h", "rack")]
    assert {a.pod.name: why for a, why in refused.values()} == {
        "min": f"metadata.annotations.{MIN}: expected a whole number from 1 to the gang's cardinality 2, got '3'",
        "card": f"metadata.annotations.{CARD}: gang cardinality must be a whole number of pods, at least 1; got 'two'",
        "lone": f"metadata.annotations.{MIN}: only a gang has a minimum; set {ID} too",
        "bad-label": f"metadata.annotations.{LABEL}: expected a node label key: an optional DNS subdomain prefix "
                     f"(lower-case letters, digits, '-' and '.', at most 253 characters) and '/', then 1-63 letters, "
                     f"digits, '-', '_' or '.', starting and ending with a letter or digit, got '-rack'",
        "lone-label": f"metadata.annotations.{LABEL}: only a gang runs in one domain of a label; set {ID} too"}
    store.close()
