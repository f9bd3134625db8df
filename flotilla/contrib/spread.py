"""``spread``: an example node-score plugin (the opposite of best fit).

Scores each fitting node by the fraction of its cpu that would still be free,
so jobs spread over the emptiest nodes instead of packing. It shows the
``node_score`` extension point: when any plugin registers a score, allocate
weighs every fitting node in the first tier that has any (or kube-scheduler's
sample of them, ``allocate.percentageOfNodesToScore``), each plugin's scores
normalised to 0..100, and takes the highest total.

Use it with ``bestfit`` removed (or keep bestfit for its tiers: scores then
order nodes within the first of the queue's own / unused / used sets that
has a fitting node; a score registered with ``across_tiers=True`` would
weigh the sets' nodes against each other instead). No args: to weigh it
against other scorers, give its config entry a ``weight:`` (default 1),
which multiplies its normalised score as kube-scheduler's plugin weights do.
It registers its score at every session open (0 everywhere when nodes have
no cpu), so that a ``weight:`` always has a score to multiply.
"""

from __future__ import annotations

from typing import Mapping

from flotilla.core.nodeindex import EVICTED
from flotilla.plugin import hookimpl, take_args


class Spread:
    def __init__(self, args: Mapping | None = None):
        take_args(args)

    @hookimpl
    def flotilla_session_open(self, session):
        index = session.index
        cpu = session.space.position.get("cpu")
        actual = index.level_of[EVICTED]

        def emptiest(job, node):
            if cpu is None:
                return 0.0
            capacity = index.allocatable[node][cpu] or 1
            return index.free[node][actual][cpu] / capacity

        session.add_node_score(emptiest)
