"""A Kubernetes cluster's claims, volumes and storage classes, and binding claims as kube-scheduler's binder does.

The backend's informers for PersistentVolumeClaims, PersistentVolumes and
StorageClasses feed :class:`VolumeState` (under the backend's lock); the pod
informer tells it which scheduled pods use which claims (for
``ReadWriteOncePod``). Each snapshot takes :meth:`VolumeState.view`, a
:class:`KubeVolumes` fixed for the cycle (made again only after something
changed), which resolves the claims jobs name into the core's
:class:`~flotilla.core.volumes.Claim` as kube-scheduler's VolumeBinding
(``binder.go``: ``GetPodVolumeClaims``, ``checkBoundClaims``,
``findMatchingVolumes``, ``checkVolumeProvisions``), VolumeZone and
VolumeRestrictions read them.

Binding (the backend, before it creates or binds the pod; kube-scheduler's
``AssumePodVolumes`` and ``BindPodVolumes``): a static choice writes the PV's
``claimRef`` and ``pv.kubernetes.io/bound-by-controller`` (the PV controller
then binds the claim), a dynamic one writes
``volume.kubernetes.io/selected-node`` on the claim (the provisioner then
makes a volume there). The choice is *assumed* at once, so the next cycles
see the PV taken and the claim's node chosen before the watch shows it; a
``claimRef`` written keeps its PV taken, and that claim's, until the PV's own
watch shows it (:attr:`VolumeState.written`), whatever the claim's watch
shows first or however the start ends (a PV chosen again from a stale copy
would be written with an old ``resourceVersion``: 409 Conflict). The
pod is made only once every claim of the job is bound. A write refused, a
provisioner that gives the claim back (the annotation removed), or a claim
still unbound after the backend's ``volume_bind_timeout`` return the job to
its queue with the reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from flotilla.core.nodeaffinity import NAME_FIELD, REQUIRED, AffinityError, Requirement, Term, parse_node_affinity
from flotilla.core.quantities import QuantityError, parse_quantity
from flotilla.core.volumes import (PV_MISSING, RWOP_CONFLICT, UNBOUND_IMMEDIATE, ZONE_KEYS, Claim, Options,
                                   VolumeOption, not_found)

SELECTED_NODE = "volume.kubernetes.io/selected-node"
BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
RWOP = "ReadWriteOncePod"

PVCS_PATH = "/api/v1/persistentvolumeclaims"
PVS_PATH = "/api/v1/persistentvolumes"
CLASSES_PATH = "/apis/storage.k8s.io/v1/storageclasses"
#: The informers this module needs: kind -> list/watch path.
INFORMERS = {"pvcs": PVCS_PATH, "pvs": PVS_PATH, "storageclasses": CLASSES_PATH}


@dataclass(frozen=True, slots=True)
class PVC:
    namespace: str
    name: str
    uid: str
    volume_name: str
    phase: str
    deleting: bool
    storage_class: str | None
    access_modes: frozenset[str]
    request: int
    volume_mode: str
    selector: Any
    selected_node: str
    bind_completed: bool
    resource_version: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def bound(self) -> bool:
        """kube-scheduler's ``isPVCBound``: the volume named and the binding completed."""
        return bool(self.volume_name) and (self.bind_completed or self.phase == "Bound")


@dataclass(frozen=True, slots=True)
class PV:
    name: str
    claim_ref: tuple[str, str] | None
    claim_uid: str
    phase: str
    deleting: bool
    storage_class: str
    access_modes: frozenset[str]
    capacity: int
    volume_mode: str
    labels: Mapping[str, str]
    terms: tuple[Term, ...] | None
    resource_version: str


@dataclass(frozen=True, slots=True)
class StorageClass:
    name: str
    provisioner: str
    wait_for_consumer: bool
    topology: tuple[Term, ...] | None
    default: bool


def _storage(value: Any) -> int:
    try:
        return parse_quantity(value or "0", "storage")
    except QuantityError:
        return 0


