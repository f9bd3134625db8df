"""Where pods are, counted per topology domain for the selectors jobs' pod rules use.

The cycle state keeps one :class:`PodPlacements` between cycles beside the
node index (like :class:`~flotilla.core.hostports.HostPorts`) and changes
it wherever a pod is bound to or taken off a node: running jobs, pods
Flotilla did not place (``ClusterSnapshot.foreign_pods``), placements,
preemptions, and their undoing; so a gang's members count for each other
while the gang is placed, and every action sees the same rules.

Counts are kept only for the selectors some job asked about (a
:class:`Matcher` per distinct set of ``(namespaces, selector)`` parts,
filled once from the pods held when first asked, then kept up to date on
every bind and unbind), per node and per value of each topology key asked
of it. A bind looks up only the matchers indexed under one of the pod's own
labels (or that no single label identifies), so pods and jobs without pod
rules cost a dictionary entry each and nothing more. Required anti-affinity
of the pods held is counted per term and domain, so every job's
existing-pods check is a few lookups, once per label set and change.

Running pods' preferred terms and required affinity score the pods they
select (kube-scheduler's symmetric InterPodAffinity scores): held in
:class:`HeldTerms` like the anti-affinity terms, per term and weight and
domain, indexed by a label every pod they select carries, so a job none of
them selects pays a few dictionary lookups, and nothing while no running pod
has such terms.

Terms with a ``namespaceSelector`` read the namespaces' labels the cycle
state sets from the snapshot (:meth:`PodPlacements.set_namespace_labels`);
when those change, the matchers that read them are made again when next
asked (no other matcher is touched).

:func:`pod_refusal` and :func:`pod_score` evaluate
:mod:`flotilla.core.podrules` for a job on one node, in kube-scheduler's
words and order (PodTopologySpread, then InterPodAffinity's affinity,
anti-affinity, existing pods' anti-affinity).
"""

from __future__ import annotations

from operator import is_ as _is
from typing import Mapping, Sequence

from flotilla.core.feasibility import REFUSING_EFFECTS
from flotilla.core.podrules import NamespaceSelection, PodRules, PodTerm, Selector, namespace_allows
from flotilla.core.reasons import make

SPREAD_NOT_MATCHED = make("spread")
SPREAD_MISSING_LABEL = make("spread_missing_label")
AFFINITY_NOT_MATCHED = make("pod_affinity")
ANTI_AFFINITY_NOT_MATCHED = make("pod_anti_affinity")
EXISTING_ANTI_AFFINITY = make("existing_anti_affinity")

#: How many selectors' counts are kept between cycles at most (:meth:`PodPlacements.prune`).
MAX_MATCHERS = 4096
#: What a running pod's required affinity term adds per pod for a pod it selects (kube-scheduler's
#: InterPodAffinity ``hardPodAffinityWeight``, default 1).
HARD_POD_AFFINITY_WEIGHT = 1
#: A matcher's parts: ``(namespaces or None for every one, selector)``, all of which a pod must match.
Parts = tuple[tuple[frozenset | NamespaceSelection | None, Selector], ...]


def _matches(parts: Parts, namespace: str, labels: Mapping[str, str],
             namespace_labels: Mapping[str, Mapping[str, str]]) -> bool:
    for namespaces, selector in parts:
        if namespaces is not None and namespace not in namespaces and \
                not namespace_allows(namespaces, namespace, namespace_labels):
            return False
        if not selector.matches(labels):
            return False
    return True


def _selective(parts: Parts) -> bool:
    """Whether ``parts`` read namespaces' labels (a ``namespaceSelector``)."""
    return any(namespaces.__class__ is NamespaceSelection for namespaces, _ in parts)


class Matcher:
    """The pods matching every part, counted per node and per domain of each topology key asked."""

    __slots__ = ("parts", "per_node", "by_key", "version", "live_only")

    def __init__(self, parts: Parts, live_only: bool = False):
        self.parts = parts
        #: Spread's matchers leave terminating pods out (kube-scheduler's PodTopologySpread counts only live ones).
        self.live_only = live_only
        self.per_node: dict[int, int] = {}
        self.by_key: dict[str, dict[str, int]] = {}
        self.version = 0


