"""``lease``: hand the cycle's decisions to the session's lease sink.

The sink (``session.lease_sink``, :mod:`flotilla.core.handover`) first records
the decisions and says which it accepted, then applies those to the clusters:
simulated clusters start and stop jobs, Kubernetes clusters get pods created
and deleted, and in the service the leases are recorded in the store before
any cluster sees them. With no sink (``schedule-once``) there is nothing to
hand over and the action is a no-op. The decisions are the session's so far:
lease runs last (flotilla.config.actionorder).
"""

from __future__ import annotations

import time

from flotilla.core.handover import Handover


class Lease:
    name = "lease"

    def execute(self, session) -> None:
        started = time.perf_counter()
        sink = getattr(session, "lease_sink", None)
        if sink is not None:
            session.preempt_evicted()
            handover = Handover(list(session.scheduled), list(session.preempted.values()))
            accepted = sink.record(handover)
            sink.hand_over(accepted)
        session.timings[self.name] = time.perf_counter() - started
