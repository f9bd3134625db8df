"""``decayedusage``: fairness over time (Armada's queue priority with a half-life, HTCondor style).

Each queue has a *priority* that follows its usage with a half-life
(``armada-design.txt``): if the priority is ``P`` and the queue has been
using ``U`` since the last update, ``dt`` seconds ago, then

    P' = U + (P - U) * 0.5 ** (dt / priorityHalftime)

so after one half-time the priority has moved half-way from ``P`` to ``U``.
Usage is the queue's asset cost over the pool's (``resourceWeights``, as in
``assetfairness``: cpu and gpu count, memory does not), so priorities are
shares of the pool. The effective priority is the priority times the
queue's priority factor, the inverse of its weight: the ``queue_order`` key
is the queue's cost over its fair share (weight over active weights), which
orders queues exactly as ``P / weight`` would.

The cost, for a queue holding ``A`` now and asking for ``extra``, is

    cost = P(now) + share(A + extra)

the priority decayed up to this cycle's time plus what the queue would hold.
The second term makes progressive filling work inside one cycle (each job a
queue gets raises its cost); the first holds back a queue that used the pool
recently, by exactly its decayed usage: on an idle 64-core pool, a queue
that ran all 64 cores for one half-time (``P = 0.5``) and one with no
history, both backlogged, get 16 and 48 cores (``0.5 + 16/64 = 48/64``).
When usage is steady, ``P`` converges to the share and the cost to twice
the share, so the long-run split is the same as ``assetfairness``.

State: the priorities live on the plugin instance, which the scheduler keeps
for the whole run, and are updated in ``flotilla_session_close`` at
``session.now`` (the snapshot's time: simulated time in ``simulate``, the
wall clock in ``serve``). The usage a queue held between two cycles is taken
to be its allocation after the earlier one. Queues start with no history
(priority 0), so the first cycle behaves like ``assetfairness``.

Args: ``priorityHalftime`` (duration, default ``1h``), ``resourceWeights``
(default ``{cpu: 1, nvidia.com/gpu: 1, memory: 0}``).
"""

from __future__ import annotations

from typing import Mapping

from flotilla.core.quantities import QuantityError, parse_duration
from flotilla.plugin import asset_share, hookimpl, parse_weights, weight_vector

DEFAULT_HALFTIME = 3600.0


class DecayedUsage:
    def __init__(self, args: Mapping | None = None):
        args = dict(args or {})
        halftime = args.pop("priorityHalftime", DEFAULT_HALFTIME)
        try:
            self.halftime = parse_duration(halftime)
        except QuantityError as exc:
            raise ValueError(f"priorityHalftime: {exc}") from None
        if self.halftime <= 0:
            raise ValueError(f"priorityHalftime must be a positive duration, got {halftime!r}")
        weight_args = {"resourceWeights": args.pop("resourceWeights")} if "resourceWeights" in args else {}
        if args:
            raise ValueError(f"unknown argument(s) {', '.join(sorted(args))}; expected priorityHalftime, "
                             f"resourceWeights")
        self.weights = parse_weights(weight_args)
        #: Queue priority (decayed usage, a share of the pool) as of ``updated``.
        self.priority: dict[str, float] = {}
        #: Share of the pool each queue has held since ``updated``.
        self.usage: dict[str, float] = {}
        self.updated: float | None = None
        self._open: tuple | None = None

    def priorities_at(self, now: float) -> dict[str, float]:
        """Every queue's priority at ``now``: the last one decayed towards the usage held since."""
        if self.updated is None:
            return dict(self.priority)
        beta = 0.5 ** (max(0.0, now - self.updated) / self.halftime)
        out = {}
        for name in self.priority.keys() | self.usage.keys():
            usage = self.usage.get(name, 0.0)
            out[name] = usage + (self.priority.get(name, 0.0) - usage) * beta
        return out

    @hookimpl
    def flotilla_session_open(self, session):
        w = weight_vector(session, self.weights)
        pool_cost = sum(a * b for a, b in zip(w, session.pool)) or 1.0
        priority = self.priorities_at(session.now)

        share = asset_share(session, self.weights)

        def cost_over_fair_share(queue, extra):
            fair = queue.fair_share
            if fair <= 0:
                return float("inf")
            return (priority.get(queue.name, 0.0) + share(queue, extra)) / fair

        self._open = (session, priority, w, pool_cost)
        session.add_queue_order(cost_over_fair_share)

    @hookimpl
    def flotilla_session_close(self, session, decisions):
        if self._open is None or self._open[0] is not session:
            return
        _, priority, w, pool_cost = self._open
        self._open = None
        usage = {}
        for queue in session.queues.values():
            held = sum(a * b for a, b in zip(w, queue.allocated))
            if held:
                usage[queue.name] = held / pool_cost
        # Forget queues whose priority has decayed to nothing and that hold nothing.
        self.priority = {name: p for name, p in priority.items() if p > 1e-12 or name in usage}
        self.usage = usage
        self.updated = session.now
