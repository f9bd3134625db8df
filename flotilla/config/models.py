"""The scheduler config (spec section 1, plus section 5's service additions), as pydantic models.

YAML keys are camelCase as users write them; attributes are snake_case.
Every model forbids unknown fields, so a typo is an error with its line, not
a silently ignored setting. Quantities become integers and durations
seconds at load time, so nothing downstream parses units again. Checks that
span fields (names that must be unique or must exist) live in
:meth:`FlotillaConfig.check`, which returns paths so the loader can point at
the offending line.
"""

from __future__ import annotations

import difflib
import re
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Iterator, Literal, Union

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, PrivateAttr, Tag, field_validator,
                      model_validator)

from flotilla.core.backend import FAILURE_CAUSES

from flotilla.core.model import (DEFAULT_GRACE_PERIOD, HOSTNAME_LABEL, ClusterSnapshot, Node, PriorityClass, Queue, Taint,
                                 Toleration)
from flotilla.core.quantities import QuantityError, parse_duration, parse_quantity, resource_name_problem

if TYPE_CHECKING:
    from flotilla.config.errors import FieldPath
    from flotilla.config.source import SourceMap

#: The default cycle. Any action of :func:`flotilla.actions.available_actions` (built in, or from the
#: ``flotilla.actions`` entry-point group) may be named in ``actions``.
KNOWN_ACTIONS = ("evict", "allocate", "preempt", "lease")


class KeyedValueError(ValueError):
    """A problem with one entry of a mapping; the error's field path gets ``key`` appended.

    Pydantic reports a before-validator's failure at the whole mapping
    (``resources``); users need the entry (``resources.cpu``).
    """

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


def _duration(value: Any) -> float:
    try:
        return parse_duration(value)
    except QuantityError as exc:
        raise ValueError(str(exc)) from None


