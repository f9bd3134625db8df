"""Topology-aware gangs: every member on nodes that share one value of a node label (Armada's gangNodeUniformityLabel).

A gang whose jobs carry ``armadaproject.io/gangNodeUniformityLabel: rack``
runs wholly within one *domain*: the nodes of one cluster whose label
``rack`` has one value. Nodes without the label (or with an empty value)
belong to no domain. The node index keeps every label key some held job
uses (selectors, node affinity, and these gangs), so nodes of different
domains are of different node types and a domain is a list of node types:
restricting a member's search to it costs nothing per node.

The domains a gang may use are tried one by one, each all or nothing
through a statement (allocate, preempt and reserve all go through
:func:`gang_places`), in this order:

* a gang some of whose members already run (evicted ones included, and an
  elastic gang's started core) has one place: the domain they run in;
* otherwise the domains whose free room could hold the gang, **tightest
  first**: the least free room left once the gang's requests are taken
  from the domain's total free room, compared as the node index compares
  free space (resource index order), then the domain's value. Within the
  domain each member goes where the usual node search puts it (per-queue
  tiers, best fit), so the fairness and best-fit rules are unchanged; the
  first domain in which every member fits is taken.

A domain's free room is summed from the index's buckets (one step per
distinct free vector, not per node), so ordering 20 racks of 1,000 nodes
costs a few dozen additions, and domains whose room cannot hold the gang
are never searched. When no domain holds the gang, :func:`no_domain_reason`
says so, names the label, and counts why each domain failed (the wording
lives only here).
"""

from __future__ import annotations

import re
from collections import Counter
from operator import add, gt, sub
from dataclasses import dataclass
from typing import Sequence

from flotilla.core.model import Gang, Job
from flotilla.core.nodeindex import EVICTED
from flotilla.core.reasons import Reason, make
from flotilla.core.resources import Vector

#: A label key is a Kubernetes qualified name: an optional DNS subdomain prefix and "/", then 1-63 characters.
_NAME_PART = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?", re.ASCII)
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*", re.ASCII)
LABEL_KEY_RULE = ("a node label key: an optional DNS subdomain prefix (lower-case letters, digits, '-' and '.', at "
                  "most 253 characters) and '/', then 1-63 letters, digits, '-', '_' or '.', starting and ending "
                  "with a letter or digit")


def uniformity_label_problem(text: object) -> str | None:
    """Why ``text`` cannot be a gang's uniformity label (a node label key), or None."""
    if isinstance(text, str):
        prefix, slash, name = text.rpartition("/")
        if len(name) <= 63 and _NAME_PART.fullmatch(name) and (
                not slash or (len(prefix) <= 253 and _DNS_SUBDOMAIN.fullmatch(prefix))):
            return None
    shown = text if not isinstance(text, str) or len(text) <= 80 else text[:80] + "..."
    return f"expected {LABEL_KEY_RULE}, got {shown!r}"


@dataclass(frozen=True, slots=True)
class GangPlace:
    """Where a gang's members go together: a whole cluster, or one domain (``label=value``) in it."""

    cluster: str
    label: str = ""
    value: str = ""

    def __str__(self) -> str:
        return f"{self.label}={self.value} in cluster {self.cluster}" if self.label else f"cluster {self.cluster}"


def domain_types(session, label: str) -> dict[tuple[str, str], list[int]]:
    """``(cluster, value) -> node types`` of the nodes whose ``label`` has that value (cached per cycle)."""
    cache = session.topology_cache
    found = cache.get(label)
    if found is None:
        found = {}
        for node_type in session.index.types:
            value = node_type.labels.get(label)
            if value and node_type.nodes:  # an empty value, like a missing label, is no domain (as in Armada)
                found.setdefault((node_type.cluster, value), []).append(node_type.id)
        cache[label] = found = dict(sorted(found.items()))
    return found


