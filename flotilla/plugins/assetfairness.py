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

from flotilla.plugin import asset_share, hookimpl, parse_weights


class AssetFairness:
    def __init__(self, args: Mapping | None = None):
        self.weights = parse_weights(args or {})

    @hookimpl
    def flotilla_session_open(self, session):
        share = asset_share(session, self.weights)
        # A queue's share moves with its own allocation only: allocate need not recompute a waiting offer's.
        share.own_usage_only = True
        session.add_queue_cost(share)
