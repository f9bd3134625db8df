"""Inter-pod affinity, anti-affinity and topology spread: a pod's rules, as kube-scheduler reads them.

The InterPodAffinity and PodTopologySpread plugins
(``pkg/scheduler/framework/plugins/interpodaffinity``, ``podtopologyspread``)
define the rules; this module holds their parsed form, carried by a job as
``Job.pod_rules`` (None for almost every job), and
:mod:`flotilla.core.podplacements` counts the pods they select.

* A **term** (``PodAffinityTerm``) selects pods by labels
  (``labelSelector``; a term without one selects no pod) in a set of
  namespaces: those listed and those whose labels its ``namespaceSelector``
  matches (:class:`NamespaceSelection`, read against the cluster's Namespace
  objects when pods are counted), else (neither given) the pod's own;
  ``namespaceSelector: {}`` means every namespace. Its ``topologyKey`` names the node label whose
  value is a *domain*. ``matchLabelKeys`` and ``mismatchLabelKeys`` become
  ``In`` and ``NotIn`` requirements on the pod's own values of those labels,
  as the API server merges them into the selector.
* **Required affinity**: every term must count a selected pod in the node's
  domain (pods matching *all* terms are counted), unless no pod anywhere
  matches them all and the pod matches them itself: the first pod of a
  self-affine group may go anywhere (with the topology keys).
* **Required anti-affinity**: no term may count a selected pod in the node's
  domain; and no running pod's anti-affinity term may select the pod from
  the node's domain (existing pods' anti-affinity, checked for every pod).
* **Topology spread** (``DoNotSchedule``): on each constraint's key, the
  selected pods of the pod's namespace in the node's domain, plus one if
  the pod is selected itself, less the fewest in any eligible domain, may
  not pass ``maxSkew``; fewer eligible domains than ``minDomains`` make the
  fewest 0. Eligible nodes carry every constraint's key and, by
  ``nodeAffinityPolicy: Honor`` (default) match the pod's node selector and
  required node affinity, by ``nodeTaintsPolicy: Honor`` (default
  ``Ignore``) have no untolerated ``NoSchedule``/``NoExecute`` taint.
  ``matchLabelKeys`` join the selector as for terms.
* **Preferred** affinity, anti-affinity and ``ScheduleAnyway`` constraints are
  scores, never refusals.

A namespace's labels come from the cluster (``ClusterSnapshot.namespace_labels``);
one the cluster does not describe has only ``kubernetes.io/metadata.name``,
the label the API server gives every namespace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from flotilla.core.nodeaffinity import AffinityError, Requirement

SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
MAX_TERMS = 32

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def label_key_problem(key: Any) -> str | None:
    """Why ``key`` is not a qualified name (a label key), as the API server checks it; None if it is."""
    if not isinstance(key, str) or not key:
        return "a non-empty string is required"
    prefix, _, name = key.rpartition("/")
    if "/" in prefix or (prefix == "" and key.startswith("/")):
        return f"invalid label key {key!r}"
    if prefix and (len(prefix) > 253 or not _PREFIX.match(prefix)):
        return f"invalid label key {key!r}: the prefix must be a DNS subdomain"
    if not _NAME.match(name):
        return (f"invalid label key {key!r}: a name of at most 63 characters, alphanumerics, '-', '_' or '.', "
                "starting and ending with an alphanumeric")
    return None


def label_value_problem(value: Any) -> str | None:
    """Why ``value`` is not a label value, as the API server checks it; None if it is."""
    if not isinstance(value, str) or len(value) > 63 or not _VALUE.match(value):
        return f"invalid label value {value!r}"
    return None


@dataclass(frozen=True, slots=True)
class Selector:
    """A label selector: every requirement must match (an empty one matches every pod)."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        for r in self.requirements:
            if not r.matches(labels):
                return False
        return True


#: The label the API server sets on every namespace, its name.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
_NO_LABELS: Mapping[str, str] = {}


def namespace_labels_of(known: Mapping[str, Mapping[str, str]], namespace: str) -> Mapping[str, str]:
    """``namespace``'s labels from ``known``; one not there has only its name label."""
    labels = known.get(namespace)
    return labels if labels is not None else {NAMESPACE_NAME_LABEL: namespace}