def scoring_terms(rules: PodRules) -> list[tuple[PodTerm, int]]:
    """A running pod's terms that score the pods they select, with their signed weights: required affinity
    (:data:`HARD_POD_AFFINITY_WEIGHT`), preferred affinity (+weight), preferred anti-affinity (-weight)."""
    out = [(term, HARD_POD_AFFINITY_WEIGHT) for term in rules.affinity if HARD_POD_AFFINITY_WEIGHT]
    out.extend((term, weight) for weight, term in rules.preferred_affinity)
    out.extend((term, -weight) for weight, term in rules.preferred_anti_affinity)
    return out


class HeldTerms:
    """Terms of the pods held, each with its signed weight: ``(term, weight)`` -> domain value (of the term's
    topology key) -> how many pods hold it there; indexed by a label every pod the term selects carries
    (``by_label``), else ``general``. ``version`` moves when a ``(term, weight)`` comes or goes."""

    __slots__ = ("counts", "by_label", "general", "version", "_cache")

    def __init__(self) -> None:
        self.counts: dict[tuple[PodTerm, int], dict[str, int]] = {}
        self.by_label: dict[tuple[str, str], set[tuple[PodTerm, int]]] = {}
        self.general: set[tuple[PodTerm, int]] = set()
        self.version = 0
        self._cache: tuple | None = None

    def __bool__(self) -> bool:
        return bool(self.counts)

    def count(self, node_labels: Mapping[str, str], terms: Sequence[tuple[PodTerm, int]], sign: int) -> None:
        for entry in terms:
            term = entry[0]
            value = node_labels.get(term.topology_key)
            if value is None or term.selector is None:
                continue
            here = self.counts.get(entry)
            if here is None:
                here = self.counts[entry] = {}
                self.version += 1
                pair = _indexing_label(((term.namespaces, term.selector),))
                if pair is None:
                    self.general.add(entry)
                else:
                    self.by_label.setdefault(pair, set()).add(entry)
            number = here.get(value, 0) + sign
            if number:
                here[value] = number
                continue
            here.pop(value, None)
            if not here:
                del self.counts[entry]
                self.version += 1
                pair = _indexing_label(((term.namespaces, term.selector),))
                if pair is None:
                    self.general.discard(entry)
                else:
                    held = self.by_label[pair]
                    held.discard(entry)
                    if not held:
                        del self.by_label[pair]

    def clear(self) -> None:
        self.counts.clear()
        self.by_label.clear()
        self.general.clear()
        self.version += 1
        self._cache = None

    def selecting(self, namespace: str, labels: Mapping[str, str],
                  namespace_labels: Mapping[str, Mapping[str, str]]) -> list[tuple[str, int, dict[str, int]]]:
        """``(topology key, signed weight, domain value -> holders)`` of the held terms that select a pod of
        ``namespace`` with ``labels`` (the last answer kept while no term came or went)."""
        cached = self._cache
        if cached is not None and cached[0] == self.version and cached[1] == namespace and cached[2] is labels \
                and cached[3] is namespace_labels:
            return cached[4]
        found = []
        for entry in self.general:
            if entry[0].matches(namespace, labels, namespace_labels):
                found.append((entry[0].topology_key, entry[1], self.counts[entry]))
        if labels and self.by_label:
            get = self.by_label.get
            for pair in labels.items():
                entries = get(pair)
                if entries:
                    for entry in entries:
                        if entry[0].matches(namespace, labels, namespace_labels):
                            found.append((entry[0].topology_key, entry[1], self.counts[entry]))
        self._cache = (self.version, namespace, labels, namespace_labels, found)
        return found


