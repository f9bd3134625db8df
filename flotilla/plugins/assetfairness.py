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

from flotilla.plugin import hookimpl, parse_weights, weight_vector

INF = float("inf")


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
