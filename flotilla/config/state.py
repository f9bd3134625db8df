"""The ``schedule-once`` state file (spec section 3): clusters, nodes and jobs.

Loading checks the file against the config and turns it into a core
:class:`~flotilla.core.model.Snapshot`. Every problem is collected with its
field path and the earliest in the file is reported, so fixing errors top to
bottom always works. Jobs are converted to plain core objects (no pydantic
on the hot path) and identical request mappings are shared, so a state of a
million jobs stays small.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from typing import Annotated, Any, Literal, Mapping

from pydantic import BeforeValidator, Field, ValidationError

from flotilla.config.errors import FieldPath
from flotilla.config.models import (FlotillaConfig, Model, Name, Quantities, QueueConfig, Requests, TaintConfig,
                                    TolerationConfig, inner_queues, queue_tree_problems)
from flotilla.config.resourcenames import (config_provided_names, deferred_config_problems, names_in,
                                          queue_limit_names, unknown_resource_problems)
from flotilla.config.source import SourceMap, load_yaml, read_yaml_file
from flotilla.core.hostports import host_port
from flotilla.core.nodeaffinity import AffinityError, parse_node_affinity
from flotilla.core.podrules import NAMESPACE_NAME_LABEL, label_key_problem, label_value_problem, parse_pod_rules
from flotilla.core.gangannotations import read_gang_annotations
from flotilla.core.model import (GANG_CARDINALITY_ANNOTATION, GANG_ID_ANNOTATION, GANG_NODE_UNIFORMITY_LABEL_ANNOTATION,
                                 HOSTNAME_LABEL, ClusterSnapshot, Gang, Job, JobState, Node, Queue, Snapshot)


def _seconds(value: Any) -> float:
    """Seconds as a number, or an RFC 3339 time (trailing ``Z`` allowed; no zone means UTC) as seconds since the epoch."""
    if isinstance(value, bool):
        raise ValueError(f"expected seconds or an RFC 3339 time, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, datetime):  # YAML itself turns unquoted timestamps into datetimes
        moment = value
    else:
        text = str(value).strip()
        try:
            moment = datetime.fromisoformat(text[:-1] + "+00:00" if text[-1:] in ("Z", "z") else text)
        except ValueError:
            try:
                return float(text)
            except ValueError:
                raise ValueError(f"expected seconds or an RFC 3339 time such as 2026-01-01T00:00:00Z, "
                                 f"got {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


#: Seconds, or an RFC 3339 time, as float seconds since the epoch.
Seconds = Annotated[float, BeforeValidator(_seconds)]


class StateNode(Model):
    name: Name
    resources: Quantities
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[TaintConfig] = Field(default_factory=list)
    unschedulable: bool = False


class StateNamespace(Model):
    """A namespace of the cluster and its labels (pod affinity terms' ``namespaceSelector`` reads them)."""

    name: Name
    labels: dict[str, str] = Field(default_factory=dict)


class StateCluster(Model):
    name: Name
    nodes: list[StateNode] = Field(default_factory=list)
    #: Namespaces with labels; one not listed has only ``kubernetes.io/metadata.name``, as in Kubernetes.
    namespaces: list[StateNamespace] = Field(default_factory=list)


class GangConfig(Model):
    id: Name
    cardinality: int = Field(ge=1)


class HostPortConfig(Model):
    """A host port the job's pod binds on its node (``containers[].ports[].hostPort`` in a podSpec)."""

    port: int = Field(ge=1, le=65535)
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"
    #: The host IP it binds on (``0.0.0.0``, every address, when not given), as ``ports[].hostIP`` in a podSpec.
    host_ip: str = Field("", alias="hostIP")


class StateJob(Model):
    id: Name
    queue: Name
    job_set: str = Field("", alias="jobSet")
    priority: int = 0
    priority_class: str | None = Field(None, alias="priorityClass")
    requests: Requests = Field(default_factory=dict)
    submitted: Seconds = 0.0
    state: Literal["queued", "running"] = "queued"
    cluster: str | None = None
    node: str | None = None
    gang: GangConfig | None = None
    node_selector: dict[str, str] = Field(default_factory=dict, alias="nodeSelector")
    tolerations: list[TolerationConfig] = Field(default_factory=list)
    annotations: dict[str, str] = Field(default_factory=dict)
    host_ports: list[HostPortConfig] = Field(default_factory=list, alias="hostPorts", max_length=64)
    #: ``{nodeAffinity, podAffinity, podAntiAffinity}`` as in a podSpec.
    affinity: dict[Literal["nodeAffinity", "podAffinity", "podAntiAffinity"], dict] = Field(default_factory=dict)
    #: As in a podSpec (:mod:`flotilla.core.podrules`).
    topology_spread_constraints: list[dict] = Field(default_factory=list, alias="topologySpreadConstraints",
                                                    max_length=32)
    #: The pod's labels and namespace, which pod rules select by.
    labels: dict[str, str] = Field(default_factory=dict)
    namespace: str = "default"


class StateFile(Model):
    """The whole file. ``clusters`` omitted: the config's simulated clusters, empty."""

    clusters: list[StateCluster] | None = None
    jobs: list[StateJob] = Field(default_factory=list)
    queues: list[QueueConfig] = Field(default_factory=list)
    now: Seconds = 0.0


Problems = list[tuple[FieldPath, str]]


def load_state(path: str | os.PathLike, config: FlotillaConfig) -> Snapshot:
    """Read a state file, check it against ``config`` and convert it; the first problem is a ConfigError."""
    return validate_state(*read_yaml_file(path), config)


def parse_state(text: str, file: str | None, config: FlotillaConfig) -> Snapshot:
    """:func:`load_state` on text; ``file`` is only the name errors show."""
    return validate_state(*load_yaml(text, file), config)


def validate_state(data: dict[str, Any], source: SourceMap, config: FlotillaConfig) -> Snapshot:
    try:
        state = StateFile.model_validate(data)
    except ValidationError as exc:
        raise source.from_validation(exc, StateFile) from None
    return build_snapshot(state, config, source)


def build_snapshot(state: StateFile, config: FlotillaConfig, source: SourceMap) -> Snapshot:
    """The core snapshot for a parsed state file; raises the earliest problem (in file order) as a ConfigError."""
    problems: Problems = []
    clusters = _clusters(state, config, problems)
    queues = _queues(state, config, problems)
    queued = _jobs(state, config, clusters, queues, problems)
    _check_gangs(state, problems)
    known = _resource_names(clusters, queued, config)
    problems += unknown_resource_problems(queue_limit_names("queues", state.queues), known,
                                          "no cluster has it and no job asks for it")
    error = source.first(problems)
    if error is not None:
        raise error
    # The config's own names, when it left the clusters to this file: the error is the config's, at its line.
    error = config.source.first(deferred_config_problems(config, known))
    if error is not None:
        raise error
    return Snapshot(clusters, queued, list(queues.values()), config.to_core_priority_classes(),
                    config.default_priority_class, now=state.now)


def _resource_names(clusters: list[ClusterSnapshot], queued: list[Job], config: FlotillaConfig) -> set[str]:
    """The resource names the state's nodes have and its jobs ask for, and the config's nodes have.

    The jobs' requests mappings are interned (one per distinct shape), so a million jobs cost a handful of reads.
    """
    running = (job.requests for cluster in clusters for job in cluster.running)
    return (names_in(node.resources for cluster in clusters for node in cluster.nodes)
            | names_in(job.requests for job in queued) | names_in(running) | config_provided_names(config))


def _clusters(state: StateFile, config: FlotillaConfig, problems: Problems) -> list[ClusterSnapshot]:
    """The state's own clusters (names checked), else the config's simulated clusters expanded."""
    if state.clusters is None:
        return config.simulated_snapshots()
    clusters: list[ClusterSnapshot] = []
    first_cluster: dict[str, int] = {}
    for c, cluster in enumerate(state.clusters):
        if cluster.name in first_cluster:
            problems.append((("clusters", c, "name"),
                             f"duplicate cluster name {cluster.name!r} (first at clusters[{first_cluster[cluster.name]}])"))
            continue
        first_cluster[cluster.name] = c
        nodes: list[Node] = []
        first_node: dict[str, int] = {}
        for n, node in enumerate(cluster.nodes):
            if node.name in first_node:
                problems.append((("clusters", c, "nodes", n, "name"),
                                 f"duplicate node name {node.name!r} in cluster {cluster.name!r} "
                                 f"(first at clusters[{c}].nodes[{first_node[node.name]}])"))
                continue
            first_node[node.name] = n
            nodes.append(Node(node.name, cluster.name, dict(node.resources), {HOSTNAME_LABEL: node.name, **node.labels},
                              tuple(t.to_core() for t in node.taints), node.unschedulable))
        namespaces: dict[str, dict[str, str]] = {}
        for k, namespace in enumerate(cluster.namespaces):
            if namespace.name in namespaces:
                problems.append((("clusters", c, "namespaces", k, "name"),
                                 f"duplicate namespace {namespace.name!r} in cluster {cluster.name!r}"))
                continue
            for key, value in namespace.labels.items():
                problem = label_key_problem(key) or label_value_problem(value)
                if problem:
                    problems.append((("clusters", c, "namespaces", k, "labels", key), problem))
            namespaces[namespace.name] = {NAMESPACE_NAME_LABEL: namespace.name, **namespace.labels}
        clusters.append(ClusterSnapshot(cluster.name, nodes, running=[], namespace_labels=namespaces))
    return clusters


def _queues(state: StateFile, config: FlotillaConfig, problems: Problems) -> dict[str, Queue]:
    """The config's queues, with the state file's own added (a state queue replaces a config queue of its name)."""
    queues = {q.name: q.to_core() for q in config.queues}
    first: dict[str, int] = {}
    for i, q in enumerate(state.queues):
        if q.name in first:
            problems.append((("queues", i, "name"), f"duplicate queue {q.name!r} (first at queues[{first[q.name]}])"))
            continue
        first[q.name] = i
        queues[q.name] = q.to_core()
    problems += queue_tree_problems("queues", state.queues, others=config.queues)
    return queues


def _jobs(state: StateFile, config: FlotillaConfig, clusters: list[ClusterSnapshot], queues: Mapping[str, Queue],
          problems: Problems) -> list[Job]:
    """Core jobs: running ones go onto their cluster's ``running`` list, queued ones are returned, in file order."""
    by_name = {cluster.name: cluster for cluster in clusters}
    node_names = {cluster.name: {node.name for node in cluster.nodes} for cluster in clusters}
    classes = [pc.name for pc in config.priority_classes]
    interned: dict[tuple[tuple[str, int], ...], dict[str, int]] = {}
    affinities: dict = {}
    first_id: dict[str, int] = {}
    queued: list[Job] = []
    parents = inner_queues(queues.values())
    for j, spec in enumerate(state.jobs):
        if spec.id in first_id:
            problems.append((("jobs", j, "id"), f"duplicate job id {spec.id!r} (first at jobs[{first_id[spec.id]}])"))
        else:
            first_id[spec.id] = j
        if spec.queue not in queues:
            problems.append((("jobs", j, "queue"),
                             f"unknown queue {spec.queue!r} (known: {', '.join(sorted(queues)) or 'none'})"))
        elif spec.queue in parents:
            problems.append((("jobs", j, "queue"), f"queue {spec.queue!r} has child queues; only leaf queues hold jobs"))
        priority_class = spec.priority_class if spec.priority_class is not None else config.default_priority_class
        if priority_class not in classes:
            problems.append((("jobs", j, "priorityClass"),
                             f"unknown priority class {priority_class!r} (known: {', '.join(classes)})"))
        running = spec.state == "running"
        cluster = _placement(j, spec, clusters, node_names, problems) if running else None
        if not running and (spec.node is not None or spec.cluster is not None):
            problems.append((("jobs", j, "node" if spec.node is not None else "cluster"),
                             "a queued job has no node or cluster yet (set state: running)"))
        requests = spec.requests
        key = tuple(sorted(requests.items()))
        shared = interned.get(key)
        if shared is None:
            shared = interned[key] = dict(requests)
        try:
            affinity = parse_node_affinity(spec.affinity.get("nodeAffinity"))
        except AffinityError as exc:
            problems.append((("jobs", j, "affinity", "nodeAffinity", *exc.path.split(".")), exc.message))
            affinity = None
        affinity = affinities.setdefault(affinity, affinity) if affinity is not None else None
        try:
            pod_rules = parse_pod_rules(spec.affinity, spec.topology_spread_constraints or None, spec.namespace,
                                        spec.labels)
        except AffinityError as exc:
            problems.append((("jobs", j, *exc.path.replace("[", ".").replace("]", "").split(".")), exc.message))
            pod_rules = None
        pod_rules = affinities.setdefault(pod_rules, pod_rules) if pod_rules is not None else None
        job = Job(spec.id, spec.queue, spec.job_set, spec.priority, priority_class, spec.submitted, shared,
                  dict(spec.node_selector), tuple(t.to_core() for t in spec.tolerations),
                  _gang(j, spec, problems),
                  JobState.RUNNING if running else JobState.QUEUED,
                  cluster, spec.node if running else None, dict(spec.annotations),
                  tuple(sorted({host_port(p.protocol, p.port, p.host_ip) for p in spec.host_ports})), affinity, dict(spec.labels),
                  spec.namespace, pod_rules)
        if not running:
            queued.append(job)
        elif cluster is not None:
            by_name[cluster].running.append(job)
    return queued


def _gang(j: int, spec: StateJob, problems: Problems) -> Gang | None:
    """The job's gang, from ``gang:`` or the gang annotations (read as everywhere else jobs are read, see
    :mod:`flotilla.core.gangannotations`; both may be given if they agree): elastic when
    ``flotilla.io/gang-min-available`` gives its minimum, held to one domain of a node label by
    ``armadaproject.io/gangNodeUniformityLabel``."""
    if not spec.annotations and spec.gang is None:
        return None
    read = read_gang_annotations(spec.annotations, size=spec.gang.cardinality if spec.gang is not None else 0)
    problems.extend((("jobs", j, "annotations", key), why) for key, why in read.problems)
    if spec.gang is None:
        return read.gang()
    for key, said, given, field in ((GANG_ID_ANNOTATION, read.id, spec.gang.id, "id"),
                                    (GANG_CARDINALITY_ANNOTATION, read.cardinality, spec.gang.cardinality,
                                     "cardinality")):
        if said is not None and said != given:
            problems.append((("jobs", j, "annotations", key),
                             f"says {said!r} but gang.{field} says {given!r}; give the gang once, or the same in both"))
    return Gang(spec.gang.id, spec.gang.cardinality, read.min_available, read.uniformity_label)


def _gang_of(spec: StateJob) -> tuple[str, int] | None:
    """The gang id and cardinality a job names (``gang:`` first, else its annotations), for the members' checks."""
    if spec.gang is not None:
        return spec.gang.id, spec.gang.cardinality
    read = read_gang_annotations(spec.annotations) if spec.annotations else None
    return (read.id, read.cardinality) if read is not None and read.id is not None and read.cardinality else None


def _placement(j: int, spec: StateJob, clusters: list[ClusterSnapshot], node_names: Mapping[str, set[str]],
               problems: Problems) -> str | None:
    """The cluster a running job runs on, or None after recording why its placement is wrong."""
    cluster = spec.cluster
    if cluster is None:
        if len(clusters) != 1:
            known = ", ".join(c.name for c in clusters) or "none"
            problems.append((("jobs", j, "cluster"),
                             f"a running job needs cluster: when there is not exactly one (known: {known})"))
            return None
        cluster = clusters[0].name
    if cluster not in node_names:
        known = ", ".join(c.name for c in clusters) or "none"
        problems.append((("jobs", j, "cluster"), f"running job on unknown cluster {cluster!r} (known: {known})"))
        return None
    if spec.node is None:
        problems.append((("jobs", j, "node"), "a running job needs node: the node it runs on"))
        return None
    if spec.node not in node_names[cluster]:
        problems.append((("jobs", j, "node"), f"running job on unknown node {spec.node!r} in cluster {cluster!r}"))
        return None
    return cluster


def _check_gangs(state: StateFile, problems: Problems) -> None:
    """Members of a gang agree on its cardinality and uniformity label, are exactly that many, and share one
    queue."""
    members: dict[str, list[int]] = {}
    named: dict[int, tuple[str, int]] = {}
    for j, spec in enumerate(state.jobs):
        gang = _gang_of(spec) if spec.gang is not None or spec.annotations else None
        if gang is not None:
            named[j] = gang
            members.setdefault(gang[0], []).append(j)
    for gang_id, indices in members.items():
        head = state.jobs[indices[0]]
        cardinality, agreed = named[indices[0]][1], True
        for j in indices[1:]:
            member = state.jobs[j]
            if named[j][1] != cardinality:
                agreed = False
                where = ("jobs", j, "gang", "cardinality") if member.gang is not None else \
                    ("jobs", j, "annotations", GANG_CARDINALITY_ANNOTATION)
                problems.append((where, f"gang {gang_id!r} members disagree on cardinality: {named[j][1]} here, "
                                        f"{cardinality} at jobs[{indices[0]}]"))
            label, head_label = (job.annotations.get(GANG_NODE_UNIFORMITY_LABEL_ANNOTATION) for job in (member, head))
            if label != head_label:
                problems.append((("jobs", j, "annotations", GANG_NODE_UNIFORMITY_LABEL_ANNOTATION),
                                 f"gang {gang_id!r} members disagree on the uniformity label: "
                                 f"{label if label is not None else 'none'} here, "
                                 f"{head_label if head_label is not None else 'none'} at jobs[{indices[0]}]"))
            if member.queue != head.queue:
                problems.append((("jobs", j, "queue"),
                                 f"gang {gang_id!r} members must share one queue: {member.queue!r} here, "
                                 f"{head.queue!r} at jobs[{indices[0]}]"))
        if agreed and len(indices) != cardinality:
            last = state.jobs[indices[-1]]
            where = ("jobs", indices[-1], "gang", "cardinality") if last.gang is not None else \
                ("jobs", indices[-1], "annotations", GANG_CARDINALITY_ANNOTATION)
            problems.append((where, f"gang {gang_id!r} has cardinality {cardinality} but {len(indices)} "
                                    f"job{'s' if len(indices) != 1 else ''}"))


__all__ = ["GangConfig", "Seconds", "StateCluster", "StateFile", "StateJob", "StateNode", "build_snapshot",
           "load_state", "parse_state", "validate_state"]
