"""``spread``: an example node-score plugin (the opposite of best fit).

Scores each fitting node by the fraction of its cpu that would still be free,
so jobs spread over the emptiest nodes instead of packing. It shows the
``node_score`` extension point: when any plugin registers a score, allocate
looks at up to ``allocate.nodeCandidates`` fitting nodes in the first tier
that has any and takes the highest total score.

Use it with ``bestfit`` removed (or keep bestfit for its tiers: scores then
order nodes within the first of the queue's own / unused / used sets that
has a fitting node; a score registered with ``across_tiers=True`` would
weigh the sets' nodes against each other instead). Args: ``weight``
(default 1.0) multiplies the score, for combining with other scorers.
"""

from __future__ import annotations

from typing import Mapping

from flotilla.core.nodeindex import EVICTED
from flotilla.plugin import hookimpl, take_args


class Spread:
    def __init__(self, args: Mapping | None = None):
        self.weight = float(take_args(args, weight=1.0)["weight"])

    @hookimpl
    def flotilla_session_open(self, session):
        index = session.index
        cpu = session.space.position.get("cpu")
        actual = index.level_of[EVICTED]
        if cpu is None:
            return

        def emptiest(job, node):
            capacity = index.allocatable[node][cpu] or 1
            return self.weight * index.free[node][actual][cpu] / capacity

        session.add_node_score(emptiest)