def _quantities(value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        raise ValueError("expected a mapping of resource names to quantities, e.g. {cpu: 500m, memory: 1Gi}")
    out: dict[str, int] = {}
    for name, amount in value.items():
        if (why := resource_name_problem(name)) is not None:
            raise KeyedValueError(str(name), why)
        try:
            out[str(name)] = parse_quantity(amount, str(name))
        except QuantityError as exc:
            raise KeyedValueError(str(name), str(exc)) from None
    return out


#: ``30s``, ``5m``, ``2h``, ``3d`` or a number, as float seconds.
Duration = Annotated[float, BeforeValidator(_duration, json_schema_input_type=Union[float, str])]
#: ``{cpu: 500m, memory: 64Mi}`` as exact integers (millicores for cpu, base units otherwise).
Quantities = Annotated[dict[str, int],
                       BeforeValidator(_quantities, json_schema_input_type=dict[str, Union[float, str]])]


def _requests(value: Any) -> dict[str, int]:
    out = _quantities(value)
    if "pods" in out:
        raise KeyedValueError("pods", "a job does not request pods: each of its pods takes one pod slot of its node "
                                      "(a node's resources may declare pods)")
    return out


#: A job's requests: quantities, never ``pods`` (Kubernetes refuses it in a container's resources too).
Requests = Annotated[dict[str, int],
                     BeforeValidator(_requests, json_schema_input_type=dict[str, Union[float, str]])]
#: A name users refer to elsewhere (queue, class, cluster, node): never empty.
Name = Annotated[str, Field(min_length=1)]


class Model(BaseModel):
    """Base of every config model: unknown keys are errors; camelCase aliases or snake_case names both load."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)


class PluginConfig(Model):
    name: Name
    args: dict[str, Any] = Field(default_factory=dict)
    #: Multiplies the plugin's node scores once normalised to 0..100 (kube-scheduler's score plugin weight);
    #: None: 1. Only a plugin that registers a node score may have one (the scheduler checks when it loads).
    weight: float | None = Field(None, gt=0, le=1000)


def _action_entry(value: Any) -> Any:
    """``- allocate`` is ``- {name: allocate}``: an action without arguments."""
    return {"name": value} if isinstance(value, str) else value


class ActionConfig(Model):
    """One entry of ``actions:``: the action's name, and the ``args`` its constructor takes
    (:mod:`flotilla.actions`; checked there as a plugin's are, an unknown one is an error at its line)."""

    name: Name
    args: dict[str, Any] = Field(default_factory=dict)


class PriorityClassConfig(Model):
    name: Name
    priority: int
    preemptible: bool = False

    def to_core(self) -> PriorityClass:
        return PriorityClass(self.name, self.priority, self.preemptible)


#: Most rules in one retry policy, and most retries one rule may allow.
MAX_RETRY_RULES = 32
MAX_RETRY_LIMIT = 100


#: An exit code, 0-255, as text without leading zeros; an entry of ``exitCodes`` given as text is one or two of them.
_CODE = r"(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
EXIT_CODE_TEXT = rf"^{_CODE}(-{_CODE})?$"


def _exit_codes(value: Any) -> int | str:
    """One entry of a rule's ``exitCodes``: a code (``42``) or an inclusive range (``"1-9"``), each within 0-255.

    Kept as written, normalised (``"42"`` becomes 42, ``"9-1"`` becomes ``"1-9"``), so the policy reads back as
    the user meant it. Exactly what the API's schema states: an integer 0-255, or text matching
    :data:`EXIT_CODE_TEXT`.
    """
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value <= 255:
            raise ValueError(f"exit code {value} is out of range: exit codes are 0-255")
        return value
    match = re.match(EXIT_CODE_TEXT, value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"expected an exit code (0-255) or a range of them such as \"1-9\", got {value!r}")
    codes = [int(part) for part in value.split("-")]
    low, high = min(codes), max(codes)
    return low if low == high else f"{low}-{high}"


def _failure_cause(value: Any) -> Any:
    """One entry of a rule's ``reasons``: a name of :data:`flotilla.core.backend.FAILURE_CAUSES`."""
    if value in FAILURE_CAUSES:
        return value
    close = difflib.get_close_matches(str(value), FAILURE_CAUSES, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"unknown reason {value!r} (known: {', '.join(FAILURE_CAUSES)}){hint}")


#: The rules between a rule's fields, stated in its JSON Schema as the validator checks them.
_RULE_SCHEMA = {"allOf": [
    {"oneOf": [{"required": ["exitCodes"]}, {"required": ["reasons"]}]},
    {"oneOf": [{"properties": {"action": {"const": "retry"}}, "required": ["limit"]},
               {"properties": {"action": {"const": "fail"}}, "not": {"required": ["limit"]}}]}]}


class RetryRuleConfig(Model):
    """One rule of a retry policy: what failures it matches (``exitCodes`` or ``reasons``) and what it decides.

    ``action: retry`` runs the job again while it has had fewer than ``limit`` retries (every retry of the job
    counts, whatever its cause), then fails it; ``action: fail`` fails it at once.
    """

    model_config = ConfigDict(json_schema_extra=_RULE_SCHEMA)

    #: Exit codes of the job's first failed container: codes (``42``) and inclusive ranges (``"1-9"``), 0-255.
    exit_codes: list[Annotated[Union[Annotated[int, Field(ge=0, le=255)], Annotated[str, Field(pattern=EXIT_CODE_TEXT)]],
                               BeforeValidator(_exit_codes)]] = Field(
        None, alias="exitCodes", min_length=1, max_length=256)
    #: Failure causes: OOMKilled, DeadlineExceeded, Evicted, NodeLost, Stuck, LeaseExpired.
    reasons: list[Annotated[Literal[FAILURE_CAUSES], BeforeValidator(_failure_cause)]] = Field(  # type: ignore[valid-type]
        None, min_length=1, max_length=16)
    action: Literal["retry", "fail"]
    #: Retries a ``retry`` rule allows the job (0-100); a ``fail`` rule has none.
    limit: int = Field(None, ge=0, le=MAX_RETRY_LIMIT)

    @model_validator(mode="after")
    def _one_matcher_and_a_limit(self) -> RetryRuleConfig:
        if (self.exit_codes is None) == (self.reasons is None):
            raise ValueError("give exactly one of exitCodes or reasons")
        if self.action == "retry" and self.limit is None:
            raise ValueError("a retry rule needs a limit (the retries it allows, 0-100)")
        if self.action == "fail" and self.limit is not None:
            raise ValueError("a fail rule takes no limit")
        return self

    def describe(self) -> str:
        """``exit 42: retry, limit 2``, ``OOMKilled, Evicted: fail``: the rule as events name it."""
        what = f"exit {','.join(map(str, self.exit_codes))}" if self.exit_codes is not None else ", ".join(self.reasons)
        return f"{what}: retry, limit {self.limit}" if self.action == "retry" else f"{what}: fail"


#: A retry policy: ordered rules, the first that matches a failure decides (none: the service's defaults).
RetryPolicy = Annotated[list[RetryRuleConfig], Field(max_length=MAX_RETRY_RULES)]


class QueueConfig(Model):
    name: Name
    weight: float = Field(1.0, gt=0)
    limits: dict[str, float] = Field(default_factory=dict)
    owners: list[str] = Field(default_factory=list)
    group_owners: list[str] = Field(default_factory=list, alias="groupOwners")
    #: Namespaces whose in-cluster pods (``schedulerName`` pods on a ``kind: kubernetes`` cluster) may use the
    #: queue; a pod from any other namespace is refused and told so. Empty: none may.
    namespaces: list[Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)]] = \
        Field(default_factory=list)
    #: The queue this one shares out the fair share of (hierarchical queues); only leaf queues hold jobs.
    parent: Name | None = None
    #: Whether a failed run of the queue's jobs runs again: ordered rules, first match wins (docs/policies.md).
    retry_policy: RetryPolicy = Field(default_factory=list, alias="retryPolicy")
    #: This queue's floor under preemption to fair share, in place of evict.protectedFractionOfFairShare
    #: (flotilla.actions.evict); None: that one.
    protected_fraction_of_fair_share: float | None = Field(None, ge=0, le=10, alias="protectedFractionOfFairShare")

    @field_validator("limits")
    @classmethod
    def _fractions(cls, limits: dict[str, float]) -> dict[str, float]:
        for name, fraction in limits.items():
            if (why := resource_name_problem(name)) is not None:   # a limit on "<img src=x>" limits nothing
                raise KeyedValueError(name, why)
            if not 0 < fraction <= 1:
                raise KeyedValueError(name, f"expected a fraction of the pool in (0, 1], got {fraction:g}")
        return limits

    def to_core(self) -> Queue:
        return Queue(self.name, self.weight, dict(self.limits), self.parent)


