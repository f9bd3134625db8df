"""``drf``: dominant resource fairness (Volcano's drf, current Armada).

A queue's share is its largest share of any one resource of the pool: a
queue holding 10% of the cpu and 40% of the gpus has a share of 0.4.
Its ``queue_order`` key is that share over the queue's fair share (its
weight over the active queues' weights), so allocate serves the queue
furthest below its fair share, so a gpu-heavy queue and a
cpu-heavy queue can both get what they need without either counting double.

Swap it in with one line of config: ``- name: drf`` instead of
``- name: assetfairness``. Args: ``resources`` (default: every resource the
pool has) limits which resources count; pod slots (``pods``) never do.
"""

from __future__ import annotations

from typing import Mapping

from flotilla.plugin import hookimpl, take_args


class DominantResourceFairness:
    def __init__(self, args: Mapping | None = None):
        self.resources = take_args(args, resources=None)["resources"]
        if self.resources is not None and (not isinstance(self.resources, list)
                                           or not all(isinstance(r, str) for r in self.resources)):
            raise ValueError("resources must be a list of resource names")

    @hookimpl
    def flotilla_session_open(self, session):
        counted = [
            (r, total) for r, (name, total) in enumerate(zip(session.space.names, session.pool))
            if total > 0 and r != session.space.slot and (self.resources is None or name in self.resources)
        ]

        def dominant_over_fair_share(queue, extra):
            fair = queue.fair_share
            if fair <= 0:
                return float("inf")
            allocated = queue.allocated
            if extra is None:
                return max((allocated[r] / total for r, total in counted), default=0.0) / fair
            return max(((allocated[r] + extra[r]) / total for r, total in counted), default=0.0) / fair

        session.add_queue_order(dominant_over_fair_share)