class PodPlacements:
    """Node position -> pods, and the counts the pod rules read (see the module docstring)."""

    __slots__ = ("index", "where", "matchers", "by_label", "general", "anti", "anti_by_label", "anti_general",
                 "pods_by_label", "_by_identity", "namespace_labels", "selective", "scorers")

    def __init__(self, index) -> None:
        #: The node index, for the nodes' labels (topology domains).
        self.index = index
        #: Pod id -> (node position, pod): every pod bound to a node.
        self.where: dict[str, tuple[int, object]] = {}
        self.matchers: dict[tuple[Parts, bool], Matcher] = {}
        #: (label key, value) -> the matchers a pod must carry that label to match; ``general``: the rest.
        self.by_label: dict[tuple[str, str], list[Matcher]] = {}
        self.general: list[Matcher] = []
        #: Required anti-affinity terms of the pods held -> domain value -> how many hold it there; the terms
        #: indexed as the matchers are (by a label every pod they select carries, else ``anti_general``).
        self.anti: dict[PodTerm, dict[str, int]] = {}
        self.anti_by_label: dict[tuple[str, str], set[PodTerm]] = {}
        self.anti_general: set[PodTerm] = set()
        #: (label key, value) -> ids of the pods carrying it; made when the first matcher is, kept after.
        self.pods_by_label: dict[tuple[str, str], set[str]] | None = None
        #: id(term or terms) -> (it, its matcher): terms are shared objects, hashed by value only once.
        self._by_identity: dict[int, tuple[object, Matcher]] = {}
        #: Namespace name -> its labels (the clusters' Namespace objects), read by ``namespaceSelector`` terms.
        self.namespace_labels: Mapping[str, Mapping[str, str]] = {}
        #: How many matchers read namespaces' labels.
        self.selective = 0
        #: The held pods' terms that score the pods they select (symmetric scores).
        self.scorers = HeldTerms()

    def __bool__(self) -> bool:
        return bool(self.where)

    # -- binding ---------------------------------------------------------------
    def add(self, node: int, pod) -> None:
        self.where[pod.id] = (node, pod)
        by_label = self.pods_by_label
        if by_label is not None and pod.labels:
            for pair in pod.labels.items():
                held = by_label.get(pair)
                if held is None:
                    by_label[pair] = {pod.id}
                else:
                    held.add(pod.id)
        if self.matchers:
            self._count(node, pod, 1)
        rules = pod.pod_rules
        if rules is not None:
            if rules.anti_affinity:
                self._count_anti(node, rules.anti_affinity, 1)
            if rules.affinity or rules.preferred_affinity or rules.preferred_anti_affinity:
                self.scorers.count(self.index.nodes[node].labels, scoring_terms(rules), 1)

    def remove(self, pod_id: str) -> None:
        found = self.where.pop(pod_id, None)
        if found is None:
            return
        node, pod = found
        by_label = self.pods_by_label
        if by_label is not None and pod.labels:
            for pair in pod.labels.items():
                held = by_label.get(pair)
                if held is not None:
                    held.discard(pod_id)
                    if not held:
                        del by_label[pair]
        if self.matchers:
            self._count(node, pod, -1)
        rules = pod.pod_rules
        if rules is not None:
            if rules.anti_affinity:
                self._count_anti(node, rules.anti_affinity, -1)
            if rules.affinity or rules.preferred_affinity or rules.preferred_anti_affinity:
                self.scorers.count(self.index.nodes[node].labels, scoring_terms(rules), -1)

    def _candidates(self, labels: Mapping[str, str]) -> list[Matcher]:
        found = list(self.general)
        if self.by_label and labels:
            get = self.by_label.get
            for pair in labels.items():
                hit = get(pair)
                if hit:
                    found.extend(hit)
        return found

    def _count(self, node: int, pod, sign: int) -> None:
        labels = pod.labels
        candidates = self._candidates(labels)
        if not candidates:
            return
        node_labels = self.index.nodes[node].labels
        terminating = getattr(pod, "terminating", False)
        for matcher in candidates:
            if (terminating and matcher.live_only) or \
                    not _matches(matcher.parts, pod.namespace, labels, self.namespace_labels):
                continue
            _bump(matcher, node, node_labels, sign)

    def _count_anti(self, node: int, terms: Sequence[PodTerm], sign: int) -> None:
        node_labels = self.index.nodes[node].labels
        for term in terms:
            value = node_labels.get(term.topology_key)
            if value is None:
                continue
            here = self.anti.get(term)
            if here is None:
                here = self.anti[term] = {}
                pair = _indexing_label(((term.namespaces, term.selector),)) if term.selector is not None else None
                if pair is None:
                    self.anti_general.add(term)
                else:
                    self.anti_by_label.setdefault(pair, set()).add(term)
            count = here.get(value, 0) + sign
            if count:
                here[value] = count
            else:
                here.pop(value, None)
                if not here:
                    del self.anti[term]
                    pair = _indexing_label(((term.namespaces, term.selector),)) if term.selector is not None else None
                    if pair is None:
                        self.anti_general.discard(term)
                    else:
                        terms_here = self.anti_by_label[pair]
                        terms_here.discard(term)
                        if not terms_here:
                            del self.anti_by_label[pair]

    # -- nodes changing ------------------------------------------------------------
    def remap(self, moved: Sequence[int]) -> None:
        """Nodes renumbered or relabelled (``moved[old]`` the new position, -1 removed): counts start over."""
        self.where = {pod_id: (moved[node], pod) for pod_id, (node, pod) in self.where.items() if moved[node] >= 0}
        self.relabelled()

    def relabelled(self) -> None:
        """Nodes' labels changed: the domain counts are made again when next asked."""
        self._drop_matchers()
        held = list(self.where.values())
        self.anti.clear()
        self.anti_by_label.clear()
        self.anti_general.clear()
        self.scorers.clear()
        nodes = self.index.nodes
        for node, pod in held:
            rules = pod.pod_rules
            if rules is not None:
                if rules.anti_affinity:
                    self._count_anti(node, rules.anti_affinity, 1)
                if rules.affinity or rules.preferred_affinity or rules.preferred_anti_affinity:
                    self.scorers.count(nodes[node].labels, scoring_terms(rules), 1)

    def _drop_matchers(self) -> None:
        self.matchers.clear()
        self.by_label.clear()
        self.general.clear()
        self._by_identity.clear()
        self.selective = 0

    def set_namespace_labels(self, labels: Mapping[str, Mapping[str, str]]) -> None:
        """The namespaces' labels as the clusters have them now; when they changed, the matchers that read them
        (``namespaceSelector`` terms) are made again when next asked."""
        if labels is self.namespace_labels or labels == self.namespace_labels:
            self.namespace_labels = labels
            return
        self.namespace_labels = labels
        if not self.selective:
            return
        for key, matcher in list(self.matchers.items()):
            if _selective(matcher.parts):
                del self.matchers[key]
        self.by_label = {pair: kept for pair, found in self.by_label.items()
                         if (kept := [m for m in found if not _selective(m.parts)])}
        self.general = [m for m in self.general if not _selective(m.parts)]
        self._by_identity = {k: hit for k, hit in self._by_identity.items() if not _selective(hit[1].parts)}
        self.selective = 0

    def prune(self) -> None:
        """Between cycles: past :data:`MAX_MATCHERS` selectors kept, start over (they are made again when asked)."""
        if len(self.matchers) > MAX_MATCHERS:
            self._drop_matchers()

    # -- reading ---------------------------------------------------------------------
    def term_matcher(self, term: PodTerm) -> Matcher:
        """The matcher of one term's pods (found by the term object's identity first)."""
        hit = self._by_identity.get(id(term))
        if hit is not None and hit[0] is term:
            return hit[1]
        matcher = self.matcher(((term.namespaces, term.selector),))
        self._by_identity[id(term)] = (term, matcher)
        return matcher

    def affinity_matcher(self, terms: tuple[PodTerm, ...]) -> Matcher:
        """The matcher of the pods matching every one of ``terms`` (required affinity counts those)."""
        hit = self._by_identity.get(id(terms))
        if hit is not None and hit[0] is terms:
            return hit[1]
        matcher = self.matcher(tuple((term.namespaces, term.selector) for term in terms))
        self._by_identity[id(terms)] = (terms, matcher)
        return matcher

    def spread_matcher(self, constraint, namespace: str) -> Matcher:
        """The matcher of a spread constraint's pods: its selector's, in the pod's own namespace."""
        key = id(constraint)
        hit = self._by_identity.get(key)
        if hit is not None and hit[0] is constraint and namespace in hit[1].parts[0][0]:
            return hit[1]
        matcher = self.matcher(((frozenset((namespace,)), constraint.selector or _NOTHING),), live_only=True)
        self._by_identity[key] = (constraint, matcher)
        return matcher

    def matcher(self, parts: Parts, live_only: bool = False) -> Matcher:
        """The matcher for ``parts``, made and filled from the pods held when first asked (only those carrying
        its indexing label, when it has one)."""
        matcher = self.matchers.get((parts, live_only))
        if matcher is not None:
            return matcher
        matcher = self.matchers[(parts, live_only)] = Matcher(parts, live_only)
        if _selective(parts):
            self.selective += 1
        key = _indexing_label(parts)
        if key is None:
            self.general.append(matcher)
        else:
            self.by_label.setdefault(key, []).append(matcher)
        if self.pods_by_label is None:
            by_label: dict[tuple[str, str], set[str]] = {}
            for pod_id, (_, pod) in self.where.items():
                for pair in pod.labels.items():
                    by_label.setdefault(pair, set()).add(pod_id)
            self.pods_by_label = by_label
        nodes, where = self.index.nodes, self.where
        if key is None:
            held = where.values()
        else:
            held = [where[pod_id] for pod_id in self.pods_by_label.get(key, ())]
        for node, pod in held:
            if live_only and getattr(pod, "terminating", False):
                continue
            if _matches(parts, pod.namespace, pod.labels, self.namespace_labels):
                _bump(matcher, node, nodes[node].labels, 1)
        return matcher

    def domain_counts(self, matcher: Matcher, key: str) -> dict[str, int]:
        """Topology ``key``'s value -> how many of ``matcher``'s pods are on nodes with that value."""
        counts = matcher.by_key.get(key)
        if counts is None:
            counts = matcher.by_key[key] = {}
            nodes = self.index.nodes
            for node, number in matcher.per_node.items():
                value = nodes[node].labels.get(key)
                if value is not None:
                    counts[value] = counts.get(value, 0) + number
        return counts

    def forbidden(self, namespace: str, labels: Mapping[str, str]) -> list[tuple[str, dict[str, int]]]:
        """``(topology key, domain value -> holders)`` of the held pods' required anti-affinity terms that select
        a pod of ``namespace`` with ``labels``: it may not go to those domains."""
        found = []
        known = self.namespace_labels
        for term in self.anti_general:
            if term.matches(namespace, labels, known):
                found.append((term.topology_key, self.anti[term]))
        if labels and self.anti_by_label:
            get = self.anti_by_label.get
            for pair in labels.items():
                terms = get(pair)
                if terms:
                    for term in terms:
                        if term.matches(namespace, labels, known):
                            found.append((term.topology_key, self.anti[term]))
        return found