class TaintConfig(Model):
    key: Name
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
    """``count`` identical nodes named ``{namePrefix}-{i}``, or one node called ``name``."""

    count: int = Field(1, ge=1)
    name: Name | None = None
    name_prefix: Name = Field("node", alias="namePrefix")
    resources: Quantities
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[TaintConfig] = Field(default_factory=list)
    unschedulable: bool = False

    @model_validator(mode="after")
    def _single_name(self) -> NodeGroupConfig:
        if self.name is not None and self.count != 1:
            raise ValueError("name is only allowed with count 1; use namePrefix for groups")
        return self

    def names(self, start: int = 1) -> list[str]:
        """The group's node names, numbering from ``start``."""
        if self.name is not None:
            return [self.name]
        return [f"{self.name_prefix}-{i}" for i in range(start, start + self.count)]


class NodeTemplateConfig(Model):
    """A node shape an autoscaler could add to ``cluster`` (the wishlist counts what it would unblock)."""

    name: Name
    cluster: Name
    resources: Quantities
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[TaintConfig] = Field(default_factory=list)

    def to_core(self) -> Node:
        return Node(self.name, self.cluster, dict(self.resources), dict(self.labels),
                    tuple(t.to_core() for t in self.taints))


class SimulatedClusterConfig(Model):
    name: Name
    kind: Literal["simulated"]
    nodes: list[NodeGroupConfig] = Field(default_factory=list)

    def node_names(self) -> Iterator[tuple[int, str]]:
        """``(group index, node name)`` for every node, in order.

        Numbering continues across groups that share a prefix (two default
        groups give ``node-1, node-2`` then ``node-3``), so a cpu group and a
        gpu group need no prefixes of their own.
        """
        next_index: dict[str, int] = {}
        for g, group in enumerate(self.nodes):
            start = next_index.get(group.name_prefix, 1)
            if group.name is None:
                next_index[group.name_prefix] = start + group.count
            for name in group.names(start):
                yield g, name

    def expand(self) -> list[Node]:
        """The cluster's nodes as core objects, each with its own mappings."""
        nodes: list[Node] = []
        for g, name in self.node_names():
            group = self.nodes[g]
            # Every node carries its name as kubernetes.io/hostname, as a kubelet labels it.
            nodes.append(Node(name, self.name, dict(group.resources), {HOSTNAME_LABEL: name, **group.labels},
                              tuple(t.to_core() for t in group.taints), group.unschedulable))
        return nodes

    def snapshot(self) -> ClusterSnapshot:
        """The cluster as a fresh core snapshot: all nodes, nothing running."""
        return ClusterSnapshot(self.name, self.expand(), running=[])


