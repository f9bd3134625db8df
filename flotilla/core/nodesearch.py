"""Where a job may go: the node types its predicates allow (cached per cycle) and the best node among them.

A mixin of :class:`~flotilla.core.session.Session`. Predicates see node
types, never nodes, and their verdicts are cached per job requirements for
the whole cycle; the node search walks bestfit's tiers (``node_tiers``) and
the node index, with node scores ordering candidates within a tier or, for
scores registered across tiers, across them.

Node scores are kube-scheduler's: they weigh every fitting node a job may
take, or, on clusters of 100 nodes and more, kube-scheduler's sample of
them (``percentageOfNodesToScore``), taken in node order and never by free
space; each plugin's scores are normalised to 0..100 over the nodes weighed
and multiplied by the plugin's ``weight:``. Jobs without scores search the
index unchanged: the sample and the normalisation cost them nothing.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from flotilla.core.cyclestate import QueueState
from flotilla.core.model import Job
from flotilla.core.podplacements import best_possible, pod_score, pod_scored
from flotilla.core.resources import Vector
from flotilla.core.reasons import NO_NODES, Why, cause_order, nodes_available


def _by_cause(item: tuple) -> tuple:
    return cause_order(item[0])


#: How many fitting nodes a job with preferred pod rules compares at most, per tier (without node scores).
PREFERRED_WALK = 1000
#: The highest normalised node score (kube-scheduler's ``MaxNodeScore``).
MAX_NODE_SCORE = 100
#: kube-scheduler's sample bounds (``minFeasibleNodesToFind``, ``minFeasibleNodePercentageToFind``,
#: ``basePercentageOfNodesToScore``).
MIN_NODES_TO_SCORE = 100
MIN_PERCENTAGE_TO_SCORE = 5
BASE_PERCENTAGE_TO_SCORE = 50


def nodes_to_score(total: int, percentage: int) -> int:
    """How many fitting nodes node scores weigh per search, of ``total`` nodes (kube-scheduler's
    ``numFeasibleNodesToFind``).

    Every node under 100 nodes or at ``percentage`` 100; else
    ``percentage`` of them, at least 100. ``percentage`` 0 (the default)
    adapts to the cluster's size: 50% less 1% per 125 nodes, at least 5%
    (about 500 of 10,000 nodes).
    """
    if total < MIN_NODES_TO_SCORE or percentage >= 100:
        return total
    if percentage <= 0:
        percentage = max(BASE_PERCENTAGE_TO_SCORE - total // 125, MIN_PERCENTAGE_TO_SCORE)
    return max(total * percentage // 100, MIN_NODES_TO_SCORE)


class NodeSearch:
    """Allowed node types and the node search (a mixin of Session)."""

    def _open_node_search(self) -> None:
        self._allowed_cache: dict[tuple, tuple[list[int], Why | None]] = {}
        self._allowed_by_identity: dict[tuple, tuple] = {}
        #: Per requirements (the value key of ``_allowed_cache``), the refused nodes per refusal (interned).
        self._refused_nodes: dict[tuple, tuple[tuple[Why, int], ...]] = {}
        self._refusals_interned: dict[tuple, tuple[tuple[Why, int], ...]] = {}
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
        #: How many fitting nodes node scores weigh per search (:func:`nodes_to_score`), and where the next
        #: sample starts in the node list (:meth:`score_candidates`).
        self.score_sample: int = nodes_to_score(len(self.index.nodes), self.settings.percentage_of_nodes_to_score)
        self.score_start: int = 0

    def claims_key(self, names: tuple[str, ...]):
        """What decides where a job naming ``names`` may go, for caching: equal for claims of one shape (so thousands
        of claims like one another are answered once per node type, not once each)."""
        picks = self.volume_picks
        return names if picks is None else picks.signature(names)

    def interned_types(self, types: list[int]) -> list[int]:
        """The one list object equal to ``types`` this cycle (callers key caches by ``id(types)``)."""
        return self._interned_types.setdefault(tuple(types), types)

    def allowed_types(self, job: Job, cluster: str | None = None) -> tuple[list[int], Why | None]:
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
        candidates = self.volume_picks.candidate_types(job.claims, self.index.types, cluster) \
            if job.claims and self.volume_picks is not None else None
        if candidates is not None:
            # Claims pinning nodes by a label (local PVs): only the types carrying one of its values can pass; the
            # refusals, read only when a failure is worded, come from a full pass then (refused_nodes).
            types = self.index.types
            allowed, _ = self._scan(job, cluster, [types[k] for k in candidates])
        if allowed:
            why = None
        else:
            allowed, refusals = self._scan(job, cluster, self.index.types)
            why = None
            if not allowed:
                why = nodes_available(0, refusals) if refusals else NO_NODES
            refused = tuple(sorted(refusals.items(), key=_by_cause))
            self._refused_nodes[key] = self._refusals_interned.setdefault(refused, refused)
        # Equal lists are one object, so callers may key caches by id(types) across queues.
        allowed = self._interned_types.setdefault(tuple(allowed), allowed)
        result = (allowed, why)
        self._allowed_cache[key] = result
        self._allowed_by_identity[fast] = (result, selector, tolerations)
        return result

    def _scan(self, job: Job, cluster: str | None, node_types) -> tuple[list[int], Counter]:
        """The types among ``node_types`` every predicate accepts for ``job``, and the nodes refused per reason
        (each node under the first predicate that refused its type)."""
        allowed: list[int] = []
        refusals: Counter[Why] = Counter()
        for node_type in node_types:
            if cluster is not None and node_type.cluster != cluster:
                continue
            for fn in self.predicate_fns:
                reason = fn(job, node_type)
                if reason:
                    refusals[reason] += len(node_type.nodes)
                    break
            else:
                allowed.append(node_type.id)
        return allowed, refusals

    def refused_nodes(self, job: Job, cluster: str | None = None) -> tuple[tuple[Why, int], ...]:
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
            refusals = self._refused_nodes.get(key)
        if refusals is None:   # allowed_types looked only at the types its claims pin
            refused = tuple(sorted(self._scan(job, cluster, self.index.types)[1].items(), key=_by_cause))
            refusals = self._refused_nodes[key] = self._refusals_interned.setdefault(refused, refused)
        return refusals

    def find_node(self, job: Job, vec: Vector, level: int, types: Sequence[int], queue: QueueState) -> int | None:
        """Best node for ``job`` at ``level``: tier by tier, smallest fit, or best score when scorers exist.

        Node scores order the fitting nodes within the first tier that has
        any; scores registered across tiers (:meth:`_find_across_tiers`) weigh
        the candidates of every tier against each other. Either way a score
        sees every fitting node the job may take, or kube-scheduler's sample of
        them (:meth:`score_candidates`), normalised per plugin and weighted
        (:meth:`score_totals`). A job binding host ports walks the fitting
        nodes like a filtered search and skips those where one of its ports
        is held; preferred node affinity orders node types within each tier
        (:meth:`_find_preferred`).

        The node found passed steps 4 and 5 of the placement primitive
        (:mod:`flotilla.core.placement`) and the job fits there at ``level``:
        it is kept as ``_found`` for :meth:`~flotilla.core.placement.Placing.place`,
        which need not ask them again (nor step 6, when the level is one
        where fitting is fitting by its rule) until something is placed or
        returned.
        """
        pods = self.state.pods
        if job.pod_rules is None and job.affinity is None and not job.claims and not job.host_ports \
                and not pods.anti and not pods.scorers.counts and not self.node_filter_fns \
                and not self.node_score_fns and not self.tier_crossing_score_fns:
            # Nearly every job: the index's smallest fit, tier by tier, with no call in between (the node tiers'
            # guard inlined: its answer is checked once per distinct answer, not per call).
            fn, failed, check = self.node_tiers_inline
            if failed is None:
                tiers = fn(queue)
            else:
                try:
                    tiers = fn(queue)
                except Exception as exc:
                    raise failed(exc, queue) from exc
                if tiers is not self.node_tiers_accepted:
                    problem = check(tiers)
                    if problem is not None:
                        raise failed(problem, queue)
                    if tiers.__class__ is tuple:  # a list may change under the same identity
                        self.node_tiers_accepted = tiers
            find, name = self.index.find, queue.name
            for tier in tiers:
                found = find(vec, level, types, tier, name)
                if found is not None:
                    self._found = (job, found, vec, types, level)
                    return found
            return None
        found = self._find_node(job, vec, level, types, queue)
        if found is not None:
            self._found = (job, found, vec, types, level)
        return found

    def _find_node(self, job: Job, vec: Vector, level: int, types: Sequence[int], queue: QueueState) -> int | None:
        """:meth:`find_node` for any job (the jobs its common path leaves)."""
        rules = job.pod_rules
        if (rules is not None and rules.preferred) or (self.state.pods.scorers.counts and pod_scored(self, job)):
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
        if not scored and not filtered:
            # The index's smallest fit, tier by tier (a job with required node affinity, say).
            find, name = self.index.find, queue.name
            for tier in self.node_tiers_fn(queue):
                found = find(vec, level, types, tier, name)
                if found is not None:
                    return found
            return None
        for tier in self.node_tiers_fn(queue):
            found = self._find_in(job, vec, level, types, tier, queue, filtered, scored)
            if found is not None:
                return found
        return None

    def _find_in(self, job: Job, vec: Vector, level: int, types: Sequence[int], tier: str, queue: QueueState,
                 filtered: bool, scored: bool) -> int | None:
        """The best node of one tier among ``types``: the smallest fit, the first allowed one (``filtered``), or
        the best scored (``scored``)."""
        if not scored and not filtered:
            return self.index.find(vec, level, types, tier, queue.name)
        if not scored:
            # Filters only: the fitting nodes smallest first, the first allowed one.
            for i in self.index.iter_fitting_in(vec, level, types, tier, queue.name):
                if self.node_allowed(job, i):
                    return i
            return None
        candidates = self.score_candidates(job, vec, level, types, tier, queue, filtered)
        if not candidates:
            return None
        totals = self.score_totals(job, candidates, self.node_score_fns, self.node_score_weights)
        free, at = self.index.free, self.index.level_of[level]
        best = max(range(len(candidates)),
                   key=lambda n: (totals[n], tuple(-x for x in free[candidates[n]][at]), -candidates[n]))
        return candidates[best]

    def score_candidates(self, job: Job, vec: Vector, level: int, types: Sequence[int], tier: str,
                         queue: QueueState, filtered: bool) -> list[int]:
        """The nodes of one tier that node scores weigh for ``job``: the fitting nodes it may take (``filtered``:
        :meth:`node_allowed` asked of each), every one of them, or kube-scheduler's sample.

        The sample (``allocate.percentageOfNodesToScore``,
        :func:`nodes_to_score`) is taken as kube-scheduler takes it: in node
        position order from where the last sample of the cycle stopped,
        wrapping round, until it holds :attr:`score_sample` nodes. Which
        nodes are in it does not depend on their free space, so a node a
        score prefers is never left out for having the most room.
        """
        index, name = self.index, queue.name
        limit = self.score_sample
        if limit >= len(index.nodes):
            fitting = index.iter_fitting_in(vec, level, types, tier, name)
            return [i for i in fitting if self.node_allowed(job, i)] if filtered else list(fitting)
        out: list[int] = []
        for i in index.iter_fitting_from(vec, level, types, tier, name, self.score_start):
            if filtered and not self.node_allowed(job, i):
                continue
            out.append(i)
            if len(out) >= limit:
                # The next sample starts past this one, as kube-scheduler's nextStartNodeIndex moves on.
                self.score_start = (i + 1) % len(index.nodes)
                break
        return out

    @staticmethod
    def score_totals(job: Job, candidates: Sequence[int], fns: Sequence, weights: Sequence[float]) -> list[float]:
        """Each candidate's total score: every plugin's scores normalised over ``candidates``, weighted, added up.

        kube-scheduler's NormalizeScore: a plugin's highest score maps to
        :data:`MAX_NODE_SCORE` and the others in proportion (``score * 100 /
        highest``); when some score is below 0, the lowest maps to 0 and the
        range is stretched over 0 to 100 instead. A plugin that scores every
        candidate alike (all 0, say) adds the same to each, so it decides
        nothing. Then each normalised score is multiplied by its plugin's
        ``weight:`` (config, default 1) and the products added up.
        """
        totals = [0.0] * len(candidates)
        for fn, weight in zip(fns, weights):
            raw = [fn(job, i) for i in candidates]
            high, low = max(raw), min(raw)
            base = low if low < 0 else 0.0
            if high <= base:
                continue
            scale = weight * MAX_NODE_SCORE / (high - base)
            for n, score in enumerate(raw):
                totals[n] += (score - base) * scale
        return totals

    def _find_preferred(self, job: Job, vec: Vector, level: int, types: Sequence[int], queue: QueueState,
                        filtered: bool, scored: bool) -> int | None:
        """:meth:`find_node` for a job with preferred node affinity: tier by tier, and within a tier the node
        types in order of the preference weights their labels match (highest first), each group searched as
        :meth:`find_node` searches all."""
        groups = self._preferred_groups(job.affinity, types)
        for tier in self.node_tiers_fn(queue):
            for group in groups:
                found = self._find_in(job, vec, level, group, tier, queue, filtered, scored)
                if found is not None:
                    return found
        return None

    def _find_pod_preferred(self, job: Job, vec: Vector, level: int, types: Sequence[int], queue: QueueState,
                            filtered: bool) -> int | None:
        """:meth:`find_node` for a job with preferred pod rules (preferred affinity or anti-affinity,
        ``ScheduleAnyway`` spread), or one a running pod's scoring terms select (symmetric scores): the fitting
        allowed node with the best pod score
        (:func:`~flotilla.core.podplacements.pod_score`), then the earlier tier, then preferred node affinity,
        then the node scores, then the search's own order (smallest fit first). The walk stops at a node no
        other can beat (no pod of a preferred anti-affinity or spread in its domain) or after
        :data:`PREFERRED_WALK` nodes per tier. With node scores the nodes are those the scores weigh
        (:meth:`score_candidates`, every tier's), their scores normalised over them all."""
        ceiling = best_possible(self, job)
        node_affinity = job.affinity if job.affinity is not None and job.affinity.preferred else None
        scorers = self.node_score_fns
        nodes = self.index.nodes
        seen: set[int] = set()
        if scorers:
            keyed = []
            for rank, tier in enumerate(self.node_tiers_fn(queue)):
                for i in self.score_candidates(job, vec, level, types, tier, queue, filtered):
                    if i not in seen:
                        seen.add(i)
                        keyed.append(((pod_score(self, job, i), -rank,
                                       node_affinity.score(nodes[i].labels) if node_affinity is not None else 0), i))
            if not keyed:
                return None
            totals = self.score_totals(job, [i for _, i in keyed], scorers, self.node_score_weights)
            best = max(range(len(keyed)), key=lambda n: (keyed[n][0], totals[n], -n))
            return keyed[best][1]
        best_key, best = None, None
        for rank, tier in enumerate(self.node_tiers_fn(queue)):
            walked = 0
            for i in self.index.iter_fitting_in(vec, level, types, tier, queue.name):
                if i in seen:
                    continue
                if filtered and not self.node_allowed(job, i):
                    continue
                seen.add(i)
                key = (pod_score(self, job, i), -rank,
                       node_affinity.score(nodes[i].labels) if node_affinity is not None else 0)
                if best_key is None or key > best_key:
                    best_key, best = key, i
                    if ceiling is not None and key[0] >= ceiling and node_affinity is None:
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
        """The best of every tier's candidates (:meth:`score_candidates`), scores normalised over them all.

        Best: the highest total of the across-tier scores, then the earlier
        tier, then the preferred node affinity's weight, then the highest
        total of the within-tier scores, then the least free space, then the
        lower position.
        """
        index = self.index
        free, at = index.free, index.level_of[level]
        filtered = self.node_checked(job)
        preferred = job.affinity if job.affinity is not None and job.affinity.preferred else None
        candidates: list[int] = []
        ranks: list[int] = []
        seen: set[int] = set()
        for rank, tier in enumerate(self.node_tiers_fn(queue)):
            for i in self.score_candidates(job, vec, level, types, tier, queue, filtered):
                if i not in seen:   # own nodes are in the used tier too
                    seen.add(i)
                    candidates.append(i)
                    ranks.append(rank)
        if not candidates:
            return None
        crossing = self.score_totals(job, candidates, self.tier_crossing_score_fns, self.tier_crossing_score_weights)
        within = self.score_totals(job, candidates, self.node_score_fns, self.node_score_weights)
        types_of, type_of = index.types, index.type_of

        def key(n: int) -> tuple:
            i = candidates[n]
            return (crossing[n], -ranks[n],
                    preferred.score(types_of[type_of[i]].labels) if preferred is not None else 0,
                    within[n], tuple(-x for x in free[i][at]), -i)

        return candidates[max(range(len(candidates)), key=key)]

    def in_tier(self, i: int, tier: str, queue: str) -> bool:
        """Is node ``i`` in ``tier`` (``own``, ``unused``, ``used``) for ``queue``?"""
        bucket = self.index.bucket(i)
        if tier == "own":
            return bucket == queue
        if tier == "unused":
            return bucket is None
        return bucket is not None
