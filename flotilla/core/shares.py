"""The share of the pool a queue holds, as the core measures it whatever policy orders the queues.

A queue's share is its allocation's asset cost over the pool's: the
weighted sum of what it holds (``cpu + w_gpu * gpu + w_memory * memory``,
cpu in cores, other resources in their base units). The weights are the
``resourceWeights`` of the config's ``assetfairness`` or ``decayedusage``
plugin when it sets them, else Armada's defaults (cpu and gpu count,
memory does not). Pod slots (:mod:`flotilla.core.resources`) never
count. ``schedule-once``'s ``share``, the service's queue share,
its metrics and dashboard, and ``simulate``'s report all read this one
measure, so a comparison of policies compares policies, not yardsticks.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

from flotilla.core.quantities import MILLI_RESOURCES
from flotilla.core.resources import PODS

#: Armada's asset-cost weights: a core and a gpu cost one each, memory is free.
DEFAULT_SHARE_WEIGHTS: Mapping[str, float] = {"cpu": 1.0, "nvidia.com/gpu": 1.0, "memory": 0.0}
#: The plugins whose ``resourceWeights`` argument sets the measure.
SHARE_PLUGINS = ("assetfairness", "decayedusage")


def share_weights(plugins: Iterable[Any]) -> dict[str, float]:
    """The measure's weights for a config's plugin list (entries with ``name`` and ``args``; see the module docstring)."""
    for plugin in plugins:
        weights = (plugin.args or {}).get("resourceWeights")
        if plugin.name in SHARE_PLUGINS and isinstance(weights, Mapping):
            return {str(k): float(v) for k, v in weights.items()}
    return dict(DEFAULT_SHARE_WEIGHTS)


def unit_weight(weights: Mapping[str, float], name: str) -> float:
    """The weight of one base unit of resource ``name`` (cpu is counted in millicores; pod slots weigh nothing)."""
    if name == PODS:
        return 0.0
    return weights.get(name, 0.0) / (1000 if name in MILLI_RESOURCES else 1)


def weight_vector(names: Sequence[str], weights: Mapping[str, float]) -> tuple[float, ...]:
    """Per-unit weights aligned with resource vectors whose order is ``names``."""
    return tuple(unit_weight(weights, name) for name in names)


def cost_share(names: Sequence[str], pool: Sequence[int],
               weights: Mapping[str, float]) -> Callable[[Any, Sequence[int] | None], float]:
    """``share(queue, extra)``: the queue's weighted cost (plus ``extra``'s, a vector or None) over the pool's.

    ``names`` orders the vectors, ``pool`` is the pool's vector.
    """
    w = weight_vector(names, weights)
    pool_cost = sum(a * b for a, b in zip(w, pool)) or 1.0

    def share(queue, extra) -> float:
        cost = 0.0
        if extra is None:
            for a, b in zip(w, queue.allocated):
                cost += a * b
        else:
            for a, b, c in zip(w, queue.allocated, extra):
                cost += a * (b + c)
        return cost / pool_cost

    return share