class KubernetesClusterConfig(Model):
    name: Name
    kind: Literal["kubernetes"]
    kubeconfig: str = "~/.kube/config"
    context: str | None = None
    #: Inside the cluster: the pod's service-account token and CA instead of a kubeconfig (deploy/rbac.yaml).
    in_cluster: bool = Field(False, alias="inCluster")
    namespace: str = "default"
    #: Pod writes in flight at once. 32 kept a 2-core KWOK cluster's API server busy (bench/kwok_throughput.py:
    #: 392-412 pods bound/s against 310-320 with 16); a bigger API server takes more.
    workers: int = Field(32, ge=1, le=1024)
    #: "node-name": pods are created bound (one write); "binding": created pending, then bound (two writes).
    bind: Literal["node-name", "binding"] = "node-name"
    #: A label selector: only these nodes are Flotilla's to schedule onto.
    node_selector: str | None = Field(None, alias="nodeSelector")
    #: A pod not started this long after its creation (ErrImagePull, Pending, ...) stops its job, which is retried.
    stuck_pod_expiry: Duration = Field(300.0, alias="stuckPodExpiry")
    #: A node NotReady or deleted this long has its Flotilla pods removed; their jobs are retried elsewhere.
    node_lost_timeout: Duration = Field(300.0, alias="nodeLostTimeout")
    #: A start whose claims are not bound this long after its volume choices were written returns its job to its
    #: queue (kube-scheduler's bindTimeoutSeconds, 600 s by default).
    volume_bind_timeout: Duration = Field(600.0, alias="volumeBindTimeout")
    #: How long a finished pod (Succeeded, Failed) of Flotilla's stays, holding nothing, so that its log can be read
    #: (``flotilla logs``), counted from the pod's end; 0 deletes it at once, which keeps the API server's pod count
    #: at the running jobs (docs/kubernetes.md, Logs: what a kept pod costs).
    finished_pod_retention: Duration = Field(3600.0, alias="finishedPodRetention")
    #: A job's ingress hosts are <pod>-<port>.<ingressDomain>; none: its ingress routes by path.
    ingress_domain: str | None = Field(None, alias="ingressDomain")
    #: Pods whose ``spec.schedulerName`` is this, unbound, are jobs Flotilla schedules (in-cluster pods, see
    #: docs/kubernetes.md); the pods Flotilla creates carry it too.
    scheduler_name: str = Field("flotilla", alias="schedulerName", min_length=1, max_length=253,
                                pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


#: The cluster kinds Flotilla serves itself; any other ``kind`` is a package's (:class:`PackagedClusterConfig`).
BUILTIN_CLUSTER_KINDS = ("simulated", "kubernetes")


class PackagedClusterConfig(Model):
    """A cluster whose ``kind`` an installed package provides (the ``flotilla.backends`` entry-point group).

    ``args`` is the backend's own: :meth:`FlotillaConfig.check` validates it
    with the model the kind declares (its ``Args``), at its lines in the file,
    and keeps the result for the backend (:attr:`parsed_args`).
    """

    #: The tag of this model in the clusters' union (never a kind: a kind named so is a package's too).
    UNION_TAG: ClassVar[str] = "package"

    name: Name
    kind: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)

    _parsed_args: Any = PrivateAttr(default=None)

    @property
    def parsed_args(self) -> Any:
        """``args`` as the kind's ``Args`` model read them (set by the config's check; None before)."""
        return self._parsed_args

    def keep_parsed_args(self, parsed: Any) -> None:
        """Keep ``args`` as the kind's model read them, for the backend."""
        self._parsed_args = parsed


def _cluster_tag(value: Any) -> str | None:
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    if kind is None:
        return None
    return kind if kind in BUILTIN_CLUSTER_KINDS else PackagedClusterConfig.UNION_TAG


ClusterConfig = Annotated[Union[Annotated[SimulatedClusterConfig, Tag("simulated")],
                                Annotated[KubernetesClusterConfig, Tag("kubernetes")],
                                Annotated[PackagedClusterConfig, Tag(PackagedClusterConfig.UNION_TAG)]],
                          Discriminator(_cluster_tag)]


class EvictConfig(Model):
    probability: float = Field(1.0, ge=0, le=1)
    #: Preemption to fair share keeps every queue at this fraction of its fair share at least (0: no floor; above 1
    #: it spares queues somewhat above their fair share too); see flotilla.actions.evict.
    protected_fraction_of_fair_share: float = Field(1.0, ge=0, le=10, alias="protectedFractionOfFairShare")


class AllocateConfig(Model):
    lookahead: int = Field(1000, ge=1)
    #: How many nodes a job's local volumes are looked for on, at most (flotilla.core.volumes: VolumePicks.find).
    node_candidates: int = Field(16, ge=1, alias="nodeCandidates")
    #: kube-scheduler's percentageOfNodesToScore: how many fitting nodes node scores weigh, in percent of the
    #: nodes (at least 100; every node below 100 nodes); 0 adapts to the cluster's size (flotilla.core.nodesearch).
    percentage_of_nodes_to_score: int = Field(0, ge=0, le=100, alias="percentageOfNodesToScore")


class PreemptConfig(Model):
    enabled: bool = True
    max_candidates: int = Field(1000, ge=1, alias="maxCandidates")


class ReservationConfig(Model):
    """The ``reserve`` action: a queue's head unit waiting longer than ``after`` reserves nodes."""

    after: Duration | None = None
    max_units: int = Field(1, ge=1, alias="maxUnits")


class LeaseConfig(Model):
    timeout: Duration = 60.0
    max_retries: int = Field(3, ge=0, alias="maxRetries")


