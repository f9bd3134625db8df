"""Where a job may go: the node types its predicates allow (cached per cycle) and the best node among them.

A mixin of :class:`~flotilla.core.session.Session`. Predicates see node
types, never nodes, and their verdicts are cached per job requirements for
the whole cycle; the node search walks bestfit's tiers (``node_tiers``) and
the node index, with node scores ordering candidates within a tier or, for
scores registered across tiers, across them.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from flotilla.core.cyclestate import QueueState
from flotilla.core.model import Job
from flotilla.core.podplacements import best_possible, pod_score
from flotilla.core.resources import Vector
from flotilla.core.whynot import nodes_available


#: How many fitting nodes a job with preferred pod rules compares at most, per tier.
PREFERRED_WALK = 1000


class NodeSearch:
    """Allowed node types and the node search (a mixin of Session)."""

    def _open_node_search(self) -> None:
        self._allowed_cache: dict[tuple, tuple[list[int], str | None]] = {}
        self._allowed_by_identity: dict[tuple, tuple] = {}
        #: Per requirements (the value key of ``_allowed_cache``), the refused nodes per refusal (interned).
        self._refused_nodes: dict[tuple, tuple[tuple[str, int], ...]] = {}
        self._refusals_interned: dict[tuple, tuple[tuple[str, int], ...]] = {}
        self._interned_types: dict[tuple[int, ...], list[int]] = {}
        self._preferred_cache: dict[tuple, list[list[int]]] = {}
        #: Topology gangs (:mod:`flotilla.core.topology`): label -> its domains' node types, and a member's
        #: allowed types within one domain.
        self.topology_cache: dict[str, dict[tuple[str, str], list[int]]] = {}
        self.place_types_cache: dict[tuple, list[int]] = {}
        #: Node type -> level -> the type's nodes' free room added up, while no node of the type changes (the
        #: statement drops a type's entry when one of its nodes does; empty unless a topology gang asked).
        self.type_room: dict[int, dict[int, list[int]]] = {}
        #: Hard spread constraints per job shape: their eligible domains (:mod:`flotilla.core.podplacements`).
        self.spread_views: dict[tuple, tuple] = {}

    def claims_key(self, names: tuple[str, ...]):
        """What decides where a job naming ``names`` may go, for caching: equal for claims of one shape (so thousands
        of claims like one another are answered once per node type, not once each)."""
        picks = self.volume_picks
        return names if picks is None else picks.signature(names)

    def interned_types(self, types: list[int]) -> list[int]:
        """The one list object equal to ``types`` this cycle (callers key caches by ``id(types)``)."""
        return self._interned_types.setdefault(tuple(types), types)

    def allowed_types(self, job: Job, cluster: str | None = None) -> tuple[list[int], str | None]:
        """Node types the predicates accept for ``job`` (optionally in one cluster), and why not if none.

        Cached per job requirements for the whole cycle: predicates see
        node types, never nodes.
        """
        selector, tolerations, affinity = job.node_selector, job.tolerations, job.affinity
        # First by identity (jobs loaded in bulk share these objects; the snapshot keeps them alive for the
        # session), then by value. Node affinities compare by value (frozen, hashable).
        fast = (job.queue, job.priority_class, id(selector) if selector else 0, id(tolerations), affinity, cluster,
                job.claims)
        hit = self._allowed_by_identity.get(fast)
        if hit is not None:
            return hit[0]
        key = (job.queue, job.priority_class, tuple(sorted(selector.items())) if selector else (), tolerations,
               affinity, cluster, self.claims_key(job.claims) if job.claims else ())
        hit = self._allowed_cache.get(key)
        if hit is not None:
            self._allowed_by_identity[fast] = (hit, selector, tolerations)
            return hit
        allowed: list[int] = []
        refusals: Counter[str] = Counter()
        for node_type in self.index.types:
            if cluster is not None and node_type.cluster != cluster:
                continue
            for fn in self.predicate_fns:
                reason = fn(job, node_type)
                if reason:
                    refusals[reason] += len(node_type.nodes)
                    break
            else:
                allowed.append(node_type.id)
        why = None
        if not allowed:
            why = nodes_available(0, refusals) if refusals else "no nodes"
        # Equal lists are one object, so callers may key caches by id(types) across queues.
        allowed = self._interned_types.setdefault(tuple(allowed), allowed)
        result = (allowed, why)
        self._allowed_cache[key] = result
        refused = tuple(sorted(refusals.items()))
        self._refused_nodes[key] = self._refusals_interned.setdefault(refused, refused)
        self._allowed_by_identity[fast] = (result, selector, tolerations)
        return result

    def refused_nodes(self, job: Job, cluster: str | None = None) -> tuple[tuple[str, int], ...]:
        """The nodes the predicates refuse ``job`` (optionally in one cluster): ``(refusal, nodes)`` pairs.

        Each node counts once, under the first predicate that refused its
        type. Equal answers are one object all cycle, whatever the queue (a
        reason's wording is shared by identity); read when a failure is
        worded, never while placing.
        """
        selector = job.node_selector
        key = (job.queue, job.priority_class, tuple(sorted(selector.items())) if selector else (), job.tolerations,
               job.affinity, cluster, self.claims_key(job.claims) if job.claims else ())
        refusals = self._refused_nodes.get(key)
        if refusals is None:
            self.allowed_types(job, cluster)
            refusals = self._refused_nodes[key]
        return refusals

    def find_node(self, job: Job, vec: Vector, level: int, types: Sequence[int], queue: QueueState) -> int | None:
        """Best node for ``job`` at ``level``: tier by tier, smallest fit, or best score when scorers exist.

        Node scores order the fitting nodes within the first tier that has
        any; scores registered across tiers (:meth:`_find_across_tiers`) weigh
        the candidates of every tier against each other. A job binding host
        ports walks the fitting nodes like a filtered search and skips those
        where one of its ports is held; preferred node affinity orders node
        types within each tier (:meth:`_find_preferred`).
        """
        rules = job.pod_rules
        if rules is not None and rules.preferred:
            return self._find_pod_preferred(job, vec, level, types, queue, self.node_checked(job))
        if job.claims and self.volume_picks is not None and not self.tier_crossing_score_fns \
                and not self.node_score_fns and not self.node_filter_fns and not job.host_ports \
                and rules is None and (job.affinity is None or not job.affinity.preferred):
            found = self.volume_picks.find(self.index, job, vec, level, types, self.in_tier, self.node_tiers_fn(queue),
                                           self.settings.node_candidates)
            if found is not NotImplemented:
                return found
        if self.tier_crossing_score_fns:
            return self._find_across_tiers(job, vec, level, types, queue)
        filtered = self.node_checked(job)
        scored = bool(self.node_score_fns)
        affinity = job.affinity
        if affinity is not None and affinity.preferred:
            return self._find_preferred(job, vec, level, types, queue, filtered, scored)
        for tier in self.node_tiers_fn(queue):
            if not scored and not filtered:
                found = self.index.find(vec, level, types, tier, queue.name)
                if found is not None:
                    return found
                continue
            # Scorers or filters: walk the fitting nodes (smallest first per type), skipping refused ones.
            candidates = []
            for i in self.index.iter_fitting_in(vec, level, types, tier, queue.name):
                if not filtered or self.node_allowed(job, i):
                    candidates.append(i)
                    if not scored or len(candidates) >= self.settings.node_candidates:
                        break
            if candidates and not scored:
                return candidates[0]
            if candidates:
                return max(candidates, key=lambda i: (sum(fn(job, i) for fn in self.node_score_fns),
                                                      tuple(-x for x in self.index.free[i][self.index.level_of[level]]), -i))
        return None

    def _find_preferred(self, job: Job, vec: Vector, level: int, types: Sequence[int], queue: QueueState,
                        filtered: bool, scored: bool) -> int | None:
        """:meth:`find_node` for a job with preferred node affinity: tier by tier, and within a tier the node
        types in order of the preference weights their labels match (highest first), each group searched as
        :meth:`find_node` searches all."""
        groups = self._preferred_groups(job.affinity, types)
        for tier in self.node_tiers_fn(queue):
            for group in groups:
                if not scored and not filtered:
                    found = self.index.find(vec, level, group, tier, queue.name)
                    if found is not None:
                        return found
                    continue
                candidates = []
                for i in self.index.iter_fitting_in(vec, level, group, tier, queue.name):
                    if not filtered or self.node_allowed(job, i):
                        candidates.append(i)
                        if not scored or len(candidates) >= self.settings.node_candidates:
                            break
                if candidates and not scored:
                    return candidates[0]
                if candidates:
                    return max(candidates, key=lambda i: (sum(fn(job, i) for fn in self.node_score_fns),
                                                          tuple(-x for x in self.index.free[i][self.index.level_of[level]]),
                                                          -i))
        return None

    def _find_pod_preferred(self, job: Job, vec: Vector, level: int, types: Sequence[int], queue: QueueState,
                            filtered: bool) -> int | None:
        """:meth:`find_node` for a job with preferred pod rules (preferred affinity or anti-affinity,
        ``ScheduleAnyway`` spread): the fitting allowed node with the best pod score
        (:func:`~flotilla.core.podplacements.pod_score`), then the earlier tier, then preferred node affinity,
        then the node scores, then the search's own order (smallest fit first). The walk stops at a node no
        other can beat (no pod of a preferred anti-affinity or spread in its domain) or after
        :data:`PREFERRED_WALK` nodes per tier."""
        ceiling = best_possible(job.pod_rules)
        node_affinity = job.affinity if job.affinity is not None and job.affinity.preferred else None
        scorers = self.node_score_fns
        nodes = self.index.nodes
        best_key, best = None, None
        seen: set[int] = set()
        for rank, tier in enumerate(self.node_tiers_fn(queue)):
            walked = 0
            for i in self.index.iter_fitting_in(vec, level, types, tier, queue.name):
                if i in seen:
                    continue
                if filtered and not self.node_allowed(job, i):
                    continue
                seen.add(i)
                key = (pod_score(self, job, i), -rank,
                       node_affinity.score(nodes[i].labels) if node_affinity is not None else 0,
                       sum(fn(job, i) for fn in scorers) if scorers else 0)
                if best_key is None or key > best_key:
                    best_key, best = key, i
                    if ceiling is not None and key[0] >= ceiling and node_affinity is None and not scorers:
                        return best
                walked += 1
                if walked >= PREFERRED_WALK:
                    break
        return best

    def _preferred_groups(self, affinity, types: Sequence[int]) -> list[list[int]]:
        """``types`` grouped by the preference weight their labels match, highest first (cached per cycle)."""
        key = (affinity, id(types))
        groups = self._preferred_cache.get(key)
        if groups is None:
            by_score: dict[int, list[int]] = {}
            for t in types:
                by_score.setdefault(affinity.score(self.index.types[t].labels), []).append(t)
            groups = self._preferred_cache[key] = [by_score[score] for score in sorted(by_score, reverse=True)]
        return groups

    def _find_across_tiers(self, job: Job, vec: Vector, level: int, types: Sequence[int],
                           queue: QueueState) -> int | None:
        """Up to ``node_candidates`` fitting nodes from each tier, the best of them all.

        Best: the highest total of the across-tier scores, then the earlier
        tier, then the preferred node affinity's weight, then the highest
        total of the within-tier scores, then the least free space, then the
        lower position.
        """
        index, limit = self.index, self.settings.node_candidates
        crossing, within = self.tier_crossing_score_fns, self.node_score_fns
        free, at = index.free, index.level_of[level]
        filtered = self.node_checked(job)
        preferred = job.affinity if job.affinity is not None and job.affinity.preferred else None
        best_key, best = None, None
        seen: set[int] = set()
        for rank, tier in enumerate(self.node_tiers_fn(queue)):
            taken = 0
            for i in index.iter_fitting(vec, level, types):
                if i in seen or not (tier == "any" or self.in_tier(i, tier, queue.name)):
                    continue
                if filtered and not self.node_allowed(job, i):
                    continue
                seen.add(i)
                key = (sum(fn(job, i) for fn in crossing), -rank,
                       preferred.score(index.types[index.type_of[i]].labels) if preferred is not None else 0,
                       sum(fn(job, i) for fn in within), tuple(-x for x in free[i][at]), -i)
                if best_key is None or key > best_key:
                    best_key, best = key, i
                taken += 1
                if taken >= limit:
                    break
        return best

    def in_tier(self, i: int, tier: str, queue: str) -> bool:
        """Is node ``i`` in ``tier`` (``own``, ``unused``, ``used``) for ``queue``?"""
        bucket = self.index.bucket(i)
        if tier == "own":
            return bucket == queue
        if tier == "unused":
            return bucket is None
        return bucket is not None