def _node_terms(node_affinity: Any) -> tuple[Term, ...] | None:
    """A PV's ``spec.nodeAffinity.required`` as terms; None: any node. One that cannot be read matches none."""
    required = (node_affinity or {}).get("required") if isinstance(node_affinity, Mapping) else None
    if not required:
        return None
    try:
        parsed = parse_node_affinity({REQUIRED: required})
    except AffinityError:
        return ()
    return parsed.required if parsed is not None else None


def _topology_terms(items: Any) -> tuple[Term, ...] | None:
    """A StorageClass's ``allowedTopologies`` as terms (each label In its values); None: anywhere."""
    if not items:
        return None
    terms = []
    for item in items:
        reqs = tuple(Requirement(e.get("key", ""), "In", tuple(e.get("values") or ()))
                     for e in (item or {}).get("matchLabelExpressions") or ())
        terms.append(Term(reqs))
    return tuple(terms)


def _label_keys(terms: tuple[Term, ...] | None, labels: Mapping[str, str] | None = None) -> frozenset[str]:
    """The node label keys (``NAME_FIELD`` for the node's name) that a PV's node affinity or a class's topology
    reads, and the zone keys when the PV carries a zone label (VolumeZone)."""
    keys: set[str] = set()
    for term in terms or ():
        keys.update(r.key for r in term.expressions)
        if term.fields:
            keys.add(NAME_FIELD)
    if labels and any(key in labels for key in ZONE_KEYS):
        keys.update(ZONE_KEYS)
    return frozenset(keys)


def read_pvc(obj: Mapping[str, Any]) -> PVC:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    annotations = meta.get("annotations") or {}
    requests = ((spec.get("resources") or {}).get("requests") or {})
    return PVC(meta.get("namespace", ""), meta["name"], meta.get("uid", ""), spec.get("volumeName") or "",
               status.get("phase") or "Pending", bool(meta.get("deletionTimestamp")), spec.get("storageClassName"),
               frozenset(spec.get("accessModes") or ()), _storage(requests.get("storage")),
               spec.get("volumeMode") or "Filesystem", spec.get("selector"),
               annotations.get(SELECTED_NODE, ""), annotations.get(BIND_COMPLETED) is not None,
               meta.get("resourceVersion", ""))


def read_pv(obj: Mapping[str, Any]) -> PV:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    ref = spec.get("claimRef")
    return PV(meta["name"], (ref.get("namespace", ""), ref.get("name", "")) if ref else None,
              (ref or {}).get("uid") or "", status.get("phase") or "Pending", bool(meta.get("deletionTimestamp")), spec.get("storageClassName") or "",
              frozenset(spec.get("accessModes") or ()), _storage((spec.get("capacity") or {}).get("storage")),
              spec.get("volumeMode") or "Filesystem", dict(meta.get("labels") or {}),
              _node_terms(spec.get("nodeAffinity")), meta.get("resourceVersion", ""))


def read_class(obj: Mapping[str, Any]) -> StorageClass:
    meta = obj.get("metadata") or {}
    return StorageClass(meta["name"], obj.get("provisioner") or "",
                        obj.get("volumeBindingMode") == "WaitForFirstConsumer",
                        _topology_terms(obj.get("allowedTopologies")),
                        (meta.get("annotations") or {}).get(DEFAULT_CLASS) == "true")