class LeaderElectionConfig(Model):
    """Schedulers' leader election (``serve --role scheduler``): see flotilla.service.roles.election."""

    lease_duration: Duration = Field(15.0, alias="leaseDuration")
    renew_period: Duration = Field(2.0, alias="renewPeriod")

    @model_validator(mode="after")
    def _renew_within_lease(self) -> LeaderElectionConfig:
        if not 0 < self.renew_period < self.lease_duration:
            raise ValueError(f"renewPeriod ({self.renew_period:g}s) must be above 0 and shorter than leaseDuration "
                             f"({self.lease_duration:g}s)")
        return self


class GracePeriodConfig(Model):
    #: A job's pods' grace period when its podSpec names none: Kubernetes' own default.
    default: Duration = DEFAULT_GRACE_PERIOD
    max: Duration = 300.0


class DeadlinesConfig(Model):
    cpu: Duration = 3 * 86400.0
    gpu: Duration = 14 * 86400.0


class CycleConfig(Model):
    #: Positive: a period of 0 would run cycles back to back, holding the store and the clusters' API servers.
    period: Duration = 1.0
    #: ``/readyz`` of a process that schedules answers 503 after this many cycles in a row failed closed (a
    #: plugin failing in ``flotilla_session_open``, say); the next cycle that ends well makes it ready again.
    unready_after_failed_cycles: int = Field(3, ge=1, le=1000, alias="unreadyAfterFailedCycles")

    @field_validator("period")
    @classmethod
    def _positive(cls, period: float) -> float:
        if period <= 0:
            raise ValueError("expected a positive duration, e.g. 1s")
        return period


class StoreConfig(Model):
    url: str = "sqlite:///flotilla.db"


class StreamsConfig(Model):
    """Caps on long-lived answers (flotilla/service/streams.py); past one, 429 naming it."""

    watch_per_user: int = Field(100, ge=1, le=100_000, alias="watchPerUser")
    follows_per_user: int = Field(4, ge=1, le=10_000, alias="followsPerUser")
    follows: int = Field(16, ge=1, le=10_000)
    follow_idle_timeout: Duration = Field(600.0, gt=0, le=86400, alias="followIdleTimeout")


class ServerConfig(Model):
    listen: str = "127.0.0.1:8080"
    #: Largest request body, in bytes (``16Mi``); larger ones are answered 413 before they are read.
    max_body_size: Annotated[int, BeforeValidator(lambda v: parse_quantity(v, "memory"),
                                                  json_schema_input_type=Union[int, str])] = Field(
        16 * 1024 * 1024, ge=1024, le=1024**3, alias="maxBodySize")
    #: Most jobs in one submission; more are answered 413.
    max_jobs_per_submission: int = Field(10_000, ge=1, le=1_000_000, alias="maxJobsPerSubmission")
    #: A request's headers must be complete this long after the connection opens (or after the previous answer);
    #: past it the connection is answered 408 and closed (flotilla/service/headers.py).
    header_timeout: Duration = Field(10.0, gt=0, le=3600, alias="headerTimeout")
    streams: StreamsConfig = Field(default_factory=StreamsConfig)


class TokenConfig(Model):
    """A bearer token, given in clear (``token``) or as its hex SHA-256 (``sha256``), never both."""

    token: str | None = None
    sha256: str | None = None
    user: Name
    groups: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_secret(self) -> TokenConfig:
        if (self.token is None) == (self.sha256 is None):
            raise ValueError("give exactly one of token or sha256")
        return self


#: Signature algorithms an OIDC token may use: public-key ones only, so neither ``none`` nor an HMAC
#: keyed with a public key (``HS256`` with the JWKS's RSA key as the secret) can ever verify.
OIDC_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")


def _fetchable_url(value: str) -> str:
    """An ``https://`` URL, or ``http://`` to a loopback host (a local IdP, the tests): keys travel unforged."""
    from urllib.parse import urlsplit

    parts = urlsplit(value)
    host = (parts.hostname or "").lower()
    if parts.scheme == "https" and host:
        return value
    if parts.scheme == "http" and (host == "localhost" or host.startswith("127.") or host == "::1"):
        return value
    raise ValueError(f"expected an https:// URL (http:// only to localhost or 127.0.0.1), got {value!r}")


