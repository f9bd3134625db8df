"""``assetfairness``: Armada's asset fairness.

A job's cost is the weighted sum of what it requests (``cpu + w_gpu * gpu +
w_memory * memory``, cpu in cores, other resources in their base units); a
queue's cost is the sum over its running jobs; its share is that over the
cost of the whole pool. Allocate serves the queue whose share over its fair
share (weight over the active queues' weights) would be smallest.

Args: ``resourceWeights`` (default ``{cpu: 1, nvidia.com/gpu: 1, memory: 0}``;
resources not listed weigh 0).
"""

from __future__ import annotations

from typing import Mapping

from flotilla.core.hookspecs import hookimpl
from flotilla.core.quantities import MILLI_RESOURCES
from flotilla.plugins.arguments import take_args

DEFAULT_WEIGHTS = {"cpu": 1.0, "nvidia.com/gpu": 1.0, "memory": 0.0}


def parse_weights(args: Mapping, key: str = "resourceWeights") -> dict[str, float]:
    weights = take_args(args, **{key: DEFAULT_WEIGHTS})[key]
    if not isinstance(weights, Mapping):
        raise ValueError(f"{key} must map resource names to numbers")
    out = {}
    for name, weight in weights.items():
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight < 0:
            raise ValueError(f"{key}.{name} must be a non-negative number, got {weight!r}")
        out[str(name)] = float(weight)
    return out


def weight_vector(session, weights: Mapping[str, float]) -> tuple[float, ...]:
    """Per-unit weights aligned with the session's resource order (cpu per millicore)."""
    return tuple(weights.get(name, 0.0) / (1000 if name in MILLI_RESOURCES else 1) for name in session.space.names)


def asset_share(session, weights: Mapping[str, float]):
    """``share(queue, extra)``: the queue's weighted cost (plus ``extra``'s) over the pool's.

    Shared by every policy that measures usage as asset cost (decayedusage too).
    """
    w = weight_vector(session, weights)
    pool_cost = sum(a * b for a, b in zip(w, session.pool)) or 1.0

    def share(queue, extra):
        cost = 0.0
        if extra is None:
            for a, b in zip(w, queue.allocated):
                cost += a * b
        else:
            for a, b, c in zip(w, queue.allocated, extra):
                cost += a * (b + c)
        return cost / pool_cost

    return share


class AssetFairness:
    def __init__(self, args: Mapping | None = None):
        self.weights = parse_weights(args or {})

    @hookimpl
    def flotilla_session_open(self, session):
        share = asset_share(session, self.weights)
        # A queue's share moves with its own allocation only: allocate need not recompute a waiting offer's.
        share.own_usage_only = True
        session.add_queue_cost(share)