def place_types(session, job: Job, place: GangPlace | str | None) -> tuple[list[int], str | None]:
    """The node types ``job`` may use in ``place`` (a :class:`GangPlace`, a cluster name, or None for any), and
    why not when none.

    Within a domain: the job's allowed types of that cluster that are the
    domain's, cached per cycle by (allowed types object, domain).
    """
    if place is None or place.__class__ is str:
        return session.allowed_types(job, place)
    types, why = session.allowed_types(job, place.cluster)
    if not place.label or not types:
        return types, why
    key = (id(types), place.label, place.value, place.cluster)
    hit = session.place_types_cache.get(key)
    if hit is None:
        domain = set(domain_types(session, place.label).get((place.cluster, place.value), ()))
        hit = [t for t in types if t in domain]
        # Interned like allowed_types' lists: the caches key by id(types), which stays unique for the cycle.
        hit = session.interned_types(hit)
        session.place_types_cache[key] = hit
    return hit, (None if hit else f"no node the job may use in {place}")


def anchored_place(session, gang: Gang, placed: dict[str, GangPlace]) -> GangPlace | None:
    """Where a topology gang already runs: a member running (evicted ones too) or placed earlier this cycle.

    ``placed`` maps a gang id to the place an action chose for it this
    cycle. A member on a node without the label anchors the gang to that
    node's label value ``""``, which no domain has: nothing more of the gang
    can start (its members then wait, with :func:`no_domain_reason`).
    """
    found = placed.get(gang.id)
    if found is not None:
        return found
    for member in session.gangs.get(gang.id, ()):
        running = session.running.get(member.id)
        if running is not None and member.id not in session.preempted:
            node = session.index.nodes[running.node]
            return GangPlace(node.cluster, gang.uniformity_label, node.labels.get(gang.uniformity_label, ""))
    return None


@dataclass(slots=True)
class DomainSearch:
    """A topology gang's candidate domains in the order to try them, and what was learnt about the others."""

    label: str
    #: Domains to try, tightest first (or the one the gang is anchored to).
    places: list[GangPlace]
    #: How many domains the gang's clusters have for the label.
    total: int
    #: Why domains failed, counted: "insufficient cpu", "fits 3 of 4 members", ...
    outcomes: Counter

    def failed(self, placed: int, size: int) -> None:
        """Record that only ``placed`` of the gang's ``size`` members fit in the domain just tried."""
        self.outcomes[f"fits {placed} of {size} members"] += 1


def gang_places(session, gang: Gang, members: Sequence[Job], clusters: Sequence[str],
                placed: dict[str, GangPlace], level: int | None = None, demand: Vector | None = None) -> DomainSearch:
    """The domains of ``clusters`` to try for a topology gang's ``members`` (those still to place), in order.

    See the module docstring for the order. Domains whose total free room at
    ``level`` cannot hold the members' requests (``demand``, their summed
    vectors, given when the caller has it) are left out and counted as
    ``insufficient <resource>``. ``level`` is the priority whose room the
    caller may take (preempt: the gang's priority); None for allocate's,
    which counts evicted jobs' room (its second pass may take it).
    """
    label = gang.uniformity_label
    anchor = anchored_place(session, gang, placed)
    if anchor is not None:
        return DomainSearch(label, [anchor], 1, Counter())
    evicted = session.evicted
    new = [m for m in members if m.id not in evicted] if evicted else members
    if demand is None or len(new) != len(members):
        demand = _sum(map(session.vector, new), len(session.space))
    usable, total, unusable = _usable_domains(session, label, clusters, new)
    search = DomainSearch(label, [], total, Counter())
    if unusable:
        search.outcomes["no node the members may use"] = unusable
    if not usable:
        return search
    levels = session.index.levels
    # Evicted jobs' room may be taken (allocate's second pass): the bound counts it, the order does not.
    if level is None:
        level = levels[1] if evicted and len(levels) > 1 else EVICTED
    names = session.space.names
    ranked = []
    for cluster, value, types in usable:
        room = _room(session, types, level)
        if any(map(gt, demand, room)):
            short = [names[r] for r, need in enumerate(demand) if need > room[r]]
            search.outcomes["insufficient " + ", ".join(short)] += 1
            continue
        free = _room(session, types, EVICTED) if level != EVICTED else room
        left = tuple(map(sub, free, demand))
        # Domains that hold the gang in really free room first, tightest first; then those needing evicted room.
        ranked.append((min(left) < 0, left, value, cluster))
    ranked.sort()
    search.places = [GangPlace(cluster, label, value) for _, _, value, cluster in ranked]
    return search