class OidcConfig(Model):
    """Bearer tokens that are JWTs signed by an OpenID Connect provider (``auth.oidc``).

    A token is accepted when its signature verifies with a key of ``jwksUrl``
    (found by the token's ``kid``), its ``alg`` is one of ``algorithms``, its
    ``iss`` is ``issuer``, its ``aud`` is or contains ``audience``, and it has
    not expired (``exp`` is required; ``nbf`` and ``iat`` are honoured), each
    within ``leeway``. The user is the ``usernameClaim`` claim, the groups the
    ``groupsClaim`` claim, each with its prefix.
    """

    #: Compared exactly with the token's ``iss`` (the provider's issuer URL, as its discovery document says).
    issuer: str = Field(min_length=1, max_length=2048)
    audience: str = Field(min_length=1, max_length=1024)
    jwks_url: Annotated[str, BeforeValidator(_fetchable_url)] = Field(alias="jwksUrl", max_length=2048)
    username_claim: str = Field("sub", min_length=1, max_length=255, alias="usernameClaim")
    groups_claim: str = Field("groups", min_length=1, max_length=255, alias="groupsClaim")
    #: Put before every OIDC user name and group, so that the provider's names cannot collide with static
    #: tokens' users or with groups named in ``adminGroups``/``groupOwners`` for other purposes.
    username_prefix: str = Field("", max_length=64, alias="usernamePrefix")
    groups_prefix: str = Field("", max_length=64, alias="groupsPrefix")
    algorithms: list[Literal[OIDC_ALGORITHMS]] = Field(  # type: ignore[valid-type]
        default_factory=lambda: ["RS256", "ES256"], min_length=1)
    #: Clock skew allowed on exp, nbf and iat.
    leeway: Duration = Field(30.0, ge=0, le=300)
    #: The keys are fetched again when this old, so a key the provider withdrew stops verifying.
    jwks_refresh_interval: Duration = Field(600.0, ge=10, le=86400, alias="jwksRefreshInterval")
    #: Least time between two fetches; a token naming an unknown key id fetches at most this often.
    jwks_min_refresh_interval: Duration = Field(30.0, ge=1, le=3600, alias="jwksMinRefreshInterval")
    jwks_timeout: Duration = Field(5.0, gt=0, le=60, alias="jwksTimeout")


class AuthConfig(Model):
    tokens: list[TokenConfig] = Field(default_factory=list)
    admin_groups: list[str] = Field(default_factory=list, alias="adminGroups")
    oidc: OidcConfig | None = None


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


class ClusterPriorityClassesConfig(Model):
    """How the PriorityClass objects of ``kind: kubernetes`` clusters rank against Flotilla's own classes.

    A cluster class that the config does not name is a Flotilla priority class of priority ``value +
    priorityOffset``, preemptible (system classes excepted) by pods of higher priority, preempting unless
    ``preemptionPolicy: Never``, and out of preemption to fair share unless ``fairSharePreemption``
    (:mod:`flotilla.kubernetes.priorityclasses`).
    """

    #: Added to every cluster class's value: 0 compares Kubernetes values with Flotilla priorities as they are;
    #: -1000000000 ranks every user-definable class (at most 1000000000) at or below 0, under Flotilla's stock
    #: classes; the system classes keep their rank above user classes either way.
    priority_offset: int = Field(0, alias="priorityOffset", ge=-(1 << 40), le=1 << 40)
    #: Whether preemption to fair share (the evict action) may take pods of cluster classes; off, only a pod of
    #: higher priority displaces them, as in Kubernetes.
    fair_share_preemption: bool = Field(False, alias="fairSharePreemption")


class PodTopologySpreadConfig(Model):
    """Cluster default spread constraints, as kube-scheduler's PodTopologySpread ``defaultConstraints``: given to
    in-cluster pods that carry no ``topologySpreadConstraints``, each selecting the pods of the pod's services and
    controller (:mod:`flotilla.kubernetes.intake`). Off unless configured: ``List`` with no constraints."""

    #: ``List``: ``defaultConstraints``; ``System``: kube-scheduler's system defaults (hostname maxSkew 3, zone
    #: maxSkew 5, both ``ScheduleAnyway``).
    defaulting_type: Literal["List", "System"] = Field("List", alias="defaultingType")
    default_constraints: list[dict[str, Any]] = Field(default_factory=list, alias="defaultConstraints",
                                                      max_length=32)

    def constraints(self) -> tuple[dict[str, Any], ...]:
        """The constraints given to a pod that has none (empty: off)."""
        if self.defaulting_type == "System":
            from flotilla.core.podrules import SYSTEM_DEFAULT_CONSTRAINTS
            return SYSTEM_DEFAULT_CONSTRAINTS
        return tuple(self.default_constraints)


class PlacementRuleConfig(Model):
    """A placement rule: the queue of an in-cluster pod that names none (:mod:`flotilla.service.placement`)."""

    #: namespace: a queue per namespace (prefix + namespace), made on first use; fixed: the queue ``queue``.
    kind: Literal["namespace", "fixed"]
    queue: Name | None = None
    parent: Name | None = None
    prefix: str = Field("", max_length=100, pattern=r"^([a-z0-9][-a-z0-9.]*)?$")
    weight: float = Field(1.0, gt=0)


