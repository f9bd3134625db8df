"""The ``schedule-once`` state file (spec section 3): clusters, nodes and jobs.

Loading checks the file against the config and turns it into a core
:class:`~flotilla.core.model.Snapshot`. The first problem, in file order, is
reported with its line and field path.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BeforeValidator, Field, ValidationError
from typing_extensions import Annotated

from flotilla.config.errors import ConfigError
from flotilla.config.models import FlotillaConfig, Model, Quantities, QueueConfig, TaintConfig, TolerationConfig
from flotilla.config.source import read_yaml_file
from flotilla.core.model import ClusterSnapshot, Gang, Job, JobState, Node, Queue, Snapshot


def _seconds(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("expected seconds or an RFC 3339 time")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, datetime):
        moment = value
    else:
        text = str(value).strip()
        try:
            moment = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
        except ValueError:
            raise ValueError(f"expected seconds or an RFC 3339 time, got {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


Seconds = Annotated[float, BeforeValidator(_seconds)]


class StateNode(Model):
    name: str
    resources: Quantities
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[TaintConfig] = Field(default_factory=list)
    unschedulable: bool = False


class StateCluster(Model):
    name: str
    nodes: list[StateNode] = Field(default_factory=list)


class GangConfig(Model):
    id: str
    cardinality: int = Field(ge=1)


class StateJob(Model):
    id: str
    queue: str
    job_set: str = Field("", alias="jobSet")
    priority: int = 0
    priority_class: str | None = Field(None, alias="priorityClass")
    requests: Quantities = Field(default_factory=dict)
    submitted: Seconds = 0.0
    state: Literal["queued", "running"] = "queued"
    cluster: str | None = None
    node: str | None = None
    gang: GangConfig | None = None
    node_selector: dict[str, str] = Field(default_factory=dict, alias="nodeSelector")
    tolerations: list[TolerationConfig] = Field(default_factory=list)
    annotations: dict[str, str] = Field(default_factory=dict)


class StateFile(Model):
    clusters: list[StateCluster] | None = None
    jobs: list[StateJob] = Field(default_factory=list)
    queues: list[QueueConfig] = Field(default_factory=list)
    now: Seconds = 0.0


def load_state(path: str | os.PathLike, config: FlotillaConfig) -> Snapshot:
    """Read, validate against ``config``, and convert a state file."""
    name = os.fspath(path)
    data, source = read_yaml_file(name)
    try:
        state = StateFile.model_validate(data)
    except ValidationError as exc:
        raise source.from_validation(exc) from None
    return build_snapshot(state, config, source)


def build_snapshot(state: StateFile, config: FlotillaConfig, source) -> Snapshot:
    def fail(path: tuple, message: str) -> ConfigError:
        return source.error(path, message)

    # Clusters and nodes: the state's own, else the config's simulated clusters.
    if state.clusters is not None:
        clusters: list[ClusterSnapshot] = []
        seen_clusters: dict[str, int] = {}
        for c, cluster in enumerate(state.clusters):
            if cluster.name in seen_clusters:
                raise fail(("clusters", c, "name"), f"duplicate cluster name {cluster.name!r}")
            seen_clusters[cluster.name] = c
            nodes, seen_nodes = [], set()
            for n, node in enumerate(cluster.nodes):
                if node.name in seen_nodes:
                    raise fail(("clusters", c, "nodes", n, "name"), f"duplicate node name {node.name!r} in cluster {cluster.name!r}")
                seen_nodes.add(node.name)
                nodes.append(Node(node.name, cluster.name, dict(node.resources), dict(node.labels),
                                  tuple(t.to_core() for t in node.taints), node.unschedulable))
            clusters.append(ClusterSnapshot(cluster.name, nodes))
    else:
        clusters = [cluster.snapshot() for cluster in config.simulated_clusters()]
    by_name = {cluster.name: cluster for cluster in clusters}
    node_names = {cluster.name: {node.name for node in cluster.nodes} for cluster in clusters}

    queues: dict[str, Queue] = {q.name: Queue(q.name, q.weight, dict(q.limits)) for q in config.queues}
    for q in state.queues:
        queues[q.name] = Queue(q.name, q.weight, dict(q.limits))
    classes = [pc.name for pc in config.priority_classes]

    interned: dict[tuple, dict[str, int]] = {}
    seen_ids: dict[str, int] = {}
    gangs: dict[str, list[int]] = {}
    queued: list[Job] = []
    for j, spec in enumerate(state.jobs):
        if spec.id in seen_ids:
            raise fail(("jobs", j, "id"), f"duplicate job id {spec.id!r} (first at jobs[{seen_ids[spec.id]}])")
        seen_ids[spec.id] = j
        if spec.queue not in queues:
            raise fail(("jobs", j, "queue"), f"unknown queue {spec.queue!r} (known: {', '.join(sorted(queues)) or 'none'})")
        pc = spec.priority_class or config.default_priority_class
        if pc not in classes:
            raise fail(("jobs", j, "priorityClass"), f"unknown priority class {pc!r} (known: {', '.join(classes)})")
        cluster = spec.cluster
        if spec.state == "running":
            if spec.node is None:
                raise fail(("jobs", j, "node"), "a running job needs the node it runs on")
            if cluster is None:
                if len(clusters) != 1:
                    raise fail(("jobs", j, "cluster"), "a running job needs its cluster when there are several")
                cluster = clusters[0].name
            if cluster not in by_name:
                raise fail(("jobs", j, "cluster"), f"running job on unknown cluster {cluster!r}")
            if spec.node not in node_names[cluster]:
                raise fail(("jobs", j, "node"), f"running job on unknown node {spec.node!r} in cluster {cluster!r}")
        elif spec.node is not None or spec.cluster is not None:
            raise fail(("jobs", j, "node" if spec.node is not None else "cluster"),
                       "a queued job has no node or cluster yet (set state: running)")
        requests = interned.setdefault(tuple(sorted(spec.requests.items())), dict(spec.requests))
        gang = None
        if spec.gang is not None:
            gang = Gang(spec.gang.id, spec.gang.cardinality)
            gangs.setdefault(spec.gang.id, []).append(j)
        job = Job(spec.id, spec.queue, spec.job_set, spec.priority, pc, spec.submitted, requests,
                  dict(spec.node_selector), tuple(t.to_core() for t in spec.tolerations), gang,
                  JobState.RUNNING if spec.state == "running" else JobState.QUEUED,
                  cluster if spec.state == "running" else None, spec.node, dict(spec.annotations))
        if job.state is JobState.RUNNING:
            by_name[cluster].running.append(job)
        else:
            queued.append(job)

    for gang_id, members in gangs.items():
        first = state.jobs[members[0]]
        for j in members:
            member = state.jobs[j]
            if member.gang.cardinality != first.gang.cardinality:
                raise fail(("jobs", j, "gang", "cardinality"),
                           f"gang {gang_id!r} members disagree on cardinality ({first.gang.cardinality} at jobs[{members[0]}])")
            if member.queue != first.queue:
                raise fail(("jobs", j, "queue"), f"gang {gang_id!r} members must share one queue ({first.queue!r})")
        if len(members) != first.gang.cardinality:
            raise fail(("jobs", members[-1], "gang", "cardinality"),
                       f"gang {gang_id!r} has cardinality {first.gang.cardinality} but {len(members)} jobs")

    return Snapshot(clusters, queued, list(queues.values()), config.to_core_priority_classes(),
                    config.default_priority_class, now=state.now)


__all__ = ["StateFile", "StateJob", "build_snapshot", "load_state"]