def _bump(matcher: Matcher, node: int, node_labels: Mapping[str, str], sign: int) -> None:
    per_node = matcher.per_node
    count = per_node.get(node, 0) + sign
    if count:
        per_node[node] = count
    else:
        per_node.pop(node, None)
    for key, counts in matcher.by_key.items():
        value = node_labels.get(key)
        if value is not None:
            count = counts.get(value, 0) + sign
            if count:
                counts[value] = count
            else:
                counts.pop(value, None)
    matcher.version += 1


def _indexing_label(parts: Parts) -> tuple[str, str] | None:
    """A ``(key, value)`` label every matching pod carries (an ``In`` of one value), or None."""
    for _, selector in parts:
        for requirement in selector.requirements:
            if requirement.operator == "In" and len(requirement.values) == 1:
                return requirement.key, requirement.values[0]
    return None


# -- evaluating a job's rules on one node --------------------------------------------------
class SpreadView:
    """One hard spread constraint as one job shape sees it this cycle: its eligible domains and counts."""

    __slots__ = ("constraint", "matcher", "eligible", "domains", "restricted", "min_at", "min_value")

    def __init__(self, constraint, matcher: Matcher, eligible: set[int] | None, domains: set[str]):
        self.constraint = constraint
        self.matcher = matcher
        #: Eligible node positions (None: every node with the constraints' keys).
        self.eligible = eligible
        self.domains = domains
        self.restricted: tuple[int, dict[str, int]] | None = None
        self.min_at = -1
        self.min_value = 0