@dataclass(frozen=True, slots=True)
class NamespaceSelection:
    """A term's namespaces when it has a ``namespaceSelector`` with requirements: those named in ``names`` and
    those whose labels ``selector`` matches (``in`` asks about the names only; :meth:`selects` about both)."""

    names: frozenset[str]
    selector: Selector

    def __contains__(self, namespace: str) -> bool:
        return namespace in self.names

    def selects(self, namespace: str, namespace_labels: Mapping[str, Mapping[str, str]]) -> bool:
        return namespace in self.names or self.selector.matches(namespace_labels_of(namespace_labels, namespace))


def namespace_allows(namespaces, namespace: str, namespace_labels: Mapping[str, Mapping[str, str]]) -> bool:
    """Whether a term's ``namespaces`` (a set of names, a :class:`NamespaceSelection`, or None for every one)
    take a pod of ``namespace``."""
    if namespaces is None or namespace in namespaces:
        return True
    return namespaces.__class__ is NamespaceSelection and namespaces.selects(namespace, namespace_labels)


@dataclass(frozen=True, slots=True)
class PodTerm:
    """Pods selected by ``selector`` (None: none) in ``namespaces`` (None: every one), by ``topology_key``."""

    selector: Selector | None
    namespaces: frozenset[str] | NamespaceSelection | None
    topology_key: str

    def matches(self, namespace: str, labels: Mapping[str, str],
                namespace_labels: Mapping[str, Mapping[str, str]] = _NO_LABELS) -> bool:
        """Whether a pod of ``namespace`` with ``labels`` is selected (``namespace_labels``: the cluster's
        namespaces' labels, read only by a ``namespaceSelector``)."""
        if self.selector is None:
            return False
        if not namespace_allows(self.namespaces, namespace, namespace_labels):
            return False
        return self.selector.matches(labels)


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """One ``topologySpreadConstraints`` entry (its selector only counts pods of the pod's namespace)."""

    max_skew: int
    topology_key: str
    hard: bool  # DoNotSchedule (else ScheduleAnyway)
    selector: Selector | None
    min_domains: int = 1
    honor_affinity: bool = True
    honor_taints: bool = False


