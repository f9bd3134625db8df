"""``drf``: dominant resource fairness (Volcano's drf, current Armada).

A queue's share is its largest share of any one resource of the pool: a
queue holding 10% of the cpu and 40% of the gpus has a share of 0.4.
Allocate serves the queue whose share over its fair share (its weight over
the active queues' weights) would be smallest, so a gpu-heavy queue and a
cpu-heavy queue can both get what they need without either counting double.

Swap it in with one line of config: ``- name: drf`` instead of
``- name: assetfairness``. Args: ``resources`` (default: every resource the
pool has) limits which resources count.
"""

from __future__ import annotations

from typing import Mapping

from flotilla.plugin import hookimpl, take_args


class DominantResourceFairness:
    def __init__(self, args: Mapping | None = None):
        self.resources = take_args(args, resources=None)["resources"]
        if self.resources is not None and not all(isinstance(r, str) for r in self.resources):
            raise ValueError("resources must be a list of resource names")

    @hookimpl
    def flotilla_session_open(self, session):
        counted = [
            (r, total) for r, (name, total) in enumerate(zip(session.space.names, session.pool))
            if total > 0 and (self.resources is None or name in self.resources)
        ]

        def share(queue, extra):
            allocated = queue.allocated
            if extra is None:
                return max((allocated[r] / total for r, total in counted), default=0.0)
            return max(((allocated[r] + extra[r]) / total for r, total in counted), default=0.0)

        session.add_queue_cost(share)
