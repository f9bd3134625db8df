"""A fixed order of resource names per session, so requests are tuples of ints.

Every fit check on the hot path compares two short integer tuples; the
mapping form (``{"cpu": 1000}``) is only used at the edges.

Pod slots. kube-scheduler's NodeResourcesFit counts a node's allocatable
``pods`` against every non-terminal pod bound to it, whoever placed it, and
refuses a pod with ``Too many pods`` when none is left
(:func:`flotilla.core.feasibility.insufficient`). Here that count is
one more dimension of the space, named ``pods`` and always the last one,
present only when some node declares ``pods`` (every Kubernetes node does;
a simulated node may): a job's vector (:meth:`ResourceSpace.vector`) holds
``1`` there, so the node index's fit checks, buckets and best-fit search
count slots as they count cores, and one slot per job costs one integer of
its vector, no lookup. A node that does not declare ``pods`` has
:data:`UNLIMITED_PODS` (:meth:`ResourceSpace.allocatable`); foreign usage
names its pods' count as ``pods`` (:meth:`ResourceSpace.usage`).

Last in the order, it never decides "smallest" before a real resource.
It is a count, not something queues are weighed by: it has no share weight
(:func:`flotilla.core.shares.unit_weight`), the ``allocated`` reports leave
it out (:meth:`ResourceSpace.formatted`, :meth:`ResourceSpace.mapping`), and
the config refuses it in weights, limits and indexed resources, so fair
shares and every report read exactly as on a space without it.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from flotilla.core.quantities import format_quantity

Vector = tuple[int, ...]

#: The resource name of a node's pod slots (Kubernetes' allocatable ``pods``).
PODS = "pods"
#: The pod slots of a node that does not declare ``pods``: more than any node could ever hold.
UNLIMITED_PODS = 1 << 40


class ResourceSpace:
    """The resource names of one session, in index order.

    ``indexed`` names come first in the given order (the node index sorts
    nodes by free space in this order, so the first one decides "smallest");
    any other resource seen follows in alphabetical order, and ``pods`` last
    (the module docstring). ``slot`` is the position of ``pods``, -1 when no
    node declares it.
    """

    __slots__ = ("names", "position", "zero", "slot", "_cache")

    def __init__(self, seen: Iterable[str], indexed: Sequence[str] = ("nvidia.com/gpu", "cpu", "memory")):
        seen = set(seen)
        slots = PODS in seen
        seen.discard(PODS)
        first = [name for name in indexed if name in seen]
        rest = sorted(seen.difference(first))
        self.names: tuple[str, ...] = tuple(first + rest + ([PODS] if slots else []))
        self.position = {name: i for i, name in enumerate(self.names)}
        self.slot: int = len(self.names) - 1 if slots else -1
        self.zero: Vector = (0,) * len(self.names)
        self._cache: dict[int, tuple[Mapping[str, int], Vector]] = {}

    def __len__(self) -> int:
        return len(self.names)

    def vector(self, mapping: Mapping[str, int]) -> Vector:
        """A job's vector from its requests: the requests, and its one pod slot when the space counts slots.

        Identical mapping objects are converted once.
        """
        key = id(mapping)
        hit = self._cache.get(key)
        if hit is not None and hit[0] is mapping:
            return hit[1]
        values = [0] * len(self.names)
        position = self.position
        for name, amount in mapping.items():
            values[position[name]] = amount
        if self.slot >= 0:
            values[self.slot] = 1
        vec = tuple(values)
        self._cache[key] = (mapping, vec)
        return vec

    def usage(self, mapping: Mapping[str, int]) -> Vector:
        """What a mapping holds as it says (foreign usage: ``pods`` is its pods' count), not cached.

        A name the space lacks is left out: no node offers it and no job asks
        for it (a pod still holding an extended resource its node no longer
        declares), so it constrains no placement. ``pods`` is left out so when
        no node counts slots.
        """
        values = [0] * len(self.names)
        position = self.position
        for name, amount in mapping.items():
            at = position.get(name)
            if at is not None:
                values[at] = amount
        return tuple(values)

    def allocatable(self, resources: Mapping[str, int]) -> Vector:
        """A node's allocatable as a vector (not cached): :data:`UNLIMITED_PODS` slots when it declares none."""
        values = [0] * len(self.names)
        position = self.position
        for name, amount in resources.items():
            values[position[name]] = amount
        if self.slot >= 0 and PODS not in resources:
            values[self.slot] = UNLIMITED_PODS
        return tuple(values)

    def mapping(self, vec: Sequence[int]) -> dict[str, int]:
        """Non-zero entries by name, pod slots left out."""
        slot = self.slot
        return {name: amount for r, (name, amount) in enumerate(zip(self.names, vec)) if amount and r != slot}

    def formatted(self, vec: Sequence[int]) -> dict[str, str]:
        """Non-zero entries in Kubernetes notation, for reports (pod slots left out)."""
        slot = self.slot
        return {name: format_quantity(amount, name) for r, (name, amount) in enumerate(zip(self.names, vec))
                if amount and r != slot}


def add(a: Sequence[int], b: Sequence[int]) -> Vector:
    return tuple(x + y for x, y in zip(a, b))


def sub(a: Sequence[int], b: Sequence[int]) -> Vector:
    return tuple(x - y for x, y in zip(a, b))


def fits(request: Sequence[int], free: Sequence[int]) -> bool:
    """True when every component of ``request`` is at most that of ``free``."""
    for r, f in zip(request, free):
        if r > f:
            return False
    return True