@dataclass(frozen=True, slots=True)
class PodRules:
    """A pod's inter-pod rules; frozen and compared by value (jobs asking alike share one)."""

    affinity: tuple[PodTerm, ...] = ()
    anti_affinity: tuple[PodTerm, ...] = ()
    preferred_affinity: tuple[tuple[int, PodTerm], ...] = ()
    preferred_anti_affinity: tuple[tuple[int, PodTerm], ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()

    @property
    def required(self) -> bool:
        """Whether some rule can refuse a node."""
        return bool(self.affinity or self.anti_affinity or any(c.hard for c in self.spread))

    @property
    def preferred(self) -> bool:
        """Whether some rule scores nodes."""
        return bool(self.preferred_affinity or self.preferred_anti_affinity or any(not c.hard for c in self.spread))


def _selector(spec: Any, path: str, labels: Mapping[str, str], match_keys: tuple[str, ...] = (),
              mismatch_keys: tuple[str, ...] = ()) -> Selector | None:
    if spec is None:
        return None
    if not isinstance(spec, Mapping):
        raise AffinityError(path, "expected a label selector (matchLabels, matchExpressions)")
    unknown = sorted(set(spec) - {"matchLabels", "matchExpressions"})
    if unknown:
        raise AffinityError(f"{path}.{unknown[0]}", "unknown field (a selector has matchLabels and matchExpressions)")
    out: list[Requirement] = []
    match_labels = spec.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise AffinityError(f"{path}.matchLabels", "expected a mapping of label keys to values")
    for key, value in match_labels.items():
        problem = label_key_problem(key) or label_value_problem(value)
        if problem:
            raise AffinityError(f"{path}.matchLabels", problem)
        out.append(Requirement(key, "In", (value,)))
    expressions = spec.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise AffinityError(f"{path}.matchExpressions", "expected a list")
    for k, item in enumerate(expressions):
        here = f"{path}.matchExpressions[{k}]"
        if not isinstance(item, Mapping):
            raise AffinityError(here, "expected a mapping with key, operator and values")
        key, op, values = item.get("key"), item.get("operator"), item.get("values") or []
        problem = label_key_problem(key)
        if problem:
            raise AffinityError(f"{here}.key", problem)
        if op not in SELECTOR_OPERATORS:
            raise AffinityError(f"{here}.operator", f"expected one of {', '.join(SELECTOR_OPERATORS)}, got {op!r}")
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise AffinityError(f"{here}.values", "expected a list of strings")
        if op in ("In", "NotIn") and not values:
            raise AffinityError(f"{here}.values", f"must be specified when `operator` is '{op}'")
        if op in ("Exists", "DoesNotExist") and values:
            raise AffinityError(f"{here}.values", f"may not be specified when `operator` is '{op}'")
        for value in values:
            problem = label_value_problem(value)
            if problem:
                raise AffinityError(f"{here}.values", problem)
        out.append(Requirement(key, op, tuple(values)))
    for key in match_keys:
        if key in labels:
            out.append(Requirement(key, "In", (labels[key],)))
    for key in mismatch_keys:
        if key in labels:
            out.append(Requirement(key, "NotIn", (labels[key],)))
    return Selector(tuple(out))


def _label_keys(spec: Any, path: str, selector_spec: Any) -> tuple[str, ...]:
    if spec is None:
        return ()
    if not isinstance(spec, list):
        raise AffinityError(path, "expected a list of label keys")
    if spec and selector_spec is None:
        raise AffinityError(path, "must not be specified when labelSelector is not set")
    selector_keys = set((selector_spec or {}).get("matchLabels") or {}) | \
        {e.get("key") for e in (selector_spec or {}).get("matchExpressions") or () if isinstance(e, Mapping)}
    for k, key in enumerate(spec):
        problem = label_key_problem(key)
        if problem:
            raise AffinityError(f"{path}[{k}]", problem)
        if key in selector_keys:
            raise AffinityError(f"{path}[{k}]", f"exists in both {path.rpartition('.')[2]} and labelSelector")
    return tuple(spec)


def _term(spec: Any, path: str, namespace: str, labels: Mapping[str, str]) -> PodTerm:
    if not isinstance(spec, Mapping):
        raise AffinityError(path, "expected a pod affinity term (labelSelector, topologyKey, ...)")
    known = {"labelSelector", "namespaces", "namespaceSelector", "topologyKey", "matchLabelKeys", "mismatchLabelKeys"}
    unknown = sorted(set(spec) - known)
    if unknown:
        raise AffinityError(f"{path}.{unknown[0]}", "unknown field")
    key = spec.get("topologyKey")
    if not key:
        raise AffinityError(f"{path}.topologyKey", "can not be empty")
    problem = label_key_problem(key)
    if problem:
        raise AffinityError(f"{path}.topologyKey", problem)
    match_keys = _label_keys(spec.get("matchLabelKeys"), f"{path}.matchLabelKeys", spec.get("labelSelector"))
    mismatch_keys = _label_keys(spec.get("mismatchLabelKeys"), f"{path}.mismatchLabelKeys", spec.get("labelSelector"))
    both = set(match_keys) & set(mismatch_keys)
    if both:
        raise AffinityError(f"{path}.matchLabelKeys", f"{sorted(both)[0]!r} exists in both matchLabelKeys and "
                                                      "mismatchLabelKeys")
    selector = _selector(spec.get("labelSelector"), f"{path}.labelSelector", labels, match_keys, mismatch_keys)
    names = spec.get("namespaces") or []
    if not isinstance(names, list):
        raise AffinityError(f"{path}.namespaces", "expected a list of namespace names")
    for k, name in enumerate(names):
        if not isinstance(name, str) or len(name) > 63 or not _DNS_LABEL.match(name):
            raise AffinityError(f"{path}.namespaces[{k}]", f"invalid namespace name {name!r}")
    ns_selector = spec.get("namespaceSelector")
    if ns_selector is not None:
        chosen = _selector(ns_selector, f"{path}.namespaceSelector", {})
        if chosen.requirements:
            namespaces = NamespaceSelection(frozenset(names), chosen)
        else:
            namespaces = None  # {}: every namespace
    else:
        namespaces = frozenset(names) if names else frozenset((namespace,))
    return PodTerm(selector, namespaces, key)


def _terms(spec: Any, path: str, namespace: str, labels: Mapping[str, str]) -> tuple[PodTerm, ...]:
    if spec is None:
        return ()
    if not isinstance(spec, list) or len(spec) > MAX_TERMS:
        raise AffinityError(path, f"expected a list of at most {MAX_TERMS} pod affinity terms")
    return tuple(_term(item, f"{path}[{k}]", namespace, labels) for k, item in enumerate(spec))


def _weighted(spec: Any, path: str, namespace: str, labels: Mapping[str, str]) -> tuple[tuple[int, PodTerm], ...]:
    if spec is None:
        return ()
    if not isinstance(spec, list) or len(spec) > MAX_TERMS:
        raise AffinityError(path, f"expected a list of at most {MAX_TERMS} weighted pod affinity terms")
    out = []
    for k, item in enumerate(spec):
        here = f"{path}[{k}]"
        if not isinstance(item, Mapping) or set(item) - {"weight", "podAffinityTerm"}:
            raise AffinityError(here, "expected a mapping with weight and podAffinityTerm")
        weight = item.get("weight")
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
            raise AffinityError(f"{here}.weight", f"must be in the range 1-100, got {weight!r}")
        out.append((weight, _term(item.get("podAffinityTerm"), f"{here}.podAffinityTerm", namespace, labels)))
    return tuple(out)


def _affinity(spec: Any, path: str, namespace: str, labels: Mapping[str, str]):
    if spec is None:
        return (), ()
    if not isinstance(spec, Mapping):
        raise AffinityError(path, "expected a mapping")
    unknown = sorted(set(spec) - {REQUIRED, PREFERRED})
    if unknown:
        raise AffinityError(f"{path}.{unknown[0]}", f"unknown field (expected {REQUIRED} or {PREFERRED})")
    return (_terms(spec.get(REQUIRED), f"{path}.{REQUIRED}", namespace, labels),
            _weighted(spec.get(PREFERRED), f"{path}.{PREFERRED}", namespace, labels))


def _spread(spec: Any, path: str, labels: Mapping[str, str]) -> tuple[SpreadConstraint, ...]:
    if spec is None:
        return ()
    if not isinstance(spec, list) or len(spec) > MAX_TERMS:
        raise AffinityError(path, f"expected a list of at most {MAX_TERMS} constraints")
    out = []
    seen: set[tuple[str, str]] = set()
    known = {"maxSkew", "topologyKey", "whenUnsatisfiable", "labelSelector", "minDomains", "nodeAffinityPolicy",
             "nodeTaintsPolicy", "matchLabelKeys"}
    for k, item in enumerate(spec):
        here = f"{path}[{k}]"
        if not isinstance(item, Mapping):
            raise AffinityError(here, "expected a topology spread constraint")
        unknown = sorted(set(item) - known)
        if unknown:
            raise AffinityError(f"{here}.{unknown[0]}", "unknown field")
        skew = item.get("maxSkew")
        if isinstance(skew, bool) or not isinstance(skew, int) or skew <= 0:
            raise AffinityError(f"{here}.maxSkew", f"must be greater than zero, got {skew!r}")
        key = item.get("topologyKey")
        if not key:
            raise AffinityError(f"{here}.topologyKey", "can not be empty")
        problem = label_key_problem(key)
        if problem:
            raise AffinityError(f"{here}.topologyKey", problem)
        when = item.get("whenUnsatisfiable")
        if when not in ("DoNotSchedule", "ScheduleAnyway"):
            raise AffinityError(f"{here}.whenUnsatisfiable",
                                f"supported values: \"DoNotSchedule\", \"ScheduleAnyway\", got {when!r}")
        if (key, when) in seen:
            raise AffinityError(f"{here}.{{topologyKey, whenUnsatisfiable}}", f"duplicate pair {key!r}, {when!r}")
        seen.add((key, when))
        minimum = item.get("minDomains")
        if minimum is not None:
            if isinstance(minimum, bool) or not isinstance(minimum, int) or minimum <= 0:
                raise AffinityError(f"{here}.minDomains", f"must be greater than zero, got {minimum!r}")
            if when != "DoNotSchedule":
                raise AffinityError(f"{here}.minDomains",
                                    "can only use minDomains if whenUnsatisfiable=DoNotSchedule")
        policies = []
        for field in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
            value = item.get(field)
            if value is not None and value not in ("Honor", "Ignore"):
                raise AffinityError(f"{here}.{field}", f"supported values: \"Honor\", \"Ignore\", got {value!r}")
            policies.append(value)
        match_keys = _label_keys(item.get("matchLabelKeys"), f"{here}.matchLabelKeys", item.get("labelSelector"))
        selector = _selector(item.get("labelSelector"), f"{here}.labelSelector", labels, match_keys)
        out.append(SpreadConstraint(skew, key, when == "DoNotSchedule", selector, minimum or 1,
                                    policies[0] != "Ignore", policies[1] == "Honor"))
    return tuple(out)


#: kube-scheduler's ``defaultingType: System`` constraints (PodTopologySpread's system defaults).
SYSTEM_DEFAULT_CONSTRAINTS = (
    {"maxSkew": 3, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"},
    {"maxSkew": 5, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"},
)


def default_constraint_problems(spec: Any, path: str) -> list[tuple[str, str]]:
    """Problems of cluster default spread constraints (kube-scheduler's ``defaultConstraints``), each
    ``(path, message)``: each checked as a pod's constraint, and none may carry a ``labelSelector`` or
    ``matchLabelKeys`` (the selector is made for each pod)."""
    if not isinstance(spec, list):
        return [(path, "expected a list of topology spread constraints")]
    problems = []
    for k, item in enumerate(spec):
        if isinstance(item, Mapping):
            for field in ("labelSelector", "matchLabelKeys"):
                if field in item:
                    problems.append((f"{path}[{k}].{field}", "must not be set in default constraints: the selector "
                                                             "is made for each pod from its services and controller"))
    if problems:
        return problems
    try:
        _spread(spec, path, {})
    except AffinityError as exc:
        return [(exc.path, exc.message)]
    return []


def with_default_spread(rules_spec: Mapping[str, Any] | None, defaults: Any, selector: Mapping[str, Any]) -> dict:
    """A stored pod-rules spec (``affinity``, ``topologySpreadConstraints``) given the cluster default
    constraints, each selecting by ``selector`` (a label selector); for a pod that carries no constraints."""
    out = dict(rules_spec or {})
    out["topologySpreadConstraints"] = [{**constraint, "labelSelector": dict(selector)} for constraint in defaults]
    return out


def parse_pod_rules(affinity: Mapping[str, Any] | None, spread: Any, namespace: str,
                    labels: Mapping[str, str]) -> PodRules | None:
    """A podSpec's ``affinity`` (its podAffinity and podAntiAffinity) and ``topologySpreadConstraints`` as
    :class:`PodRules` for a pod of ``namespace`` with ``labels``; None when they ask nothing.

    Raises :class:`~flotilla.core.nodeaffinity.AffinityError` whose path starts
    at the podSpec (``affinity.podAntiAffinity...``, ``topologySpreadConstraints[0]...``).
    """
    affinity = affinity or {}
    if not isinstance(affinity, Mapping):
        raise AffinityError("affinity", "expected a mapping")
    required, preferred = _affinity(affinity.get("podAffinity"), "affinity.podAffinity", namespace, labels)
    anti, preferred_anti = _affinity(affinity.get("podAntiAffinity"), "affinity.podAntiAffinity", namespace, labels)
    constraints = _spread(spread, "topologySpreadConstraints", labels)
    if not (required or preferred or anti or preferred_anti or constraints):
        return None
    return PodRules(required, anti, preferred, preferred_anti, constraints)


__all__ = ["NAMESPACE_NAME_LABEL", "SYSTEM_DEFAULT_CONSTRAINTS", "default_constraint_problems",
           "with_default_spread", "NamespaceSelection", "PodRules", "PodTerm", "Selector", "SpreadConstraint",
           "label_key_problem", "label_value_problem", "namespace_allows", "namespace_labels_of", "parse_pod_rules"]
