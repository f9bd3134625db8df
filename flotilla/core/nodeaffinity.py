"""Node affinity, with Kubernetes' semantics (``k8s.io/component-helpers/scheduling/corev1/nodeaffinity``).

* **Required** (``requiredDuringSchedulingIgnoredDuringExecution``): the
  node must match one of the ``nodeSelectorTerms`` (ORed); a term matches
  when every one of its ``matchExpressions`` (on labels) and
  ``matchFields`` (on ``metadata.name``) does (ANDed). A term with neither
  matches nothing. An empty list of terms is refused, as the API server
  refuses it ("must have at least one node selector term").
* Operators: ``In`` and ``NotIn`` (a missing label is not in any set, so
  ``NotIn`` matches it), ``Exists``, ``DoesNotExist``, ``Gt`` and ``Lt``
  (the label's value and the one given value parsed as integers; a label
  missing or not an integer does not match).
* **Preferred** (``preferredDuringSchedulingIgnoredDuringExecution``): each
  term whose preference the node matches adds its weight (1-100) to the
  node's score.
* Refused as the API server's validation refuses them: an operator not in
  the list, values that do not fit the operator, and a key that is not a
  label key (a qualified name, as ``ValidateLabelName`` checks).

A node is seen through a mapping of its labels; the node's name is the
pseudo-label :data:`NAME_FIELD` (a key no label can have: ``:`` is not
allowed in label keys), present when some job's affinity names it, so the
node index tells nodes apart by name only then.

The objects are frozen and compare by value: jobs asking the same share
one cache entry, and the parsed form is what :func:`parse_node_affinity`
gives from the podSpec's ``affinity.nodeAffinity`` (API field names).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from flotilla.core.quantities import RESOURCE_NAME_RULE, resource_name_problem

#: The pseudo-label holding the node's name, for ``matchFields`` on ``metadata.name``.
NAME_FIELD = "field:metadata.name"
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
#: The operators Kubernetes allows in ``matchFields``.
FIELD_OPERATORS = ("In", "NotIn")
#: Bounds on what one affinity may hold (the API server has none this tight; a job needs far fewer).
MAX_TERMS = 32
MAX_REQUIREMENTS = 32
MAX_VALUES = 256


def _integer(text: str) -> int | None:
    """Go's strconv.ParseInt(text, 10, 64): an optional sign and decimal digits, in 64 bits."""
    body = text[1:] if text[:1] in ("+", "-") else text
    if not body or not body.isascii() or not body.isdigit():
        return None
    value = int(text)
    return value if -(1 << 63) <= value < (1 << 63) else None


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``matchExpressions`` (or ``matchFields``) entry."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        if value is None or len(self.values) != 1:
            return False
        have, bound = _integer(value), _integer(self.values[0])
        if have is None or bound is None:
            return False
        return have > bound if op == "Gt" else have < bound

    def to_kubernetes(self) -> dict:
        out: dict[str, Any] = {"key": "metadata.name" if self.key == NAME_FIELD else self.key,
                               "operator": self.operator}
        if self.values:
            out["values"] = list(self.values)
        return out


@dataclass(frozen=True, slots=True)
class Term:
    """A node selector term: every requirement must match; none at all matches nothing."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if not self.expressions and not self.fields:
            return False
        return all(r.matches(labels) for r in self.expressions) and all(r.matches(labels) for r in self.fields)

    def to_kubernetes(self) -> dict:
        out: dict[str, Any] = {}
        if self.expressions:
            out["matchExpressions"] = [r.to_kubernetes() for r in self.expressions]
        if self.fields:
            out["matchFields"] = [r.to_kubernetes() for r in self.fields]
        return out


@dataclass(frozen=True, slots=True)
class NodeAffinity:
    """A job's node affinity: ``required`` terms (None: no requirement) and weighted ``preferred`` terms."""

    required: tuple[Term, ...] | None = None
    preferred: tuple[tuple[int, Term], ...] = ()

    def allows(self, labels: Mapping[str, str]) -> bool:
        """Whether a node with ``labels`` meets the required terms (one of them)."""
        required = self.required
        return required is None or any(term.matches(labels) for term in required)

    def score(self, labels: Mapping[str, str]) -> int:
        """The sum of the weights of the preferred terms a node with ``labels`` matches."""
        return sum(weight for weight, term in self.preferred if term.matches(labels))

    def to_kubernetes(self) -> dict:
        """The podSpec's ``affinity.nodeAffinity`` this stands for (API field names)."""
        out: dict[str, Any] = {}
        if self.required is not None:
            out[REQUIRED] = {"nodeSelectorTerms": [term.to_kubernetes() for term in self.required]}
        if self.preferred:
            out[PREFERRED] = [{"weight": weight, "preference": term.to_kubernetes()} for weight, term in self.preferred]
        return out

    @property
    def label_keys(self) -> tuple[str, ...]:
        """The label keys the affinity reads (:data:`NAME_FIELD` for the node's name), each once."""
        terms = list(self.required or ()) + [term for _, term in self.preferred]
        keys = {r.key for term in terms for r in term.expressions}
        if any(term.fields for term in terms):
            keys.add(NAME_FIELD)
        return tuple(sorted(keys))


