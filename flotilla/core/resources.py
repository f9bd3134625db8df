"""A fixed order of resource names per session, so requests are tuples of ints.

Every fit check on the hot path compares two short integer tuples; the
mapping form (``{"cpu": 1000}``) is only used at the edges.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from flotilla.core.quantities import format_quantity

Vector = tuple[int, ...]


class ResourceSpace:
    """The resource names of one session, in index order.

    ``indexed`` names come first in the given order (the node index sorts
    nodes by free space in this order, so the first one decides "smallest");
    any other resource seen follows in alphabetical order.
    """

    __slots__ = ("names", "position", "zero", "_cache")

    def __init__(self, seen: Iterable[str], indexed: Sequence[str] = ("nvidia.com/gpu", "cpu", "memory")):
        seen = set(seen)
        first = [name for name in indexed if name in seen]
        rest = sorted(seen.difference(first))
        self.names: tuple[str, ...] = tuple(first + rest)
        self.position = {name: i for i, name in enumerate(self.names)}
        self.zero: Vector = (0,) * len(self.names)
        self._cache: dict[int, tuple[Mapping[str, int], Vector]] = {}

    def __len__(self) -> int:
        return len(self.names)

    def vector(self, mapping: Mapping[str, int]) -> Vector:
        """Turn a request mapping into a vector; identical mapping objects are converted once."""
        key = id(mapping)
        hit = self._cache.get(key)
        if hit is not None and hit[0] is mapping:
            return hit[1]
        values = [0] * len(self.names)
        for name, amount in mapping.items():
            values[self.position[name]] = amount
        vec = tuple(values)
        self._cache[key] = (mapping, vec)
        return vec

    def mapping(self, vec: Sequence[int]) -> dict[str, int]:
        return {name: amount for name, amount in zip(self.names, vec) if amount}

    def formatted(self, vec: Sequence[int]) -> dict[str, str]:
        """Non-zero entries in Kubernetes notation, for reports."""
        return {name: format_quantity(amount, name) for name, amount in zip(self.names, vec) if amount}


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
