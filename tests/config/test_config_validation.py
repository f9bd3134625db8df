"""Config mistakes that would load and silently do nothing: unknown resource names, action orders that cannot work.

Error strings are compared whole: the one line a user sees is the interface.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flotilla.config import ConfigError, load_config, parse_config, parse_state
from flotilla.simulate.workload import parse_workload
from tests.support.scenario import invoke

ROOT = Path(__file__).resolve().parents[2]

SIM = "clusters:\n  - {name: sim, kind: simulated, nodes: [{count: 2, resources: {cpu: 32, memory: 128Gi}}]}\n"
K8S = "clusters:\n  - {name: k, kind: kubernetes}\n"


def config_error(text: str) -> str:
    with pytest.raises(ConfigError) as err:
        parse_config(text, "c.yaml")
    return str(err.value)


# -- the two mistakes, through the CLI: one line each ------------------------------------------------

STATE = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 8, memory: 32Gi}}
jobs:
  - {id: j1, queue: A, requests: {cpu: 1}}
"""


def test_a_misspelt_resource_name_is_refused_with_a_did_you_mean(tmp_path):
    result = invoke(tmp_path, "queues:\n  - {name: A, limits: {memroy: 0.5}}\n" + SIM, STATE)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (f"error: {tmp_path / 'flotilla.yaml'}:2: queues[0].limits.memroy: unknown resource "
                             f"'memroy': no cluster has it (did you mean 'memory'?)\n")


def test_allocate_before_evict_is_refused_with_the_reason(tmp_path):
    result = invoke(tmp_path, "actions: [allocate, evict, lease]\nqueues: [{name: A}]\n", STATE)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (
        f"error: {tmp_path / 'flotilla.yaml'}:1: actions[1]: evict needs allocate after it (allocate -> evict -> "
        f"lease): allocate returns evicted jobs to their nodes, and the ones still evicted when the cycle ends are "
        f"preempted, so every preemptible job would be stopped for nothing\n")


# -- resource names --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("plugins:\n  - name: assetfairness\n    args: {resourceWeights: {cpu: 1, memroy: 0}}\n" + SIM,
     "c.yaml:3: plugins[0].args.resourceWeights.memroy: unknown resource 'memroy': no cluster has it "
     "(did you mean 'memory'?)"),
    ("nodeIndex: {indexedResources: [cpu, mem]}\n" + SIM,
     "c.yaml:1: nodeIndex.indexedResources[1]: unknown resource 'mem': no cluster has it (did you mean 'memory'?)"),
    ("plugins:\n  - name: drf\n    args: {resources: [cpu, cpus]}\n" + SIM,
     "c.yaml:3: plugins[0].args.resources[1]: unknown resource 'cpus': no cluster has it (did you mean 'cpu'?)"),
    # nothing close: the names known, and how to name an extended resource
    ("queues: [{name: A, limits: {licence: 0.5}}]\n" + K8S,
     "c.yaml:1: queues[0].limits.licence: unknown resource 'licence': no cluster has it (known: cpu, "
     "ephemeral-storage, memory, pods, storage; an extended resource has a domain prefix, e.g. example.com/licence)"),
    # a simulated node's own name is a candidate too
    ("queues: [{name: A, limits: {licences: 0.5}}]\nclusters:\n  - {name: sim, kind: simulated, "
     "nodes: [{resources: {cpu: 32, licence: 4}}]}\n",
     "c.yaml:1: queues[0].limits.licences: unknown resource 'licences': no cluster has it (did you mean 'licence'?)"),
])
def test_unknown_resource_names_are_refused_where_they_are(text, expected):
    assert config_error(text) == expected


@pytest.mark.parametrize("names", [
    # what a Kubernetes node may report whatever the config says, and every extended (domain-prefixed) name
    "{cpu: 0.5, memory: 0.5, ephemeral-storage: 0.5, storage: 0.5, hugepages-2Mi: 0.5, "
    "hugepages-1Gi: 0.5, attachable-volumes-aws-ebs: 0.5, nvidia.com/gpu: 0.5, example.com/x: 0.5}",
])
@pytest.mark.parametrize("clusters", [SIM, K8S])
def test_names_a_real_cluster_may_have_are_accepted(names, clusters):
    config = parse_config(f"queues: [{{name: A, limits: {names}}}]\n" + clusters, "c.yaml")
    assert len(config.queues[0].limits) == 9


