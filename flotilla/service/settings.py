"""What the service reads from the scheduler config, as plain values.

The service never reaches into the pydantic config in its hot paths: it
reads what it needs once, here, into frozen dataclasses. Every attribute is
read with a default so the service also runs on a config that predates the
service sections (``server``, ``auth``, ``store``, ``lease``, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from flotilla.core.model import DEFAULT_GRACE_PERIOD, Node, PriorityClass, Taint
from flotilla.core.quantities import parse_duration, parse_quantity
from flotilla.service.streams import StreamLimits

DEFAULT_STORE_URL = "sqlite:///flotilla.db"
DEFAULT_LISTEN = "127.0.0.1:8080"


@dataclass(frozen=True, slots=True)
class QueueSpec:
    name: str
    weight: float = 1.0
    limits: Mapping[str, float] = field(default_factory=dict)
    owners: tuple[str, ...] = ()
    group_owners: tuple[str, ...] = ()
    #: Namespaces whose in-cluster pods may use the queue (see flotilla.service.intake).
    namespaces: tuple[str, ...] = ()
    #: From the config file only (the API makes top-level queues); the store does not keep it.
    parent: str | None = None
    #: The queue's retry rules as the API shows them (``{"exitCodes": [42], "action": "retry", "limit": 2}``).
    retry_policy: tuple[Mapping[str, Any], ...] = ()
    #: The store's, never the config's: when the queue left the config while it still had unfinished jobs (it
    #: then takes no new job and is removed once they finish; see flotilla.service.store.queues). None: it is not.
    retiring: float | None = None

    def to_dict(self) -> dict:
        return {"name": self.name, "weight": self.weight, "limits": dict(self.limits),
                "owners": list(self.owners), "groupOwners": list(self.group_owners),
                "retryPolicy": [dict(rule) for rule in self.retry_policy],
                "namespaces": list(self.namespaces)}


@dataclass(frozen=True, slots=True)
class TokenSpec:
    user: str
    groups: tuple[str, ...] = ()
    token: str | None = None
    sha256: str | None = None


@dataclass(frozen=True, slots=True)
class OidcSettings:
    """``auth.oidc`` (see :class:`flotilla.config.models.OidcConfig`); durations in seconds."""

    issuer: str
    audience: str
    jwks_url: str
    username_claim: str = "sub"
    groups_claim: str = "groups"
    username_prefix: str = ""
    groups_prefix: str = ""
    algorithms: tuple[str, ...] = ("RS256", "ES256")
    leeway: float = 30.0
    jwks_refresh_interval: float = 600.0
    jwks_min_refresh_interval: float = 30.0
    jwks_timeout: float = 5.0


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    name: str
    kind: str
    nodes: tuple[Node, ...] = ()
    raw: Any = None


@dataclass(frozen=True, slots=True)
class Limits:
    """What one request may carry (``server.maxBodySize``, ``server.maxJobsPerSubmission``); 413 past them."""

    max_body_bytes: int = 16 * 1024 * 1024
    max_jobs: int = 10_000


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True, slots=True)
class ServiceSettings:
    queues: tuple[QueueSpec, ...] = ()
    tokens: tuple[TokenSpec, ...] = ()
    admin_groups: tuple[str, ...] = ()
    oidc: OidcSettings | None = None
    store_url: str = DEFAULT_STORE_URL
    listen: str = DEFAULT_LISTEN
    lease_timeout: float = 60.0
    lease_max_retries: int = 3
    grace_default: float = DEFAULT_GRACE_PERIOD
    grace_max: float = 300.0
    deadline_cpu: float = 3 * 86400.0
    deadline_gpu: float = 14 * 86400.0
    cycle_period: float = 1.0
    #: ``cycle.unreadyAfterFailedCycles``: consecutive cycles failed closed before ``/readyz`` answers 503.
    unready_after_failed_cycles: int = 3
    leader_lease: float = 15.0
    leader_renew: float = 2.0
    priority_classes: tuple[PriorityClass, ...] = ()
    default_priority_class: str = "armada-default"
    clusters: tuple[ClusterSpec, ...] = ()
    admin_endpoints: bool = False
    limits: Limits = DEFAULT_LIMITS
    #: The in-cluster pods' placement rules (flotilla.service.placement.PlacementRule).
    placement: tuple = ()
    #: ``server.headerTimeout``: seconds a request's headers may take to arrive.
    header_timeout: float = 10.0
    #: ``server.streams``: watch streams and followed logs per user (flotilla.service.streams).
    streams: StreamLimits = field(default_factory=StreamLimits)

    @property
    def open_access(self) -> bool:
        """No static tokens and no OIDC: a local, single-user service where every request is an administrator."""
        return not self.tokens and self.oidc is None

    @property
    def priority_class_names(self) -> frozenset[str]:
        return frozenset(pc.name for pc in self.priority_classes)


def _get(obj: Any, *names: str, default: Any = None) -> Any:
    """``obj.a.b`` (or ``obj['a']['b']``), ``default`` where any step is missing or None."""
    for name in names:
        if obj is None:
            return default
        obj = obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)
    return default if obj is None else obj


def _seconds(value: Any, default: float) -> float:
    if value is None:
        return default
    if hasattr(value, "total_seconds"):
        return float(value.total_seconds())
    return float(parse_duration(value))


def _quantity_map(resources: Mapping[str, Any]) -> dict[str, int]:
    return {name: value if isinstance(value, int) and not isinstance(value, bool) else parse_quantity(value, name)
            for name, value in dict(resources or {}).items()}


def _taint(taint: Any) -> Taint:
    if isinstance(taint, Taint):
        return taint
    return Taint(_get(taint, "key", default=""), _get(taint, "value", default=""),
                 _get(taint, "effect", default="NoSchedule"))


def cluster_nodes(cluster: Any) -> tuple[Node, ...]:
    """The nodes of a ``simulated`` cluster entry: ``{count, namePrefix, resources, labels, taints}`` groups."""
    name = _get(cluster, "name")
    nodes: list[Node] = []
    for group in _get(cluster, "nodes", default=[]) or []:
        if isinstance(group, Node):
            nodes.append(group)
            continue
        count = int(_get(group, "count", default=1))
        prefix = _get(group, "name_prefix", default=None) or _get(group, "namePrefix", default=None)
        explicit = _get(group, "name", default=None)
        resources = _quantity_map(_get(group, "resources", default={}))
        labels = dict(_get(group, "labels", default={}) or {})
        taints = tuple(_taint(t) for t in _get(group, "taints", default=[]) or [])
        unschedulable = bool(_get(group, "unschedulable", default=False))
        for i in range(count):
            if explicit and count == 1:
                node_name = explicit
            else:
                node_name = f"{prefix or explicit or 'node'}-{len(nodes) + 1 if not (prefix or explicit) else i + 1}"
            nodes.append(Node(node_name, name, resources, labels, taints, unschedulable))
    return tuple(nodes)


def _oidc(section: Any) -> OidcSettings | None:
    if section is None:
        return None
    defaults = OidcSettings("", "", "")
    return OidcSettings(
        issuer=str(_get(section, "issuer")), audience=str(_get(section, "audience")),
        jwks_url=str(_get(section, "jwks_url", default=None) or _get(section, "jwksUrl")),
        username_claim=str(_get(section, "username_claim", default=defaults.username_claim)),
        groups_claim=str(_get(section, "groups_claim", default=defaults.groups_claim)),
        username_prefix=str(_get(section, "username_prefix", default="")),
        groups_prefix=str(_get(section, "groups_prefix", default="")),
        algorithms=tuple(_get(section, "algorithms", default=defaults.algorithms)),
        leeway=_seconds(_get(section, "leeway"), defaults.leeway),
        jwks_refresh_interval=_seconds(_get(section, "jwks_refresh_interval"), defaults.jwks_refresh_interval),
        jwks_min_refresh_interval=_seconds(_get(section, "jwks_min_refresh_interval"),
                                           defaults.jwks_min_refresh_interval),
        jwks_timeout=_seconds(_get(section, "jwks_timeout"), defaults.jwks_timeout),
    )


def rule_dicts(rules: Any) -> tuple[dict, ...]:
    """Retry rules (config models, or their dicts) as the dicts the store and the API keep."""
    return tuple(r.model_dump(by_alias=True, exclude_none=True) if hasattr(r, "model_dump") else dict(r)
                 for r in rules or ())


def from_config(config: Any) -> ServiceSettings:
    """Read the service's settings off a loaded :class:`FlotillaConfig` (or anything shaped like it)."""
    from flotilla.service.placement import rules_from_config
    queues = tuple(
        QueueSpec(
            name=_get(q, "name"),
            weight=float(_get(q, "weight", default=1.0)),
            limits={k: float(v) for k, v in dict(_get(q, "limits", default={}) or {}).items()},
            owners=tuple(_get(q, "owners", default=()) or ()),
            group_owners=tuple(_get(q, "group_owners", default=None) or _get(q, "groupOwners", default=()) or ()),
            parent=_get(q, "parent", default=None),
            retry_policy=rule_dicts(_get(q, "retry_policy", default=None) or _get(q, "retryPolicy", default=())),
            namespaces=tuple(_get(q, "namespaces", default=()) or ()),
        )
        for q in _get(config, "queues", default=[]) or []
    )
    tokens = tuple(
        TokenSpec(user=_get(t, "user"), groups=tuple(_get(t, "groups", default=()) or ()),
                  token=_get(t, "token"), sha256=(_get(t, "sha256") or None))
        for t in _get(config, "auth", "tokens", default=[]) or []
    )
    admin_groups = tuple(_get(config, "auth", "admin_groups", default=None)
                         or _get(config, "auth", "adminGroups", default=()) or ())
    oidc = _oidc(_get(config, "auth", "oidc"))
    grace = _get(config, "grace_period", default=None) or _get(config, "gracePeriod", default=None)
    pcs = tuple(PriorityClass(_get(pc, "name"), int(_get(pc, "priority", default=0)),
                              bool(_get(pc, "preemptible", default=False)))
                for pc in _get(config, "priority_classes", default=[]) or [])
    clusters = []
    for c in _get(config, "clusters", default=[]) or []:
        kind = str(_get(c, "kind", default="simulated"))
        nodes: tuple[Node, ...] = ()
        if kind == "simulated":
            nodes = tuple(c.expand()) if hasattr(c, "expand") else cluster_nodes(c)
        clusters.append(ClusterSpec(_get(c, "name"), kind, nodes, c))
    server = _get(config, "server", default=None)
    return ServiceSettings(
        queues=queues,
        tokens=tokens,
        admin_groups=admin_groups,
        oidc=oidc,
        store_url=str(_get(config, "store", "url", default=DEFAULT_STORE_URL)),
        listen=str(_get(server, "listen", default=DEFAULT_LISTEN)),
        lease_timeout=_seconds(_get(config, "lease", "timeout"), 60.0),
        lease_max_retries=int(_get(config, "lease", "max_retries", default=None)
                              if _get(config, "lease", "max_retries", default=None) is not None
                              else _get(config, "lease", "maxRetries", default=3)),
        grace_default=_seconds(_get(grace, "default"), DEFAULT_GRACE_PERIOD),
        grace_max=_seconds(_get(grace, "max"), 300.0),
        deadline_cpu=_seconds(_get(config, "deadlines", "cpu"), 3 * 86400.0),
        deadline_gpu=_seconds(_get(config, "deadlines", "gpu"), 14 * 86400.0),
        cycle_period=_seconds(_get(config, "cycle", "period"), 1.0),
        unready_after_failed_cycles=int(_get(config, "cycle", "unready_after_failed_cycles", default=3)),
        leader_lease=_seconds(_get(config, "leader_election", "lease_duration"), 15.0),
        leader_renew=_seconds(_get(config, "leader_election", "renew_period"), 2.0),
        priority_classes=pcs,
        default_priority_class=str(_get(config, "default_priority_class", default="armada-default")),
        clusters=tuple(clusters),
        admin_endpoints=bool(_get(server, "admin_endpoints", default=None)
                             or _get(server, "adminEndpoints", default=False)),
        limits=Limits(int(_get(server, "max_body_size", default=DEFAULT_LIMITS.max_body_bytes)),
                      int(_get(server, "max_jobs_per_submission", default=DEFAULT_LIMITS.max_jobs))),
        placement=rules_from_config(config),
        header_timeout=_seconds(_get(server, "header_timeout"), 10.0),
        streams=_stream_limits(_get(server, "streams")),
    )


def _stream_limits(section: Any) -> StreamLimits:
    defaults = StreamLimits()
    return StreamLimits(
        watch_per_user=int(_get(section, "watch_per_user", default=defaults.watch_per_user)),
        follows_per_user=int(_get(section, "follows_per_user", default=defaults.follows_per_user)),
        follows=int(_get(section, "follows", default=defaults.follows)),
        follow_idle_timeout=_seconds(_get(section, "follow_idle_timeout"), defaults.follow_idle_timeout))
