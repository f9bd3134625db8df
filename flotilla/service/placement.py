"""Placement rules: the queue of an in-cluster pod that names none, as YuniKorn's placement rules give one.

A pod's queue comes from the pod, its controlling owner, its PodGroup or
its namespace's label (:mod:`flotilla.service.intake`). Where none of them
names one, the config's ``placement`` rules are tried in order, the first
that gives a queue wins:

* ``{kind: namespace, parent: P, prefix: X}``: the queue ``X<namespace>``,
  made on first use (weight ``weight``, its namespace the pod's, under the
  config queue ``P`` when given); a queue of that name that exists already
  is used if it lists the namespace, and the rule passes otherwise;
* ``{kind: fixed, queue: Q}``: the queue ``Q`` (which must exist), whatever
  namespaces it lists: the rule lets every namespace use it.

With no rule, such a pod is refused and told to label itself or its
namespace. A cluster whose ``schedulerName`` is ``default-scheduler``
(Flotilla as the cluster's only scheduler) needs one: every pod of every
namespace comes to Flotilla. The queues a rule made are listed with the
rule that made them (``flotilla queue list``, column ``placement``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from flotilla.service.settings import QueueSpec


@dataclass(frozen=True, slots=True)
class PlacementRule:
    kind: str                 # namespace | fixed
    queue: str | None = None  # fixed: the queue
    parent: str | None = None  # namespace: the parent of the queues it makes
    prefix: str = ""          # namespace: the made queue's name is prefix + namespace
    weight: float = 1.0       # namespace: the made queue's weight

    def describe(self) -> str:
        if self.kind == "fixed":
            return f"fixed {self.queue}"
        return "namespace" + (f" under {self.parent}" if self.parent else "") + \
            (f" prefix {self.prefix}" if self.prefix else "")

    def made(self, spec: QueueSpec) -> bool:
        """Whether this (namespace) rule made ``spec``: its name is the prefix and its one namespace."""
        return (self.kind == "namespace" and len(spec.namespaces) == 1
                and spec.name == self.prefix + spec.namespaces[0])


def rules_from_config(config) -> tuple[PlacementRule, ...]:
    return tuple(PlacementRule(r.kind, r.queue, r.parent, r.prefix, r.weight)
                 for r in getattr(config, "placement", None) or ())


def place(rules: Iterable[PlacementRule], namespace: str, queues: Mapping[str, QueueSpec]
          ) -> tuple[str | None, QueueSpec | None, str]:
    """The queue the rules give a pod of ``namespace``: (its name, the spec to make first or None, where it
    came from); (None, None, why not) when no rule gives one."""
    tried = []
    for i, rule in enumerate(rules):
        where = f"placement[{i}] ({rule.describe()})"
        if rule.kind == "fixed":
            if rule.queue in queues:
                return rule.queue, None, where
            tried.append(f"{where}: queue {rule.queue!r} does not exist")
            continue
        name = rule.prefix + namespace
        existing = queues.get(name)
        if existing is None:
            return name, QueueSpec(name, weight=rule.weight, namespaces=(namespace,)), where
        if namespace in existing.namespaces:
            return name, None, where
        tried.append(f"{where}: queue {name!r} exists and does not list namespace {namespace!r}")
    return None, None, "; ".join(tried)


def queue_parents(config_queues: Iterable[QueueSpec], rules: Iterable[PlacementRule],
                  queues: Iterable[QueueSpec]) -> dict[str, str | None]:
    """Every queue's parent: the config's, else that of the namespace rule that made it."""
    parents = {q.name: q.parent for q in config_queues}
    makers = [rule for rule in rules if rule.kind == "namespace" and rule.parent]
    for spec in queues:
        if spec.name not in parents:
            rule = next((r for r in makers if r.made(spec)), None)
            if rule is not None:
                parents[spec.name] = rule.parent
    return parents


def placement_of(config_queues: Iterable[QueueSpec], rules: Iterable[PlacementRule], spec: QueueSpec) -> str | None:
    """The rule that made ``spec`` (``namespace under P``), None for a queue of the config or the API."""
    if any(q.name == spec.name for q in config_queues):
        return None
    rule = next((r for r in rules if r.made(spec)), None)
    return rule.describe() if rule is not None else None


__all__ = ["PlacementRule", "place", "placement_of", "queue_parents", "rules_from_config"]
