"""The scheduler config (spec section 1, plus section 5's service additions), as pydantic models.

YAML keys are camelCase as users write them; attributes are snake_case.
Every model forbids unknown fields, so a typo is an error with its line, not
a silently ignored setting. Quantities become integers and durations
seconds at load time.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from flotilla.core.model import ClusterSnapshot, Node, PriorityClass, Queue, Taint, Toleration
from flotilla.core.quantities import QuantityError, parse_duration, parse_quantity

KNOWN_ACTIONS = ("evict", "allocate", "preempt", "lease")


def _duration(value: Any) -> float:
    try:
        return parse_duration(value)
    except QuantityError as exc:
        raise ValueError(str(exc)) from None


Duration = Annotated[float, BeforeValidator(_duration)]


class KeyedValueError(ValueError):
    """A problem with one entry of a mapping; the loader appends ``key`` to the error's field path."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


def _quantities(value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        raise ValueError("expected a mapping of resource names to quantities, e.g. {cpu: 500m, memory: 1Gi}")
    out = {}
    for name, amount in value.items():
        try:
            out[str(name)] = parse_quantity(amount, str(name))
        except QuantityError as exc:
            raise KeyedValueError(str(name), str(exc)) from None
    return out


Quantities = Annotated[dict[str, int], BeforeValidator(_quantities)]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class PluginConfig(Model):
    name: str
    args: dict[str, Any] = Field(default_factory=dict)


class PriorityClassConfig(Model):
    name: str
    priority: int
    preemptible: bool = False


class QueueConfig(Model):
    name: str
    weight: float = Field(1.0, gt=0)
    limits: dict[str, float] = Field(default_factory=dict)
    owners: list[str] = Field(default_factory=list)
    group_owners: list[str] = Field(default_factory=list, alias="groupOwners")

    @field_validator("limits")
    @classmethod
    def _fractions(cls, limits: dict[str, float]) -> dict[str, float]:
        for name, fraction in limits.items():
            if not 0 < fraction <= 1:
                raise ValueError(f"limit {name} must be a fraction of the pool in (0, 1], got {fraction}")
        return limits


class TaintConfig(Model):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"

    def to_core(self) -> Taint:
        return Taint(self.key, self.value, self.effect)


class TolerationConfig(Model):
    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: str = ""

    def to_core(self) -> Toleration:
        return Toleration(self.key, self.operator, self.value, self.effect)


class NodeGroupConfig(Model):
    count: int = Field(1, ge=1)
    name: str | None = None
    name_prefix: str = Field("node", alias="namePrefix")
    resources: Quantities
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[TaintConfig] = Field(default_factory=list)
    unschedulable: bool = False

    @model_validator(mode="after")
    def _single_name(self) -> "NodeGroupConfig":
        if self.name is not None and self.count != 1:
            raise ValueError("name is only allowed with count 1; use namePrefix for groups")
        return self

    def names(self, start: int) -> list[str]:
        if self.name is not None:
            return [self.name]
        return [f"{self.name_prefix}-{i}" for i in range(start, start + self.count)]


class SimulatedClusterConfig(Model):
    name: str
    kind: Literal["simulated"]
    nodes: list[NodeGroupConfig] = Field(default_factory=list)

    def expand(self) -> list[Node]:
        """The group's nodes; numbering continues across groups that share a prefix."""
        nodes: list[Node] = []
        next_index: dict[str, int] = {}
        for group in self.nodes:
            start = next_index.get(group.name_prefix, 1)
            names = group.names(start)
            if group.name is None:
                next_index[group.name_prefix] = start + group.count
            taints = tuple(t.to_core() for t in group.taints)
            for name in names:
                nodes.append(Node(name, self.name, dict(group.resources), dict(group.labels), taints, group.unschedulable))
        return nodes

    def snapshot(self) -> ClusterSnapshot:
        return ClusterSnapshot(self.name, self.expand())


class KubernetesClusterConfig(Model):
    name: str
    kind: Literal["kubernetes"]
    kubeconfig: str = "~/.kube/config"
    context: str | None = None
    namespace: str = "default"


ClusterConfig = Annotated[Union[SimulatedClusterConfig, KubernetesClusterConfig], Field(discriminator="kind")]


class EvictConfig(Model):
    probability: float = Field(1.0, ge=0, le=1)


class AllocateConfig(Model):
    lookahead: int = Field(1000, ge=1)
    node_candidates: int = Field(16, ge=1, alias="nodeCandidates")


class PreemptConfig(Model):
    max_candidates: int = Field(1000, ge=1, alias="maxCandidates")


class LeaseConfig(Model):
    timeout: Duration = 60.0
    max_retries: int = Field(3, ge=0, alias="maxRetries")


class GracePeriodConfig(Model):
    default: Duration = 1.0
    max: Duration = 300.0


class DeadlinesConfig(Model):
    cpu: Duration = 3 * 86400.0
    gpu: Duration = 14 * 86400.0


class CycleConfig(Model):
    period: Duration = 1.0


class StoreConfig(Model):
    url: str = "sqlite:///flotilla.db"


class ServerConfig(Model):
    listen: str = "127.0.0.1:8080"


class TokenConfig(Model):
    token: str | None = None
    sha256: str | None = None
    user: str
    groups: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_secret(self) -> "TokenConfig":
        if (self.token is None) == (self.sha256 is None):
            raise ValueError("give exactly one of token or sha256")
        return self


class AuthConfig(Model):
    tokens: list[TokenConfig] = Field(default_factory=list)
    admin_groups: list[str] = Field(default_factory=list, alias="adminGroups")


class NodeIndexConfig(Model):
    indexed_resources: list[str] = Field(default_factory=lambda: ["nvidia.com/gpu", "cpu", "memory"],
                                         alias="indexedResources")


def _default_plugins() -> list[PluginConfig]:
    return [PluginConfig(name="assetfairness", args={"resourceWeights": {"cpu": 1, "nvidia.com/gpu": 1, "memory": 0}}),
            PluginConfig(name="bestfit"), PluginConfig(name="gang"), PluginConfig(name="priorityclass"),
            PluginConfig(name="predicates")]


def _default_classes() -> list[PriorityClassConfig]:
    return [PriorityClassConfig(name="armada-default", priority=30000, preemptible=False),
            PriorityClassConfig(name="armada-preemptible", priority=20000, preemptible=True)]


class FlotillaConfig(Model):
    actions: list[str] = Field(default_factory=lambda: list(KNOWN_ACTIONS))
    plugins: list[PluginConfig] = Field(default_factory=_default_plugins)
    priority_classes: list[PriorityClassConfig] = Field(default_factory=_default_classes, alias="priorityClasses")
    default_priority_class: str = Field("armada-default", alias="defaultPriorityClass")
    queues: list[QueueConfig] = Field(default_factory=list)
    evict: EvictConfig = Field(default_factory=EvictConfig)
    allocate: AllocateConfig = Field(default_factory=AllocateConfig)
    preempt: PreemptConfig = Field(default_factory=PreemptConfig)
    lease: LeaseConfig = Field(default_factory=LeaseConfig)
    grace_period: GracePeriodConfig = Field(default_factory=GracePeriodConfig, alias="gracePeriod")
    deadlines: DeadlinesConfig = Field(default_factory=DeadlinesConfig)
    cycle: CycleConfig = Field(default_factory=CycleConfig)
    clusters: list[ClusterConfig] = Field(default_factory=list)
    store: StoreConfig = Field(default_factory=StoreConfig)
    server: ServerConfig = Field(default_factory=ServerConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    node_index: NodeIndexConfig = Field(default_factory=NodeIndexConfig, alias="nodeIndex")

    _source: Any = PrivateAttr(default=None)

    @property
    def source(self):
        """Where each field came from, to report later errors (e.g. an unknown plugin) at their line."""
        if self._source is None:
            from flotilla.config.source import SourceMap
            self._source = SourceMap(None)
        return self._source

    def check(self) -> list[tuple[tuple, str]]:
        """Cross-field problems as ``(path, message)``, in file order."""
        problems: list[tuple[tuple, str]] = []
        for i, action in enumerate(self.actions):
            if action not in KNOWN_ACTIONS:
                problems.append((("actions", i), f"unknown action {action!r} (known: {', '.join(KNOWN_ACTIONS)})"))
            elif action in self.actions[:i]:
                problems.append((("actions", i), f"action {action!r} listed twice"))
        _unique(problems, "plugins", [p.name for p in self.plugins], "plugin")
        _unique(problems, "priorityClasses", [p.name for p in self.priority_classes], "priority class")
        names = [p.name for p in self.priority_classes]
        if self.default_priority_class not in names:
            problems.append((("defaultPriorityClass",),
                             f"unknown priority class {self.default_priority_class!r} (known: {', '.join(names)})"))
        _unique(problems, "queues", [q.name for q in self.queues], "queue")
        _unique(problems, "clusters", [c.name for c in self.clusters], "cluster")
        for c, cluster in enumerate(self.clusters):
            if isinstance(cluster, SimulatedClusterConfig):
                seen: dict[str, int] = {}
                for group_index, group in enumerate(cluster.nodes):
                    for name in group.names(1) if group.name else []:
                        if name in seen:
                            problems.append((("clusters", c, "nodes", group_index, "name"), f"duplicate node name {name!r}"))
                        seen[name] = group_index
                all_names = [node.name for node in cluster.expand()]
                if len(all_names) != len(set(all_names)) and not any("duplicate node" in m for _, m in problems):
                    dup = next(n for n in all_names if all_names.count(n) > 1)
                    problems.append((("clusters", c, "nodes"), f"duplicate node name {dup!r}"))
        return problems

    def to_core_priority_classes(self) -> list[PriorityClass]:
        return [PriorityClass(pc.name, pc.priority, pc.preemptible) for pc in self.priority_classes]

    def to_core_queues(self) -> list[Queue]:
        return [Queue(q.name, q.weight, dict(q.limits)) for q in self.queues]

    def simulated_clusters(self) -> list[SimulatedClusterConfig]:
        return [c for c in self.clusters if isinstance(c, SimulatedClusterConfig)]


def _unique(problems: list, section: str, names: list[str], what: str) -> None:
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in first:
            problems.append(((section, i, "name"), f"duplicate {what} {name!r} (first at {section}[{first[name]}])"))
        else:
            first[name] = i