def _usable_domains(session, label: str, clusters: Sequence[str], members: Sequence[Job]):
    """The domains of ``clusters`` as ``(cluster, value, types)``, their types cut to those some member may use
    (the room outside them is no room for the gang); how many domains there are; how many have no such type.

    Cached per cycle by the members' allowed node types (gangs usually share them).
    """
    # Members usually share their requirements: one allowed-types call per distinct requirement.
    distinct = {(m.queue, m.priority_class, id(m.node_selector), id(m.tolerations), m.affinity): m for m in members}
    allowed = {}
    for cluster in clusters:
        for member in distinct.values():
            types = session.allowed_types(member, cluster)[0]
            allowed[id(types)] = types
    key = ("usable", label, tuple(clusters), tuple(sorted(allowed)))
    cache = session.topology_cache
    hit = cache.get(key)
    if hit is None:
        usable_types = set().union(*allowed.values()) if allowed else set()
        usable, total = [], 0
        for (cluster, value), types in domain_types(session, label).items():
            if cluster in clusters:
                total += 1
                mine = [t for t in types if t in usable_types]
                if mine:
                    usable.append((cluster, value, mine))
        hit = cache[key] = (usable, total, total - len(usable))
    return hit


def every_place(session, gang: Gang | None, clusters: Sequence[str]) -> list[GangPlace]:
    """Each place a unit may go whole, whatever the room: its clusters, or for a topology gang each domain in them."""
    if gang is None or not gang.uniformity_label:
        return [GangPlace(cluster) for cluster in clusters]
    return [GangPlace(cluster, gang.uniformity_label, value)
            for cluster, value in domain_types(session, gang.uniformity_label) if cluster in clusters]


def no_domain_reason(gang: Gang, size: int, search: DomainSearch) -> Reason:
    """Why a topology gang's ``size`` members wait: no single domain of its label holds them all, with counts."""
    if not search.total:
        return make("gang_no_label", gang.id, size, search.label)
    detail = ", ".join(f"{count} {why}" for why, count in sorted(search.outcomes.items(),
                                                                 key=lambda kv: (-kv[1], kv[0])))
    return make("gang_domains", gang.id, size, search.label, search.total, detail)


def _room(session, types: Sequence[int], level: int) -> list[int]:
    """The free room at ``level`` of the nodes of ``types`` added up, from per-type sums kept for the cycle
    (a statement drops a type's sums when one of its nodes changes: placing a gang recomputes one domain)."""
    cache = session.type_room
    total = None
    for t in types:
        per_level = cache.get(t)
        if per_level is None:
            per_level = cache[t] = {}
        room = per_level.get(level)
        if room is None:
            room = per_level[level] = session.index.free_total((t,), level)
        total = room if total is None else list(map(add, total, room))
    return total if total is not None else [0] * len(session.space)


def _sum(vectors, width: int) -> Vector:
    total = [0] * width
    for vec in vectors:
        for r, amount in enumerate(vec):
            total[r] += amount
    return tuple(total)


__all__ = ["DomainSearch", "GangPlace", "LABEL_KEY_RULE", "anchored_place", "domain_types", "every_place",
           "gang_places",
           "no_domain_reason", "place_types", "uniformity_label_problem"]