def _spread_view(session, job, constraint) -> SpreadView:
    """The eligible domains of ``constraint`` for ``job`` (cached for the cycle per constraint and job shape)."""
    rules = job.pod_rules
    # By identity (jobs of one shape share these objects); the objects are kept with the view, so ids stay theirs.
    refs = (constraint, job.node_selector or None, job.affinity, job.tolerations if constraint.honor_taints else None,
            rules.spread)
    key = (*map(id, refs), job.namespace)
    cache = session.spread_views
    view = cache.get(key)
    if view is not None and all(map(_is, view[0], refs)):
        return view[1]
    index = session.index
    keys = [c.topology_key for c in rules.spread]
    eligible: set[int] | None = None
    domains: set[str] = set()
    restricted = False
    for node_type in index.types:
        if constraint.honor_affinity:
            if any(node_type.labels.get(k) != v for k, v in job.node_selector.items()):
                restricted = True
                continue
            if job.affinity is not None and not job.affinity.allows(node_type.labels):
                restricted = True
                continue
        if constraint.honor_taints and any(
                taint.effect in REFUSING_EFFECTS and not any(t.tolerates(taint) for t in job.tolerations)
                for taint in node_type.taints):
            restricted = True
            continue
        for i in node_type.nodes:
            labels = index.nodes[i].labels
            value = labels.get(constraint.topology_key)
            if value is None:
                continue
            if len(keys) > 1 and any(k not in labels for k in keys):
                restricted = True
                continue
            domains.add(value)
            if eligible is None:
                eligible = set()
            eligible.add(i)
    if not restricted:
        eligible = None
    elif eligible is None:
        eligible = set()
    view = SpreadView(constraint, session.state.pods.spread_matcher(constraint, job.namespace), eligible, domains)
    cache[key] = (refs, view)
    return view