@pytest.mark.parametrize("text, expected", [
    ("queues: [{name: A, limits: {pods: 0.5}}]\n" + K8S, "c.yaml:1: queues[0].limits.pods"),
    ("plugins:\n  - name: assetfairness\n    args: {resourceWeights: {cpu: 1, pods: 1}}\n" + SIM,
     "c.yaml:3: plugins[0].args.resourceWeights.pods"),
    ("nodeIndex: {indexedResources: [cpu, pods]}\n" + K8S, "c.yaml:1: nodeIndex.indexedResources[1]"),
])
def test_pod_slots_are_no_resource_to_weigh_limit_or_index(text, expected):
    # A node's pods counts its pod slots (kube-scheduler's Too many pods): no share, limit or index order reads it.
    assert config_error(text) == (f"{expected}: pods counts each node's pod slots (kube-scheduler's Too many "
                                  f"pods), not a resource queues are weighed, limited or indexed by")


def test_a_simulated_node_or_template_may_bring_its_own_names():
    config = parse_config("plugins:\n  - name: assetfairness\n    args: {resourceWeights: {cpu: 1, licence: 2, "
                          "seat: 1}}\n" + "clusters:\n  - {name: sim, kind: simulated, nodes: [{resources: "
                          "{cpu: 32, licence: 4}}]}\nnodeTemplates:\n  - {name: t, cluster: sim, resources: "
                          "{cpu: 8, seat: 2}}\n", "c.yaml")
    assert config.plugins[0].args["resourceWeights"] == {"cpu": 1, "licence": 2, "seat": 1}


def test_a_config_without_clusters_is_checked_against_the_state_file():
    # schedule-once: the state file brings the clusters and the jobs; the error is the config's, at its line.
    config = load_config_text("plugins:\n  - name: assetfairness\n    args: {resourceWeights: {cpu: 1, licence: 1}}\n"
                              "queues: [{name: A}]\n")
    state = "clusters:\n  - name: c\n    nodes:\n      - {name: n, resources: {cpu: 4}}\njobs:\n"
    with pytest.raises(ConfigError) as err:
        parse_state(state + "  - {id: j, queue: A, requests: {cpu: 1}}\n", "s.yaml", config)
    assert str(err.value) == ("c.yaml:3: plugins[0].args.resourceWeights.licence: unknown resource 'licence': "
                              "no cluster has it and no job asks for it (known: cpu, ephemeral-storage, memory, "
                              "pods, storage; an extended resource has a domain prefix, e.g. example.com/licence)")
    # A job that asks for it, or a node that has it, makes it known.
    snapshot = parse_state(state + "  - {id: j, queue: A, requests: {cpu: 1, licence: 1}}\n", "s.yaml", config)
    assert [job.id for job in snapshot.queued] == ["j"]
    parse_state(state.replace("{cpu: 4}", "{cpu: 4, licence: 2}") + "  - {id: j, queue: A, requests: {cpu: 1}}\n",
                "s.yaml", config)


def test_state_and_workload_queues_limits_are_checked_too():
    config = load_config(None)
    with pytest.raises(ConfigError) as err:
        parse_state("queues:\n  - {name: C, limits: {cpus: 0.5}}\njobs: []\n", "s.yaml", config)
    assert str(err.value) == ("s.yaml:2: queues[0].limits.cpus: unknown resource 'cpus': no cluster has it and no "
                              "job asks for it (did you mean 'cpu'?)")
    with pytest.raises(ConfigError) as err:
        parse_workload("queues:\n  - {name: C, limits: {memroy: 0.5}}\nsubmissions:\n"
                       "  - {queue: C, requests: {cpu: 1}, duration: 1m}\n", "w.yaml", config)
    assert str(err.value) == ("w.yaml:2: queues[0].limits.memroy: unknown resource 'memroy': no cluster has it and "
                              "no job asks for it (did you mean 'memory'?)")
    workload = parse_workload("queues:\n  - {name: C, limits: {licence: 0.5}}\nsubmissions:\n"
                              "  - {queue: C, requests: {cpu: 1, licence: 1}, duration: 1m}\n", "w.yaml", config)
    assert workload.total_jobs == 1