class AffinityError(ValueError):
    """A node affinity Kubernetes would refuse; ``path`` is relative to ``nodeAffinity``."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


def _requirements(items: Any, path: str, fields: bool) -> tuple[Requirement, ...]:
    if items is None:
        return ()
    if not isinstance(items, list):
        raise AffinityError(path, "expected a list")
    if len(items) > MAX_REQUIREMENTS:
        raise AffinityError(path, f"at most {MAX_REQUIREMENTS} requirements, got {len(items)}")
    out = []
    for k, item in enumerate(items):
        here = f"{path}[{k}]"
        if not isinstance(item, Mapping):
            raise AffinityError(here, "expected a mapping with key, operator and values")
        key, op, values = item.get("key"), item.get("operator"), item.get("values")
        if not isinstance(key, str) or not key:
            raise AffinityError(f"{here}.key", "a non-empty string is required")
        if not fields and resource_name_problem(key) is not None:   # a label key is a qualified name, as a resource
            shown = key if len(key) <= 80 else key[:80] + "..."
            raise AffinityError(f"{here}.key", f"{shown!r} is not a valid label key: {RESOURCE_NAME_RULE}")
        allowed = FIELD_OPERATORS if fields else OPERATORS
        if op not in allowed:
            raise AffinityError(f"{here}.operator", f"expected one of {', '.join(allowed)}, got {op!r}")
        if values is None:
            values = []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise AffinityError(f"{here}.values", "expected a list of strings")
        if len(values) > MAX_VALUES:
            raise AffinityError(f"{here}.values", f"at most {MAX_VALUES} values, got {len(values)}")
        if fields:
            if key != "metadata.name":
                raise AffinityError(f"{here}.key", f"the only field a node can be selected by is metadata.name, "
                                                   f"got {key!r}")
            if len(values) != 1:
                raise AffinityError(f"{here}.values", f"{op} on a field takes exactly one value, got {len(values)}")
        elif op in ("In", "NotIn") and not values:
            raise AffinityError(f"{here}.values", f"{op} needs at least one value")
        elif op in ("Exists", "DoesNotExist") and values:
            raise AffinityError(f"{here}.values", f"{op} takes no values, got {len(values)}")
        elif op in ("Gt", "Lt") and (len(values) != 1 or _integer(values[0]) is None):
            raise AffinityError(f"{here}.values", f"{op} takes exactly one integer value, got {values!r}")
        out.append(Requirement(NAME_FIELD if fields else key, op, tuple(values)))
    return tuple(out)


def _term(item: Any, path: str) -> Term:
    if not isinstance(item, Mapping):
        raise AffinityError(path, "expected a node selector term (matchExpressions, matchFields)")
    unknown = sorted(set(item) - {"matchExpressions", "matchFields"})
    if unknown:
        raise AffinityError(f"{path}.{unknown[0]}", "unknown field (a term has matchExpressions and matchFields)")
    return Term(_requirements(item.get("matchExpressions"), f"{path}.matchExpressions", False),
                _requirements(item.get("matchFields"), f"{path}.matchFields", True))


REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def parse_node_affinity(spec: Mapping[str, Any] | None) -> NodeAffinity | None:
    """The podSpec's ``affinity.nodeAffinity`` (API field names) as a :class:`NodeAffinity`; None when it asks
    nothing. Raises :class:`AffinityError` naming the path of what Kubernetes would refuse."""
    if not spec:
        return None
    if not isinstance(spec, Mapping):
        raise AffinityError("", "expected a mapping")
    unknown = sorted(set(spec) - {REQUIRED, PREFERRED})
    if unknown:
        raise AffinityError(unknown[0], f"unknown field (expected {REQUIRED} or {PREFERRED})")
    required = None
    selector = spec.get(REQUIRED)
    if selector is not None:
        if not isinstance(selector, Mapping) or set(selector) - {"nodeSelectorTerms"}:
            raise AffinityError(REQUIRED, "expected a mapping with nodeSelectorTerms only")
        terms = selector.get("nodeSelectorTerms")
        if not isinstance(terms, list):
            raise AffinityError(f"{REQUIRED}.nodeSelectorTerms", "expected a list of node selector terms")
        if not terms:
            raise AffinityError(f"{REQUIRED}.nodeSelectorTerms", "must have at least one node selector term")
        if len(terms) > MAX_TERMS:
            raise AffinityError(f"{REQUIRED}.nodeSelectorTerms", f"at most {MAX_TERMS} terms, got {len(terms)}")
        required = tuple(_term(t, f"{REQUIRED}.nodeSelectorTerms[{k}]") for k, t in enumerate(terms))
    preferred = []
    items = spec.get(PREFERRED) or []
    if not isinstance(items, list) or len(items) > MAX_TERMS:
        raise AffinityError(PREFERRED, f"expected a list of at most {MAX_TERMS} weighted terms")
    for k, item in enumerate(items):
        here = f"{PREFERRED}[{k}]"
        if not isinstance(item, Mapping) or set(item) - {"weight", "preference"}:
            raise AffinityError(here, "expected a mapping with weight and preference")
        weight = item.get("weight")
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
            raise AffinityError(f"{here}.weight", f"expected a whole number from 1 to 100, got {weight!r}")
        preferred.append((weight, _term(item.get("preference"), f"{here}.preference")))
    if required is None and not preferred:
        return None
    return NodeAffinity(required, tuple(preferred))


__all__ = ["AffinityError", "NAME_FIELD", "NodeAffinity", "OPERATORS", "Requirement", "Term",
           "parse_node_affinity"]