def _selector_matches(selector: Any, labels: Mapping[str, str]) -> bool:
    """A claim's label selector (matchLabels, matchExpressions) against a PV's labels."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or ():
        op, key, values = expr.get("operator"), expr.get("key"), expr.get("values") or ()
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
        if not Requirement(key, op, tuple(values)).matches(labels):
            return False
    return True


def pod_claims(obj: Mapping[str, Any]) -> tuple[str, ...]:
    """The claims a pod object mounts, ``namespace/name``: its persistentVolumeClaim volumes and its generic
    ephemeral volumes (whose claim the ephemeral volume controller names ``<pod>-<volume>``)."""
    spec = obj.get("spec") or {}
    volumes = spec.get("volumes")
    if not volumes:
        return ()
    meta = obj.get("metadata") or {}
    namespace, name = meta.get("namespace", "default"), meta.get("name", "")
    out = []
    for volume in volumes:
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        if claim:
            out.append(f"{namespace}/{claim}")
        elif volume.get("ephemeral") is not None:
            out.append(f"{namespace}/{name}-{volume.get('name', '')}")
    return tuple(dict.fromkeys(out))


def spec_claims(spec: Mapping[str, Any], namespace: str | None) -> tuple[str, ...]:
    """The claims a submitted podSpec names (its persistentVolumeClaim volumes), qualified by the job's namespace
    when it has one (else the cluster's ``namespace`` setting decides, at placement)."""
    out = []
    for volume in spec.get("volumes") or ():
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        if claim:
            out.append(f"{namespace}/{claim}" if namespace else claim)
    return tuple(dict.fromkeys(out))


class KubeVolumes:
    """One cycle's view of the cluster's claims (:class:`flotilla.core.volumes.ClusterVolumes`)."""

    def __init__(self, namespace: str, pvcs: Mapping[tuple[str, str], PVC], pvs: Mapping[str, PV],
                 classes: Mapping[str, StorageClass], rwop_users: Mapping[str, int],
                 assumed_claims: Mapping[str, tuple[str, str]], assumed_pvs: Mapping[str, str], problem: str = "",
                 written: Mapping[str, str] | None = None, label_keys: frozenset[str] | None = None):
        self.namespace = namespace
        #: Why the claims cannot be read at all (an informer not synced): every claim waits with it.
        self.problem = problem
        self.pvcs, self.pvs, self.classes = pvcs, pvs, classes
        self.rwop_users = rwop_users
        self.assumed_claims, self.assumed_pvs = assumed_claims, assumed_pvs
        #: PV -> claim key: claimRefs written that the PV informer has not shown yet (taken, and that claim's)
        self.written = written or {}
        self._cache: dict[tuple[str, ...], tuple[Claim, ...]] = {}
        self._one: dict[str, Claim] = {}
        self._shapes: dict[tuple, Options] = {}
        self._free_by_class: dict[str, list[PV]] | None = None
        self._prebound_by_claim: dict[tuple[str, str], list[PV]] | None = None
        if label_keys is None:   # kept up to date by VolumeState as objects change; else read from all of them
            keys: set[str] = set()
            for pv in pvs.values():
                keys |= _label_keys(pv.terms, pv.labels)
            for sc in classes.values():
                keys |= _label_keys(sc.topology)
            if any(pvc.selected_node and not pvc.bound for pvc in pvcs.values()) or \
                    any(not pv for pv, _ in assumed_claims.values()):
                keys.add(NAME_FIELD)
            label_keys = frozenset(keys)
        self.label_keys = label_keys

    def claims(self, names: tuple[str, ...]) -> tuple[Claim, ...]:
        hit = self._cache.get(names)
        if hit is None:
            hit = self._cache[names] = tuple(self.claim(name) for name in names)
        return hit

    def claim(self, name: str) -> Claim:
        hit = self._one.get(name)
        if hit is None:
            hit = self._one[name] = self._resolve(name)
        return hit

    def _resolve(self, name: str) -> Claim:
        namespace, _, short = name.rpartition("/")
        namespace = namespace or self.namespace
        key = f"{namespace}/{short}"
        if self.problem:
            return Claim(key, refusal=self.problem)
        pvc = self.pvcs.get((namespace, short))
        if pvc is None:
            return Claim(key, refusal=not_found(short))
        if pvc.phase == "Lost":
            return Claim(key, refusal=f'persistentvolumeclaim "{short}" bound to non-existent persistentvolume '
                                      f'"{pvc.volume_name}"')
        if pvc.deleting:
            return Claim(key, refusal=f'persistentvolumeclaim "{short}" is being deleted')
        rwop = RWOP in pvc.access_modes
        if rwop and self.rwop_users.get(key):
            return Claim(key, refusal=RWOP_CONFLICT, rwop=True)
        if pvc.bound:
            pv = self.pvs.get(pvc.volume_name)
            if pv is None:
                return Claim(key, refusal=PV_MISSING, rwop=rwop)
            zones = tuple((label, frozenset(pv.labels[label].split("__"))) for label in ZONE_KEYS if label in pv.labels)
            return Claim(key, terms=pv.terms, zones=zones, rwop=rwop)
        assumed = self.assumed_claims.get(key)
        if assumed is not None:   # chosen by an earlier cycle, being bound
            pv_name, node = assumed
            pv = self.pvs.get(pv_name) if pv_name else None
            option = VolumeOption(pv_name, pv.terms if pv is not None else None, pv.capacity if pv else 0) \
                if pv_name else VolumeOption("", (Term(fields=(Requirement(NAME_FIELD, "In", (node,)),)),))
            return Claim(key, options=(option,), rwop=rwop)
        class_name = pvc.storage_class or ""
        sc = self.classes.get(class_name) if class_name else None
        if class_name and sc is None:
            return Claim(key, refusal=f'storageclass.storage.k8s.io "{class_name}" not found')
        if sc is None or not sc.wait_for_consumer:
            return Claim(key, refusal=UNBOUND_IMMEDIATE, rwop=rwop)
        if pvc.selected_node:   # a provisioner is making its volume on that node
            return Claim(key, options=(VolumeOption("", (Term(fields=(Requirement(NAME_FIELD, "In",
                                                                                   (pvc.selected_node,)),)),)),),
                         rwop=rwop)
        dynamic = sc.provisioner and sc.provisioner != NO_PROVISIONER and not pvc.volume_name
        prebound = [pv for pv in self._prebound().get((pvc.namespace, pvc.name), ())
                    if pv.claim_uid in ("", pvc.uid)]
        if pvc.volume_name or prebound:
            # Its own volumes only (named by the claim, or whose claimRef names it): an options object of its own.
            named = [self.pvs[pvc.volume_name]] if pvc.volume_name in self.pvs else []
            found = [pv for pv in (named or prebound or ()) if self._fits(pvc, pv, class_name)]
            options = [VolumeOption(pv.name, pv.terms, pv.capacity) for pv in found]
            return Claim(key, options=Options(options), rwop=rwop)
        # Claims of one shape have the same free volumes: one options object (and one node index) for all.
        shape = (class_name, pvc.access_modes, pvc.request, pvc.volume_mode,
                 json.dumps(pvc.selector, sort_keys=True) if pvc.selector else "", bool(dynamic))
        options = self._shapes.get(shape)
        if options is None:
            found = [VolumeOption(pv.name, pv.terms, pv.capacity) for pv in self._free().get(class_name, ())
                     if self._fits(pvc, pv, class_name)]
            if dynamic:
                found.append(VolumeOption("", sc.topology))
            options = self._shapes[shape] = Options(found)
        return Claim(key, options=options, rwop=rwop)

    def _free(self) -> dict[str, list[PV]]:
        """The PVs no claim has (no claimRef, none assumed), per storage class."""
        if self._free_by_class is None:
            self._free_by_class = {}
            for pv in self.pvs.values():
                if pv.claim_ref is None and not pv.deleting and pv.phase in ("Available", "Pending") \
                        and pv.name not in self.assumed_pvs and pv.name not in self.written:
                    self._free_by_class.setdefault(pv.storage_class, []).append(pv)
        return self._free_by_class

    def _prebound(self) -> dict[tuple[str, str], list[PV]]:
        """The PVs whose claimRef names a claim (asked only for claims not bound yet), per claim, in any phase
        (kube-scheduler's ``IsVolumeBoundToClaim``: the PV controller may have made the PV ``Bound`` before it
        writes the claim); with the claimRefs written that the informer has not shown yet."""
        if self._prebound_by_claim is None:
            self._prebound_by_claim = {}
            for pv in self.pvs.values():
                if pv.claim_ref is not None and not pv.deleting:
                    self._prebound_by_claim.setdefault(pv.claim_ref, []).append(pv)
            for name, claim_key in self.written.items():
                pv = self.pvs.get(name)
                if pv is not None and pv.claim_ref is None:
                    namespace, _, short = claim_key.partition("/")
                    self._prebound_by_claim.setdefault((namespace, short), []).append(pv)
        return self._prebound_by_claim

    @staticmethod
    def _fits(pvc: PVC, pv: PV, class_name: str) -> bool:
        """pv controller's FindMatchingVolume, for one volume: class, volume mode, capacity, access modes, selector."""
        return (not pv.deleting and pv.storage_class == class_name and pv.volume_mode == pvc.volume_mode
                and pv.capacity >= pvc.request and pvc.access_modes <= pv.access_modes
                and _selector_matches(pvc.selector, pv.labels))


class VolumeState:
    """The informers' copy of claims, volumes and classes, the claims' users, and the binder's assumptions."""

    def __init__(self, namespace: str):
        self.namespace = namespace
        self.pvcs: dict[tuple[str, str], PVC] = {}
        self.pvs: dict[str, PV] = {}
        self.classes: dict[str, StorageClass] = {}
        self.synced = {kind: False for kind in INFORMERS}
        #: pod key -> the ReadWriteOncePod-capable claims it mounts while it is scheduled and not ended
        self._pod_claims: dict[tuple[str, str], tuple[str, ...]] = {}
        self.rwop_users: dict[str, int] = {}
        #: claim key -> (PV or "" to provision, node): chosen by a placement, not yet seen bound
        self.assumed_claims: dict[str, tuple[str, str]] = {}
        #: PV -> claim key, for the static choices among them
        self.assumed_pvs: dict[str, str] = {}
        #: PV -> claim key: the claimRefs written (:meth:`wrote`) that the PV informer has not shown yet. Such a PV
        #: stays taken whatever becomes of the assumption (the claim seen bound first, the start given up): chosen
        #: again meanwhile, its write would carry the informer's old resourceVersion and be refused (409).
        self.written: dict[str, str] = {}
        #: ("pv" or "class", name) -> the label keys it reads (:func:`_label_keys`), and how many read each key:
        #: each view's ``label_keys`` without a pass over every volume.
        self._keys_of: dict[tuple[str, str], frozenset[str]] = {}
        self._key_users: dict[str, int] = {}
        #: claims given a node by ``volume.kubernetes.io/selected-node`` and not bound yet
        self._selecting: set[tuple[str, str]] = set()
        self._view: KubeVolumes | None = None

    @property
    def ready(self) -> bool:
        return all(self.synced.values())

    def changed(self) -> None:
        self._view = None

    def view(self, errors: Mapping[str, str] | None = None) -> KubeVolumes:
        """The cycle's view (made again only after a change); ``errors``: the informers' last errors, by kind."""
        if self._view is None:
            problem = ""
            if not self.ready:
                waiting = [kind for kind, done in self.synced.items() if not done]
                told = "; ".join(f"{kind}: {errors[kind]}" for kind in waiting if errors and kind in errors)
                problem = f"persistent volume claims not readable yet ({told or ', '.join(waiting) + ' not synced'})"
            keys = set(self._key_users)
            if self._selecting or any(not pv for pv, _ in self.assumed_claims.values()):
                keys.add(NAME_FIELD)
            self._view = KubeVolumes(self.namespace, dict(self.pvcs), dict(self.pvs), dict(self.classes),
                                     dict(self.rwop_users), dict(self.assumed_claims), dict(self.assumed_pvs),
                                     problem, dict(self.written), frozenset(keys))
        return self._view

    # -- informer events -----------------------------------------------------------------
    def _set_keys(self, owner: tuple[str, str], keys: frozenset[str]) -> None:
        old = self._keys_of.pop(owner, frozenset())
        if old == keys:
            if keys:
                self._keys_of[owner] = keys
            return
        for key in old:
            left = self._key_users[key] - 1
            if left:
                self._key_users[key] = left
            else:
                del self._key_users[key]
        if keys:
            self._keys_of[owner] = keys
            for key in keys:
                self._key_users[key] = self._key_users.get(key, 0) + 1

    def replace(self, kind: str, items: list[dict]) -> None:
        if kind in ("pvs", "storageclasses"):
            prefix = "pv" if kind == "pvs" else "class"
            for owner in [owner for owner in self._keys_of if owner[0] == prefix]:
                self._set_keys(owner, frozenset())
        if kind == "pvcs":
            self.pvcs = {}
            self._selecting = set()
        elif kind == "pvs":
            self.pvs = {}
            listed = {(obj.get("metadata") or {}).get("name") for obj in items}
            self.written = {pv: claim for pv, claim in self.written.items() if pv in listed}
        else:
            self.classes = {}
        for obj in items:
            self.on_event(kind, "ADDED", obj)
        self.synced[kind] = True
        self.changed()

    def on_event(self, kind: str, event: str, obj: dict) -> None:
        meta = obj.get("metadata") or {}
        try:
            if kind == "pvcs":
                key = (meta.get("namespace", ""), meta["name"])
                if event == "DELETED":
                    self.pvcs.pop(key, None)
                    self._selecting.discard(key)
                else:
                    pvc = self.pvcs[key] = read_pvc(obj)
                    if pvc.bound:
                        self._settled(pvc.key)
                    if pvc.selected_node and not pvc.bound:
                        self._selecting.add(key)
                    else:
                        self._selecting.discard(key)
            elif kind == "pvs":
                if event == "DELETED":
                    self.pvs.pop(meta["name"], None)
                    self.written.pop(meta["name"], None)
                    self._set_keys(("pv", meta["name"]), frozenset())
                else:
                    pv = self.pvs[meta["name"]] = read_pv(obj)
                    if pv.claim_ref is not None:
                        self.written.pop(pv.name, None)
                    self._set_keys(("pv", pv.name), _label_keys(pv.terms, pv.labels))
            elif event == "DELETED":
                self.classes.pop(meta["name"], None)
                self._set_keys(("class", meta["name"]), frozenset())
            else:
                sc = self.classes[meta["name"]] = read_class(obj)
                self._set_keys(("class", sc.name), _label_keys(sc.topology))
        except (KeyError, TypeError, AttributeError, ValueError):
            return
        self.changed()

    def _settled(self, claim_key: str) -> None:
        """A claim is seen bound: its assumption has done its work."""
        assumed = self.assumed_claims.pop(claim_key, None)
        if assumed is not None and assumed[0]:
            self.assumed_pvs.pop(assumed[0], None)

    def on_pod(self, key: tuple[str, str], obj: dict | None, live: bool) -> None:
        """A pod changed (``obj``; None: gone): count its claims' use while it is scheduled and ``live``."""
        had = self._pod_claims.pop(key, ())
        claims = pod_claims(obj) if obj is not None and live and (obj.get("spec") or {}).get("nodeName") else ()
        if had == claims:
            if claims:
                self._pod_claims[key] = claims
            return
        for claim in had:
            left = self.rwop_users.get(claim, 0) - 1
            if left > 0:
                self.rwop_users[claim] = left
            else:
                self.rwop_users.pop(claim, None)
        for claim in claims:
            self.rwop_users[claim] = self.rwop_users.get(claim, 0) + 1
        if claims:
            self._pod_claims[key] = claims
        self.changed()

    # -- binding -------------------------------------------------------------------------
    def assume(self, choices: tuple[tuple[str, str], ...], node: str) -> None:
        for claim_key, pv in choices:
            self.assumed_claims[claim_key] = (pv, node)
            if pv:
                self.assumed_pvs[pv] = claim_key
        self.changed()

    def wrote(self, pv: str, claim_key: str) -> None:
        """The claimRef naming ``claim_key`` is written on ``pv`` (the API accepted it)."""
        if self.pvs.get(pv) is not None and self.pvs[pv].claim_ref is None:
            self.written[pv] = claim_key
            self.changed()

    def forget(self, choices: tuple[tuple[str, str], ...]) -> None:
        for claim_key, pv in choices:
            if self.assumed_claims.get(claim_key, (None,))[0] == pv:
                del self.assumed_claims[claim_key]
            if pv and self.assumed_pvs.get(pv) == claim_key:
                del self.assumed_pvs[pv]
        self.changed()

    def qualified(self, name: str) -> str:
        namespace, _, short = name.rpartition("/")
        return f"{namespace or self.namespace}/{short}"

    def unbound(self, names: tuple[str, ...]) -> list[str]:
        """The claim keys among ``names`` not bound yet (missing ones included)."""
        out = []
        for name in names:
            key = self.qualified(name)
            namespace, _, short = key.partition("/")
            pvc = self.pvcs.get((namespace, short))
            if pvc is None or not pvc.bound:
                out.append(key)
        return out

    @staticmethod
    def still_free(pv: Mapping[str, Any], claim_key: str) -> str | None:
        """A PV read afresh after a write found it changed: its resourceVersion if it may still be bound to
        ``claim_key`` (no claimRef, or one naming that claim), else None."""
        ref = (pv.get("spec") or {}).get("claimRef")
        if ref and f"{ref.get('namespace', '')}/{ref.get('name', '')}" != claim_key:
            return None
        return (pv.get("metadata") or {}).get("resourceVersion")

    def provisioning_failed(self, claim_key: str, node: str) -> bool:
        """kube-scheduler's check: a claim given to provisioning whose selected-node annotation was taken away."""
        namespace, _, short = claim_key.partition("/")
        pvc = self.pvcs.get((namespace, short))
        return pvc is not None and not pvc.bound and pvc.selected_node != node

    def bind_requests(self, choices: tuple[tuple[str, str], ...], node: str) -> list[tuple[str, dict]]:
        """The API writes binding ``choices`` on ``node``: ``(path, merge patch)`` each, as kube-scheduler's binder
        makes them (a static PV's claimRef and bound-by-controller annotation; a claim's selected-node). A write
        already done (the PV's claimRef names the claim, the claim names the node: another pod of the claim chose
        it first) is not made again."""
        out = []
        for claim_key, pv_name in choices:
            namespace, _, short = claim_key.partition("/")
            pvc = self.pvcs.get((namespace, short))
            if pvc is None:
                raise LookupError(f'persistentvolumeclaim "{short}" not found')
            if pv_name:
                pv = self.pvs.get(pv_name)
                if pv is None:
                    raise LookupError(f'persistentvolume "{pv_name}" not found')
                if (pv.claim_ref == (namespace, short) and pv.claim_uid in ("", pvc.uid)) \
                        or self.written.get(pv_name) == claim_key or pvc.volume_name == pv_name:
                    continue
                out.append((f"{PVS_PATH}/{pv_name}", {
                    "metadata": {"annotations": {BOUND_BY_CONTROLLER: "yes"},
                                 "resourceVersion": pv.resource_version},
                    "spec": {"claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                                          "namespace": namespace, "name": short, "uid": pvc.uid,
                                          "resourceVersion": pvc.resource_version}}}))
            elif pvc.selected_node != node and not pvc.bound:
                out.append((f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{short}",
                            {"metadata": {"annotations": {SELECTED_NODE: node}}}))
        return out


__all__ = ["INFORMERS", "KubeVolumes", "SELECTED_NODE", "VolumeState", "pod_claims", "spec_claims"]