#: A selector no pod matches (a constraint without labelSelector counts nothing).
class _Nothing(Selector):
    __slots__ = ()

    def matches(self, labels) -> bool:
        return False


_NOTHING = _Nothing(())


def _counts(session, view: SpreadView) -> dict[str, int]:
    matcher = view.matcher
    if view.eligible is None:
        return session.state.pods.domain_counts(matcher, view.constraint.topology_key)
    cached = view.restricted
    if cached is not None and cached[0] == matcher.version:
        return cached[1]
    counts: dict[str, int] = {}
    nodes, key, eligible = session.index.nodes, view.constraint.topology_key, view.eligible
    for node, number in matcher.per_node.items():
        if node in eligible:
            value = nodes[node].labels.get(key)
            if value is not None:
                counts[value] = counts.get(value, 0) + number
    view.restricted = (matcher.version, counts)
    return counts


def _minimum(view: SpreadView, counts: dict[str, int]) -> int:
    if view.min_at == view.matcher.version:
        return view.min_value
    domains = view.domains
    if len(domains) < view.constraint.min_domains:
        value = 0
    elif sum(1 for v in counts if v in domains) < len(domains):
        value = 0  # some eligible domain holds none
    else:
        value = min(counts.get(v, 0) for v in domains)
    view.min_at, view.min_value = view.matcher.version, value
    return value


def pod_refusal(session, job, i: int) -> str | None:
    """Why ``job``'s pod rules (or held pods' anti-affinity) refuse node ``i`` (kube-scheduler's words), or None."""
    pods = session.state.pods
    node_labels = session.index.nodes[i].labels
    rules: PodRules | None = job.pod_rules
    if rules is not None:
        hard = [c for c in rules.spread if c.hard]
        if hard:
            for constraint in hard:
                if constraint.topology_key not in node_labels:
                    return SPREAD_MISSING_LABEL
            for constraint in hard:
                view = _spread_view(session, job, constraint)
                counts = _counts(session, view)
                here = counts.get(node_labels[constraint.topology_key], 0)
                selector = constraint.selector
                own = 1 if selector is not None and selector.matches(job.labels) else 0
                if here + own - _minimum(view, counts) > constraint.max_skew:
                    return SPREAD_NOT_MATCHED
        if rules.affinity:
            terms = rules.affinity
            for term in terms:
                if term.topology_key not in node_labels:
                    return AFFINITY_NOT_MATCHED
            matcher = pods.affinity_matcher(terms)
            counts = [pods.domain_counts(matcher, term.topology_key) for term in terms]
            if not all(here.get(node_labels[term.topology_key], 0) > 0 for term, here in zip(terms, counts)):
                # The first pod of a group affine to itself may go where the topology keys are: no pod matching
                # the terms on a node with their keys, and the pod matches them itself.
                if any(counts) or not all(term.matches(job.namespace, job.labels, pods.namespace_labels)
                                          for term in terms):
                    return AFFINITY_NOT_MATCHED
        for term in rules.anti_affinity:
            value = node_labels.get(term.topology_key)
            if value is not None and pods.domain_counts(pods.term_matcher(term), term.topology_key).get(value):
                return ANTI_AFFINITY_NOT_MATCHED
    if pods.anti:
        for key, values in pods.forbidden(job.namespace, job.labels):
            value = node_labels.get(key)
            if value is not None and value in values:
                return EXISTING_ANTI_AFFINITY
    return None


