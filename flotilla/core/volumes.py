"""Persistent volume claims: where a job naming some may go, as kube-scheduler's volume plugins decide.

A job names its claims (``Job.claims``: ``namespace/name``, or ``name``
alone for the cluster's default namespace); a cluster that has volumes
resolves them into :class:`Claim` objects (``ClusterSnapshot.volumes``, a
:class:`ClusterVolumes`; the Kubernetes backend's is
:mod:`flotilla.kubernetes.volumes`). A cluster without one (a simulated
cluster) has no claims at all: such a job waits there with
:data:`NO_VOLUMES`. The rules, in kube-scheduler's words:

* **VolumeBinding** (PreFilter): a claim that does not exist, is being
  deleted or lost its volume, and an unbound claim of an ``Immediate``
  StorageClass, keep the job off every node of the cluster
  (:attr:`Claim.refusal`, worded as kube-scheduler words it).
* **VolumeBinding** (Filter), bound claims: the node must match the bound
  PV's node affinity (:data:`NODE_CONFLICT`).
* **VolumeZone**: a node carrying a zone or region label must carry one of
  the values the bound PV's label gives for it (:data:`ZONE_CONFLICT`).
* **VolumeBinding** (Filter), unbound ``WaitForFirstConsumer`` claims: the
  node must be one where a matching available static PV could be bound, or
  where the StorageClass may provision (its ``allowedTopologies``); a claim
  whose ``volume.kubernetes.io/selected-node`` is already set only on that
  node (:data:`BIND_CONFLICT`).
* **VolumeRestrictions**: a ``ReadWriteOncePod`` claim another pod uses keeps
  the job off every node (:attr:`Claim.refusal`); two jobs of one cycle do
  not both take it.

The first four see node labels only, so they are a predicate on node types
(:func:`claim_refusal`, cached per cycle like node affinity; the label keys
the volumes read are indexed while some job names a claim). What one cycle
chooses is per node: :class:`VolumePicks` keeps, for the session, which
static PV each placed job's claims take, so two jobs (two members of one
gang) never take one PV and jobs sharing a claim follow its choice; the
choices travel with the placements (``Placement.volumes``) for the backend
to bind before the pod. Jobs naming no claim never reach this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence

from flotilla.core.nodeaffinity import Term
from flotilla.core.reasons import Reason, make

#: kube-scheduler's words (VolumeBinding, VolumeZone), as they follow a count of nodes.
NODE_CONFLICT = make("volume_node_conflict")
BIND_CONFLICT = make("volume_bind_conflict")
ZONE_CONFLICT = make("volume_zone_conflict")
PV_MISSING = make("volume_pv_missing")
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
RWOP_CONFLICT = "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"
#: A cluster that has no volumes (simulated): a job naming claims cannot run there.
NO_VOLUMES = "cluster has no persistent volume claims (simulated clusters have no volumes)"


def not_found(name: str) -> str:
    return f'persistentvolumeclaim "{name}" not found'


@dataclass(frozen=True, slots=True)
class VolumeOption:
    """One way an unbound claim may be bound: a static PV (``pv``) or provisioning (``pv`` empty).

    ``terms``: the node selector terms (ORed) a node must match for it; None: any node. ``size``: the PV's
    capacity (the smallest that matches is taken, as kube-scheduler takes it).
    """

    pv: str
    terms: tuple[Term, ...] | None = None
    size: int = 0

    def allows(self, labels: Mapping[str, str]) -> bool:
        terms = self.terms
        return terms is None or any(term.matches(labels) for term in terms)


class Options(tuple):
    """A claim's :class:`VolumeOption` s, with an index for the node questions asked of them.

    Local PVs are pinned by one ``In`` requirement on one label (``kubernetes.io/hostname``); such options are
    found by the node's value of that label instead of trying each, so a claim matching thousands of PVs
    answers a node in a lookup. Claims of one shape share one object (and its index).
    """

    __slots__ = ()

    def _index(self):
        index = _INDEXES.get(id(self))
        if index is None or index[0] is not self:
            anywhere, by_label, general = [], {}, []
            for option in self:
                terms = option.terms
                if terms is None:
                    anywhere.append(option)
                elif len(terms) == 1 and len(terms[0].expressions) == 1 and not terms[0].fields \
                        and terms[0].expressions[0].operator == "In":
                    req = terms[0].expressions[0]
                    for value in req.values:
                        by_label.setdefault(req.key, {}).setdefault(value, []).append(option)
                else:
                    general.append(option)
            if len(_INDEXES) > 4096:
                _INDEXES.clear()
            index = _INDEXES[id(self)] = (self, anywhere, by_label, general)
        return index

    def matching(self, labels: Mapping[str, str]) -> list[VolumeOption]:
        """The options a node with ``labels`` allows."""
        _, anywhere, by_label, general = self._index()
        out = list(anywhere)
        for key, values in by_label.items():
            value = labels.get(key)
            if value is not None:
                out.extend(values.get(value, ()))
        out.extend(option for option in general if option.allows(labels))
        return out

    def allows(self, labels: Mapping[str, str]) -> bool:
        _, anywhere, by_label, general = self._index()
        if anywhere:
            return True
        for key, values in by_label.items():
            value = labels.get(key)
            if value is not None and value in values:
                return True
        return any(option.allows(labels) for option in general)


def _pins(claim: Claim):
    """The ``(label, values)`` pairs one of which a node must carry for ``claim`` (its options all pinned by ``In``
    on one label, or its bound PV's single ``In`` requirement), or None when it does not pin nodes so."""
    options = claim.options
    if options is not None:
        _, anywhere, by_label, general = options._index()
        return None if anywhere or general else [(key, tuple(values)) for key, values in by_label.items()]
    terms = claim.terms
    if terms is not None and len(terms) == 1 and not terms[0].fields and len(terms[0].expressions) == 1 \
            and terms[0].expressions[0].operator == "In":
        requirement = terms[0].expressions[0]
        return [(requirement.key, requirement.values)]
    return None


#: id(Options) -> (the object, its index): built once per options object while it lives.
_INDEXES: dict[int, tuple] = {}
#: id(Options) -> (the object, its pinned options in the order they are taken).
_PINNED: dict[int, tuple] = {}


@dataclass(frozen=True, slots=True)
class Claim:
    """A claim as a cluster resolves it.

    ``refusal``: why no node of the cluster will do (the claim is missing, unbound ``Immediate``, its
    ``ReadWriteOncePod`` volume in use...), else empty. A bound claim: ``terms`` (its PV's node affinity, None:
    any node) and ``zones`` (``(label, values)`` of its PV's zone labels). An unbound claim to bind at first
    consumer: ``options``, where it may be bound (None for a bound claim).
    """

    key: str
    refusal: "Reason | str" = ""
    terms: tuple[Term, ...] | None = None
    zones: tuple[tuple[str, frozenset[str]], ...] = ()
    options: Options | None = None
    rwop: bool = False

    def __post_init__(self):
        if self.options is not None and not isinstance(self.options, Options):
            object.__setattr__(self, "options", Options(self.options))

    @property
    def chooses(self) -> bool:
        """Whether placing a job decides something for this claim (a PV or a node), or two jobs could clash."""
        return self.options is not None or self.rwop


class ClusterVolumes(Protocol):
    """A cluster's claims, volumes and storage classes as one cycle sees them (fixed for the cycle)."""

    #: The node label keys the volumes' rules read (``NAME_FIELD`` for the node's name): indexed while a job
    #: names a claim, so node types tell nodes apart by them.
    label_keys: frozenset[str]

    def claims(self, names: tuple[str, ...]) -> tuple[Claim, ...]:
        """The claims ``names`` (a job's ``Job.claims``) resolved, in order; equal answers for equal names."""


def zones_allow(zones: tuple[tuple[str, frozenset[str]], ...], labels: Mapping[str, str]) -> bool:
    """VolumeZone: a node with none of the zone labels passes; else each PV zone label must list the node's value."""
    if not any(key in labels for key in ZONE_KEYS):
        return True
    for key, values in zones:
        value = labels.get(key)
        if value is None:
            value = labels.get(GA_ZONE_KEY.get(key, key))
        if value is None or value not in values:
            return False
    return True


#: The topology labels VolumeZone reads (the beta ones map to the GA ones on the node).
ZONE_KEYS = ("topology.kubernetes.io/zone", "topology.kubernetes.io/region",
             "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region")
GA_ZONE_KEY = {"failure-domain.beta.kubernetes.io/zone": "topology.kubernetes.io/zone",
               "failure-domain.beta.kubernetes.io/region": "topology.kubernetes.io/region"}


def claim_refusal(claims: Sequence[Claim], labels: Mapping[str, str]) -> str | None:
    """Why a node with ``labels`` cannot hold a job with ``claims`` (kube-scheduler's words), or None."""
    for claim in claims:
        if claim.refusal:
            return claim.refusal
    for claim in claims:
        terms = claim.terms
        if terms is not None and not any(term.matches(labels) for term in terms):
            return NODE_CONFLICT
    for claim in claims:
        options = claim.options
        if options is not None and not options.allows(labels):
            return BIND_CONFLICT
    for claim in claims:
        if claim.zones and not zones_allow(claim.zones, labels):
            return ZONE_CONFLICT
    return None


def volume_predicate(views: Mapping[str, ClusterVolumes]):
    """The node-type predicate the session registers while some job names a claim."""
    def volumes(job, node_type) -> str | None:
        names = job.claims
        if not names:
            return None
        view = views.get(node_type.cluster)
        if view is None:
            return NO_VOLUMES
        return claim_refusal(view.claims(names), node_type.labels)
    return volumes


class VolumePicks:
    """What one cycle's placements chose for their claims (see the module docstring).

    ``by_job``: job id -> ``((claim key, PV or "" to provision), ...)``; keyed by cluster and name (clusters
    have their own claims and volumes): ``pv_owner``: PV -> claim key; ``claim_choice``: claim -> (PV or "",
    node position); ``rwop_user``: a ``ReadWriteOncePod`` claim -> the job that took it.
    """

    __slots__ = ("views", "labels_of", "by_job", "cluster_of", "pv_owner", "claim_choice", "rwop_user", "exhausted",
                 "_signatures", "_cursors", "_nodes_by_label", "_type_sets", "_types_by_label")

    def __init__(self, views: Mapping[str, ClusterVolumes], labels_of):
        self.views = views
        #: node position -> (cluster, the node's labels as the predicates see them, the node's name)
        self.labels_of = labels_of
        self.by_job: dict[str, tuple[tuple[str, str], ...]] = {}
        #: (id of an options object, node position) where no option is left this cycle: skipped at once.
        self.exhausted: set[tuple[int, int]] = set()
        self._signatures: dict[tuple[str, ...], tuple] = {}
        #: id(options) -> how many of its pinned options are known taken (they are taken in order, see find).
        self._cursors: dict[int, int] = {}
        self._nodes_by_label: dict[str, dict[str, list[int]]] = {}
        #: id(allowed types list) -> (the list, as a set): the session interns equal lists for the cycle.
        self._type_sets: dict[int, tuple] = {}
        #: (cluster, label) -> label value -> the ids of that cluster's node types with it (candidate_types)
        self._types_by_label: dict[tuple[str, str], dict[str, list[int]]] = {}
        self.cluster_of: dict[str, str] = {}
        self.pv_owner: dict[tuple[str, str], str] = {}
        self.claim_choice: dict[tuple[str, str], tuple[str, int]] = {}
        self.rwop_user: dict[tuple[str, str], str] = {}

    def signature(self, names: tuple[str, ...]) -> tuple:
        """What the node-type predicate reads of the claims ``names`` on every cluster (:meth:`NodeSearch.claims_key`):
        claims of one shape share their options object, so their signatures are equal."""
        found = self._signatures.get(names)
        if found is None:
            found = self._signatures[names] = tuple(
                (cluster, tuple((c.refusal, c.terms, c.zones, id(c.options) if c.options is not None else None)
                                for c in view.claims(names)))
                for cluster, view in sorted(self.views.items()))
        return found

    def candidate_types(self, names: tuple[str, ...], types, cluster: str | None = None) -> list[int] | None:
        """The node types (ids, in order) among ``types`` that the volume predicate may accept for a job naming
        ``names`` (optionally in one cluster), found by label lookups when on every cluster one of its claims pins
        it to label values (a local PV's node: its options, or the PV a bound or pre-bound claim has); None when
        some cluster's claims do not (then every type is tried). A superset: the predicates still decide. Claims
        pinned to one PV each (starts given back while their binding was under way) would otherwise cost a pass
        over every node type apiece."""
        found: list[int] = []
        for name, view in self.views.items():
            if cluster is not None and name != cluster:
                continue
            claims = view.claims(names)
            if any(claim.refusal for claim in claims):
                continue   # every type of the cluster is refused
            pins = None
            for claim in claims:
                pins = _pins(claim)
                if pins is not None:
                    break
            if pins is None:
                return None
            for key, values in pins:
                by_value = self._types_by_label.get((name, key))
                if by_value is None:
                    by_value = self._types_by_label[(name, key)] = {}
                    for node_type in types:
                        value = node_type.labels.get(key)
                        if value is not None and node_type.cluster == name:
                            by_value.setdefault(value, []).append(node_type.id)
                for value in values:
                    found.extend(by_value.get(value, ()))
        return sorted(set(found))

    def _claims(self, job, cluster: str) -> tuple[Claim, ...] | None:
        view = self.views.get(cluster)
        return view.claims(job.claims) if view is not None else None

    def _pick(self, job, i: int) -> tuple[tuple[str, str], ...] | None:
        """The choices ``job`` would make on node ``i`` (None: it cannot go there this cycle)."""
        cluster, labels = self.labels_of(i)
        claims = self._claims(job, cluster)
        if claims is None:
            return None
        picked: list[tuple[str, str]] = []
        taken: set[str] = set()
        for claim in claims:
            if claim.rwop and self.rwop_user.get((cluster, claim.key), job.id) != job.id:
                return None
            options = claim.options
            if options is None:
                continue
            chosen = self.claim_choice.get((cluster, claim.key))
            if chosen is not None:   # another job of this cycle decided it: this one follows
                pv, node = chosen
                if pv:
                    option = next((o for o in options if o.pv == pv), None)
                    if option is None or not option.allows(labels):
                        return None
                elif node != i:
                    return None
                picked.append((claim.key, pv))
                continue
            if (id(options), i) in self.exhausted:
                return None
            best = None
            for option in options.matching(labels):
                pv = option.pv
                if pv and ((cluster, pv) in self.pv_owner or pv in taken):
                    continue
                # Static volumes first (the smallest that fits), provisioning only when none matches.
                rank = (0 if pv else 1, option.size, pv)
                if best is None or rank < best[0]:
                    best = (rank, pv)
            if best is None:
                if not taken:
                    self.exhausted.add((id(options), i))
                return None
            if best[1]:
                taken.add(best[1])
            picked.append((claim.key, best[1]))
        return tuple(picked)

    def find(self, index, job, vec, level: int, types, in_tier, tiers, limit: int):
        """A node for ``job`` found from its volumes rather than by walking the fitting nodes, or ``NotImplemented``
        when this does not apply.

        It applies to the common local-volume case: one claim left to bind, whose every option is a PV pinned by
        one label (``kubernetes.io/hostname``). Walking fitting nodes in packing order, a job would pass every node
        whose volumes earlier jobs took (O(nodes) per job); here the free PVs are read in order instead, from a
        cursor past the taken ones, and their nodes checked for room: of the first ``limit`` that have it, the one
        in the earliest of the queue's node tiers, then with the least room left, wins.
        """
        names = job.claims
        if len(self.views) != 1 or len(names) != 1:
            return NotImplemented
        ((cluster, view),) = self.views.items()
        (claim,) = view.claims(names)
        options = claim.options
        if options is None or claim.rwop or claim.refusal or (cluster, claim.key) in self.claim_choice:
            return NotImplemented
        _, anywhere, by_label, general = options._index()
        if anywhere or general or len(by_label) != 1:
            return NotImplemented
        (key,) = by_label
        pinned = self._pinned(options, key)
        nodes = self._nodes_by_label.get(key)
        if nodes is None:
            nodes = self._nodes_by_label[key] = {}
            for i, node in enumerate(index.nodes):
                value = node.labels.get(key)
                if value is not None:
                    nodes.setdefault(value, []).append(i)
        allowed = self._type_sets.get(id(types))
        if allowed is None or allowed[0] is not types:
            allowed = self._type_sets[id(types)] = (types, set(types))
        allowed = allowed[1]
        type_of, at = index.type_of, index.level_of[level]
        start = self._cursors.get(id(options), 0)
        while start < len(pinned) and (cluster, pinned[start][0].pv) in self.pv_owner:
            start += 1
        self._cursors[id(options)] = start
        ranks = {tier: r for r, tier in enumerate(tiers)}
        anywhere_rank = ranks.get("any")
        best = None
        seen = 0
        for option, value in pinned[start:]:
            if (cluster, option.pv) in self.pv_owner:
                continue
            for i in nodes.get(value, ()):
                if type_of[i] not in allowed or not index.fits_on(i, vec, level):
                    continue
                rank = anywhere_rank
                for tier, r in ranks.items():
                    if (anywhere_rank is None or r < anywhere_rank) and tier != "any" and in_tier(i, tier, job.queue):
                        rank = r
                        break
                if rank is None:
                    continue
                key = (rank, index.free[i][at], i)
                if best is None or key < best:
                    best = key
                seen += 1
            if seen >= limit:
                break
        return best[2] if best is not None else None

    @staticmethod
    def _pinned(options, key: str) -> list:
        """``options``' pinned ones as ``(option, label value)``, smallest first (the order options are taken in)."""
        found = _PINNED.get(id(options))
        if found is None or found[0] is not options:
            pairs = [(o, o.terms[0].expressions[0].values) for o in options]
            ordered = sorted(((o, v) for o, values in pairs for v in values), key=lambda p: (p[0].size, p[0].pv))
            if len(_PINNED) > 4096:
                _PINNED.clear()
            found = _PINNED[id(options)] = (options, ordered)
        return found[1]

    def allowed(self, job, i: int) -> bool:
        return self._pick(job, i) is not None

    def take(self, job, i: int) -> tuple[tuple[str, str], ...]:
        """Record ``job``'s choices on node ``i`` (its placement); returns them."""
        picked = self._pick(job, i) or ()
        cluster, _ = self.labels_of(i)
        claims = self._claims(job, cluster) or ()
        self.by_job[job.id] = picked
        for key, pv in picked:
            if (cluster, key) not in self.claim_choice:
                self.claim_choice[(cluster, key)] = (pv, i)
                if pv:
                    self.pv_owner[(cluster, pv)] = key
        for claim in claims:
            if claim.rwop:
                self.rwop_user.setdefault((cluster, claim.key), job.id)
        self.cluster_of[job.id] = cluster
        return picked

    def release(self, job) -> None:
        """Undo ``job``'s choices (its placement was discarded)."""
        picked = self.by_job.pop(job.id, None)
        if picked is None:
            return
        self.exhausted.clear()
        self._cursors.clear()
        cluster = self.cluster_of.pop(job.id)
        still = {(self.cluster_of[other], key) for other, chosen in self.by_job.items() for key, _ in chosen}
        for key, pv in picked:
            if (cluster, key) not in still and (cluster, key) in self.claim_choice:
                del self.claim_choice[(cluster, key)]
                if pv:
                    self.pv_owner.pop((cluster, pv), None)
        for key in [key for key, user in self.rwop_user.items() if user == job.id]:
            del self.rwop_user[key]


__all__ = ["BIND_CONFLICT", "Claim", "Options", "ClusterVolumes", "NODE_CONFLICT", "NO_VOLUMES", "PV_MISSING", "RWOP_CONFLICT",
           "UNBOUND_IMMEDIATE", "VolumeOption", "VolumePicks", "ZONE_CONFLICT", "claim_refusal", "not_found",
           "volume_predicate", "zones_allow"]