class FlotillaConfig(Model):
    """The whole scheduler config; ``config.source`` reports later problems at their line in the file."""

    actions: list[Annotated[ActionConfig,
                            BeforeValidator(_action_entry, json_schema_input_type=Union[str, ActionConfig])]] = Field(
        default_factory=lambda: [ActionConfig(name=name) for name in KNOWN_ACTIONS])
    plugins: list[PluginConfig] = Field(default_factory=_default_plugins)
    priority_classes: list[PriorityClassConfig] = Field(default_factory=_default_classes, alias="priorityClasses")
    default_priority_class: str = Field("armada-default", alias="defaultPriorityClass")
    cluster_priority_classes: ClusterPriorityClassesConfig = Field(default_factory=ClusterPriorityClassesConfig,
                                                                   alias="clusterPriorityClasses")
    queues: list[QueueConfig] = Field(default_factory=list)
    #: Placement rules for in-cluster pods whose pod, owner, PodGroup and namespace name no queue.
    placement: list[PlacementRuleConfig] = Field(default_factory=list)
    #: Cluster default spread constraints (kube-scheduler's PodTopologySpread args); off unless configured.
    pod_topology_spread: PodTopologySpreadConfig = Field(default_factory=PodTopologySpreadConfig,
                                                         alias="podTopologySpread")
    evict: EvictConfig = Field(default_factory=EvictConfig)
    allocate: AllocateConfig = Field(default_factory=AllocateConfig)
    preempt: PreemptConfig = Field(default_factory=PreemptConfig)
    lease: LeaseConfig = Field(default_factory=LeaseConfig)
    reservation: ReservationConfig = Field(default_factory=ReservationConfig)
    grace_period: GracePeriodConfig = Field(default_factory=GracePeriodConfig, alias="gracePeriod")
    deadlines: DeadlinesConfig = Field(default_factory=DeadlinesConfig)
    cycle: CycleConfig = Field(default_factory=CycleConfig)
    clusters: list[ClusterConfig] = Field(default_factory=list)
    node_templates: list[NodeTemplateConfig] = Field(default_factory=list, alias="nodeTemplates")
    store: StoreConfig = Field(default_factory=StoreConfig)
    server: ServerConfig = Field(default_factory=ServerConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    node_index: NodeIndexConfig = Field(default_factory=NodeIndexConfig, alias="nodeIndex")
    leader_election: LeaderElectionConfig = Field(default_factory=LeaderElectionConfig, alias="leaderElection")

    _source: Any = PrivateAttr(default=None)

    @property
    def source(self) -> SourceMap:
        """Where each field came from: ``config.source.error(("plugins", 2, "name"), "unknown plugin 'x'")``.

        A config built in code (no file) gets a map without file or lines,
        so errors still carry the field path.
        """
        if self._source is None:
            from flotilla.config.source import SourceMap
            self._source = SourceMap(None)
        return self._source

    def check(self) -> list[tuple[FieldPath, str]]:
        """Cross-field problems as ``(path, message)``; the loader reports the earliest in the file."""
        from flotilla.actions import action_name_clash, available_actions
        from flotilla.config.actionorder import action_order_problems
        from flotilla.config.clusterkinds import cluster_kind_problems
        from flotilla.config.pluginargs import plugin_arg_problems
        from flotilla.config.resourcenames import config_problems as resource_name_problems

        problems: list[tuple[FieldPath, str]] = []
        known = available_actions()
        actions = self.action_names
        for i, action in enumerate(actions):
            if action not in known:
                problems.append((("actions", i), f"unknown action {action!r} (known: {', '.join(known)})"))
            elif action in actions[:i]:
                problems.append((("actions", i), f"duplicate action {action!r} (first at actions[{actions.index(action)}])"))
            elif (clash := action_name_clash(action)) is not None:
                problems.append((("actions", i), clash))
        if not problems:   # an order of known, distinct actions: refuse one that cannot work
            problems += action_order_problems(actions)
        if "reserve" in actions and self.reservation.after is None:
            problems.append((("actions", actions.index("reserve")),
                             "the reserve action needs reservation.after (how long a unit waits before it reserves)"))
        problems += _duplicates("plugins", [p.name for p in self.plugins], "plugin")
        problems += plugin_arg_problems(self.plugins)
        problems += _duplicates("priorityClasses", [p.name for p in self.priority_classes], "priority class")
        names = [p.name for p in self.priority_classes]
        if self.default_priority_class not in names:
            problems.append((("defaultPriorityClass",), f"unknown priority class {self.default_priority_class!r} "
                                                        f"(known: {', '.join(names) or 'none'})"))
        problems += _duplicates("queues", [q.name for q in self.queues], "queue")
        problems += queue_tree_problems("queues", self.queues)
        queue_names = {q.name for q in self.queues}
        for i, rule in enumerate(self.placement):
            if rule.kind == "fixed" and rule.queue is None:
                problems.append((("placement", i, "queue"), "a fixed rule names its queue"))
            for key in ("parent", "prefix", "weight") if rule.kind == "fixed" else ("queue",):
                if key in rule.model_fields_set:
                    problems.append((("placement", i, key), f"a {rule.kind} rule has no {key}"))
            if rule.parent is not None and rule.parent not in queue_names:
                known = ", ".join(sorted(queue_names)) or "none"
                problems.append((("placement", i, "parent"), f"unknown parent queue {rule.parent!r} (the config's "
                                                             f"queues: {known})"))
        spread = self.pod_topology_spread
        if spread.defaulting_type == "System" and spread.default_constraints:
            problems.append((("podTopologySpread", "defaultConstraints"),
                             "must be empty when defaultingType is System (kube-scheduler's system defaults)"))
        from flotilla.core.podrules import default_constraint_problems
        for where, message in default_constraint_problems(spread.default_constraints, "defaultConstraints"):
            parts = tuple(int(p) if p.isdigit() else p for p in where.replace("[", ".").replace("]", "").split("."))
            problems.append((("podTopologySpread", *parts), message))
        problems += _duplicates("clusters", [c.name for c in self.clusters], "cluster")
        problems += cluster_kind_problems(self.clusters)
        problems += _duplicates("nodeTemplates", [t.name for t in self.node_templates], "node template")
        for c, cluster in enumerate(self.clusters):
            if isinstance(cluster, SimulatedClusterConfig):
                first: dict[str, int] = {}
                for g, name in cluster.node_names():
                    if name in first:
                        key = "name" if cluster.nodes[g].name is not None else "namePrefix"
                        problems.append((("clusters", c, "nodes", g, key),
                                         f"duplicate node name {name!r} (first in clusters[{c}].nodes[{first[name]}])"))
                        break
                    first[name] = g
        problems += resource_name_problems(self)
        return problems

    @property
    def action_names(self) -> list[str]:
        """The names of ``actions``, in cycle order."""
        return [action.name for action in self.actions]

    def to_core_priority_classes(self) -> list[PriorityClass]:
        return [pc.to_core() for pc in self.priority_classes]

    def to_core_queues(self) -> list[Queue]:
        return [q.to_core() for q in self.queues]

    def simulated_clusters(self) -> list[SimulatedClusterConfig]:
        return [c for c in self.clusters if isinstance(c, SimulatedClusterConfig)]

    def simulated_snapshots(self) -> list[ClusterSnapshot]:
        """Every simulated cluster expanded into nodes, with nothing running."""
        return [cluster.snapshot() for cluster in self.simulated_clusters()]


def expand_cluster(cluster: SimulatedClusterConfig) -> ClusterSnapshot:
    """A simulated cluster config as a core :class:`ClusterSnapshot` (its nodes, nothing running)."""
    return cluster.snapshot()


def queue_tree_problems(section: str, queues: list[QueueConfig],
                        others: list[QueueConfig] = ()) -> list[tuple[FieldPath, str]]:
    """Every ``parent`` in ``queues`` that names no queue (of ``queues`` or ``others``) or makes a cycle.

    ``others`` are queues defined elsewhere (the config's, for a state file's queues); a queue of
    ``queues`` replaces one of ``others`` with its name.
    """
    parents = {q.name: q.parent for q in others} | {q.name: q.parent for q in queues}
    problems: list[tuple[FieldPath, str]] = []
    for i, queue in enumerate(queues):
        if queue.parent is None:
            continue
        if queue.parent not in parents:
            problems.append(((section, i, "parent"), f"unknown parent queue {queue.parent!r} "
                                                     f"(known: {', '.join(sorted(parents))})"))
            continue
        seen, name = [queue.name], queue.parent
        while name is not None and name not in seen:
            seen.append(name)
            name = parents.get(name)
        if name is not None:
            problems.append(((section, i, "parent"), f"queue parents form a cycle: {' -> '.join([*seen, name])}"))
    return problems


def inner_queues(queues) -> set[str]:
    """Names of the queues some other queue names as its parent: they hold no jobs."""
    return {q.parent for q in queues if q.parent is not None}


def _duplicates(section: str, names: list[str], what: str) -> list[tuple[FieldPath, str]]:
    """Every repeat of a name in ``section``, pointing back at its first use."""
    first: dict[str, int] = {}
    problems: list[tuple[FieldPath, str]] = []
    for i, name in enumerate(names):
        if name in first:
            problems.append(((section, i, "name"), f"duplicate {what} {name!r} (first at {section}[{first[name]}])"))
        else:
            first[name] = i
    return problems