def pod_checked(session, job) -> bool:
    """Whether node ``i`` must be checked by :func:`pod_refusal` for ``job`` (nearly every job: no)."""
    rules = job.pod_rules
    if rules is not None and rules.required:
        return True
    pods = session.state.pods
    return bool(pods.anti) and bool(pods.forbidden(job.namespace, job.labels))


def pod_scored(session, job) -> bool:
    """Whether ``job``'s nodes are ordered by :func:`pod_score`: it has preferred rules, or a running pod's
    scoring terms select it (for nearly every job: no, in a lookup or two)."""
    rules = job.pod_rules
    if rules is not None and rules.preferred:
        return True
    pods = session.state.pods
    return bool(pods.scorers) and bool(pods.scorers.selecting(job.namespace, job.labels, pods.namespace_labels))


def pod_score(session, job, i: int) -> int:
    """Preferred affinity (+weight per selected pod in the node's domain), preferred anti-affinity (-weight per
    pod) and ``ScheduleAnyway`` constraints (-1 per selected pod of the domain); then the running pods' terms
    that select the job (symmetric: each holder in the node's domain adds its term's signed weight): higher is
    better."""
    pods = session.state.pods
    node_labels = session.index.nodes[i].labels
    score = 0
    if pods.scorers:
        for key, weight, counts in pods.scorers.selecting(job.namespace, job.labels, pods.namespace_labels):
            value = node_labels.get(key)
            if value is not None:
                score += weight * counts.get(value, 0)
    rules: PodRules | None = job.pod_rules
    if rules is None:
        return score
    for weight, term in rules.preferred_affinity:
        value = node_labels.get(term.topology_key)
        if value is not None:
            score += weight * pods.domain_counts(pods.term_matcher(term), term.topology_key).get(value, 0)
    for weight, term in rules.preferred_anti_affinity:
        value = node_labels.get(term.topology_key)
        if value is not None:
            score -= weight * pods.domain_counts(pods.term_matcher(term), term.topology_key).get(value, 0)
    for constraint in rules.spread:
        if constraint.hard:
            continue
        value = node_labels.get(constraint.topology_key)
        if value is None:
            score -= 1 << 20  # kube-scheduler scores a node without the key lowest
            continue
        score -= pods.domain_counts(pods.spread_matcher(constraint, job.namespace), constraint.topology_key
                                    ).get(value, 0)
    return score


def best_possible(session, job) -> int | None:
    """The highest :func:`pod_score` a node can have when no term adds to it (0), else None (unbounded)."""
    rules = job.pod_rules
    if rules is not None and rules.preferred_affinity:
        return None
    pods = session.state.pods
    if pods.scorers and any(weight > 0 for _, weight, _ in
                            pods.scorers.selecting(job.namespace, job.labels, pods.namespace_labels)):
        return None
    return 0


__all__ = ["AFFINITY_NOT_MATCHED", "ANTI_AFFINITY_NOT_MATCHED", "EXISTING_ANTI_AFFINITY", "HARD_POD_AFFINITY_WEIGHT",
           "HeldTerms", "Matcher", "PodPlacements", "SPREAD_MISSING_LABEL", "SPREAD_NOT_MATCHED", "pod_checked",
           "pod_refusal", "pod_score", "pod_scored"]
