"""``assetfairness``: Armada's asset fairness.

A job's cost is the weighted sum of what it requests (``cpu + w_gpu * gpu +
w_memory * memory``, cpu in cores, other resources in their base units); a
queue's cost is the sum over its running jobs; its share is that over the
cost of the whole pool. Its ``queue_order`` key is that share over the
queue's fair share (weight over the active queues' weights), so allocate
serves the queue furthest below its fair share.

Args: ``resourceWeights`` (default ``{cpu: 1, nvidia.com/gpu: 1, memory: 0}``;
resources not listed weigh 0).
"""

from __future__ import annotations

from typing import Mapping

from flotilla.core.hookspecs import hookimpl
from flotilla.core.shares import DEFAULT_SHARE_WEIGHTS, cost_share, weight_vector as unit_weights
from flotilla.plugins.arguments import take_args

INF = float("inf")
DEFAULT_WEIGHTS = dict(DEFAULT_SHARE_WEIGHTS)


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
    return unit_weights(session.space.names, weights)


def asset_share(session, weights: Mapping[str, float]):
    """``share(queue, extra)``: the queue's weighted cost (plus ``extra``'s) over the pool's.

    Shared by every policy that measures usage as asset cost (decayedusage too);
    the core measures reported shares the same way (:mod:`flotilla.core.shares`).
    """
    return cost_share(session.space.names, session.pool, weights)


class AssetFairness:
    def __init__(self, args: Mapping | None = None):
        self.weights = parse_weights(args or {})

    @hookimpl
    def flotilla_session_open(self, session):
        w = weight_vector(session, self.weights)
        pool_cost = sum(a * b for a, b in zip(w, session.pool)) or 1.0

        def over_fair_share(queue, extra):
            # The asset share (asset_share), computed inline: allocate asks this once per offer.
            fair = queue.fair_share
            if fair <= 0:
                return INF
            cost = 0.0
            if extra is None:
                for a, b in zip(w, queue.allocated):
                    cost += a * b
            else:
                for a, b, c in zip(w, queue.allocated, extra):
                    cost += a * (b + c)
            return cost / pool_cost / fair

        # A queue's key moves with its own allocation only: allocate need not recompute a waiting offer's.
        over_fair_share.own_usage_only = True
        session.add_queue_order(over_fair_share)
