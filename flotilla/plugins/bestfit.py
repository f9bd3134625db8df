"""``bestfit``: per-queue best fit (Armada's node ordering).

A job goes first to the nodes only its queue uses, then to unused nodes, and
only then to nodes in use by others; within each set, to the node with the
least free space on which it fits. Jobs of one queue pack together, which
keeps queues from interfering and keeps preemption to fair share small.
"""

from __future__ import annotations

from typing import Mapping

from flotilla.plugin import hookimpl, take_args

TIERS = ("own", "unused", "used")


class BestFit:
    def __init__(self, args: Mapping | None = None):
        take_args(args)

    @hookimpl
    def flotilla_session_open(self, session):
        session.set_node_tiers(lambda queue: TIERS)
