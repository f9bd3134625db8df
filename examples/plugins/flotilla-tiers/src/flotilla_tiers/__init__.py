"""``tiers``: strict priority between tiers of queues, asset fairness inside a tier.

A fairness policy: it registers ``queue_order``, the key allocate serves
queues by (the smallest first). The key is ``(tier, share / fair_share)``:
every queue of tier 0 is served before any queue of tier 1 gets a job,
and inside a tier the queue furthest below its fair share goes next, by
asset cost (``cpu + gpu``, memory free: the measure the core reports
shares by). A lower tier takes only what the tiers above it leave (or
could not use).

It says nothing about queue limits, node selectors, taints or resources:
the core enforces those whatever the fairness policy.

    plugins:
      - name: tiers
        args:
          tiers: {prod: 0, batch: 1}    # queue name (or a parent queue's name) -> tier, 0 first
          default: 1                    # queues not listed; default: after every listed tier

A queue's tier is that of its own name if listed, else of its nearest
listed parent queue, so a whole branch of a queue tree takes one line.
"""

from __future__ import annotations

from typing import Any, Mapping

from flotilla.plugin import DEFAULT_WEIGHTS, PluginSession, Queue, Vector, asset_share, hookimpl, take_args

INF = float("inf")


class StrictTiers:
    def __init__(self, args: Mapping[str, Any] | None = None):
        args = take_args(args, tiers={}, default=None)
        tiers = args["tiers"]
        if not isinstance(tiers, Mapping) or not tiers:
            raise ValueError("tiers must map queue names to tiers (whole numbers, 0 first), e.g. {prod: 0, batch: 1}")
        for name, tier in [*((f"tiers.{q}", t) for q, t in tiers.items()), ("default", args["default"])]:
            if tier is not None and (isinstance(tier, bool) or not isinstance(tier, int) or tier < 0):
                raise ValueError(f"{name} must be a whole number from 0, got {tier!r}")
        self.tiers: dict[str, int] = {str(queue): tier for queue, tier in tiers.items()}
        self.default: int = args["default"] if args["default"] is not None else max(self.tiers.values()) + 1

    def tier_of(self, queue: Queue) -> int:
        """The tier of the queue's own name, else of its nearest listed parent, else the default."""
        for level in queue.chain or (queue,):
            tier = self.tiers.get(level.name)
            if tier is not None:
                return tier
        return self.default

    @hookimpl
    def flotilla_session_open(self, session: PluginSession):
        share = asset_share(session, DEFAULT_WEIGHTS)
        tier = {name: self.tier_of(queue) for name, queue in session.queues.items()}

        def tier_then_share(queue: Queue, extra: Vector | None) -> tuple[float, float]:
            if queue.fair_share <= 0:
                return (tier[queue.name], INF)
            return (tier[queue.name], share(queue, extra) / queue.fair_share)

        # The key moves with the queue's own allocation only: allocate may keep a waiting queue's key.
        tier_then_share.own_usage_only = True
        session.add_queue_order(tier_then_share)