def load_config_text(text: str):
    return parse_config(text, "c.yaml")


# -- action orders ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("actions, expected", [
    ("[evict, allocate, lease, preempt]",
     "c.yaml:1: actions[2]: lease must be the last action (evict -> allocate -> lease -> preempt): it hands the "
     "decisions made so far to the clusters, so what preempt decides after it never reaches them"),
    ("[allocate, preempt, evict]",
     "c.yaml:1: actions[2]: evict needs allocate after it (allocate -> preempt -> evict): allocate returns evicted "
     "jobs to their nodes, and the ones still evicted when the cycle ends are preempted, so every preemptible job "
     "would be stopped for nothing"),
    ("[evict, preempt, allocate, lease]",
     "c.yaml:1: actions[0]: evict needs allocate between it and preempt (evict -> preempt -> allocate -> lease): "
     "preempt stops the jobs still evicted when it starts, before allocate could return them to their nodes"),
    ("[evict, allocate, reserve, preempt, lease]\nreservation: {after: 10m}",
     "c.yaml:1: actions[2]: reserve must come before allocate (evict -> allocate -> reserve -> preempt -> lease): "
     "its reserved nodes take only backfill jobs, and its units wait, only from the actions after it"),
    ("[evict, allocate, enqueue, preempt, lease]",
     "c.yaml:1: actions[2]: enqueue must come before allocate (evict -> allocate -> enqueue -> preempt -> lease): "
     "it sets aside the jobs that can never run before the others look at them"),
])
def test_action_orders_that_cannot_work_are_refused(actions, expected):
    assert config_error(f"actions: {actions}\n") == expected


@pytest.mark.parametrize("actions", [
    ["evict", "allocate", "preempt", "lease"], ["enqueue", "evict", "reserve", "allocate", "preempt", "lease"],
    ["allocate", "preempt", "lease"], ["allocate"], [], ["evict", "reserve", "allocate"],
    ["preempt", "evict", "allocate"],
])
def test_orders_that_work_load(actions):
    extra = "reservation: {after: 10m}\n" if "reserve" in actions else ""
    assert parse_config(f"actions: [{', '.join(actions)}]\n{extra}", "c.yaml").action_names == actions


# -- nothing that worked before is refused -----------------------------------------------------------------------

CONFIGS = sorted(path for path in (ROOT / "examples").rglob("*.yaml")
                 if "state" not in path.name and "workload" not in path.name
                 and path.parent.name not in ("jobs", "workloads", "templates")
                 and "plugins" not in path.parts and "backends" not in path.parts
                 and path.name != "two-queues.yaml")


@pytest.mark.parametrize("path", CONFIGS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_example_config_loads(path):
    load_config(path)


def test_the_examples_are_all_there():
    assert {str(path.relative_to(ROOT)) for path in CONFIGS} >= {
        "examples/flotilla.yaml", "examples/serve.yaml", "examples/kwok.yaml", "examples/wishlist.yaml",
        "examples/policies/reservation.yaml", "examples/policies/owners.yaml"}


# -- the documented examples -------------------------------------------------------------------------------------

@pytest.mark.parametrize("heading", ["Actions in a cycle", "Resource names in the config"])
def test_the_documented_refusals(heading, tmp_path):
    from tests.support.docs import blocks, commands, refused, section

    text = section("policies.md", heading)
    (config,), (argv,), (expected,) = blocks(text, "yaml"), commands(text), blocks(text, "text")
    assert refused(config, argv, tmp_path) == expected
