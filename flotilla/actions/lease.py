"""``lease``: hand the cycle's decisions to the cluster backends.

Against simulated clusters this starts and stops jobs; against Kubernetes it
creates and deletes pods; in the service it also records leases. The session
carries the backends (``session.backends``, by cluster name); with none (as
in ``schedule-once``) there is nothing to hand over and the action is a no-op.
The decisions are the session's so far: lease runs last.
"""

from __future__ import annotations

import time

import structlog

from flotilla.core.backend import ClusterDecisions

log = structlog.get_logger("flotilla.actions.lease")


class Lease:
    name = "lease"

    def execute(self, session) -> None:
        started = time.perf_counter()
        backends = getattr(session, "backends", None) or {}
        if backends:
            session.preempt_evicted()
            starts: dict[str, list] = {}
            for placement in session.scheduled:
                starts.setdefault(placement.cluster, []).append(placement)
            stops: dict[str, list] = {}
            for job in session.preempted.values():
                stops.setdefault(job.cluster, []).append(job)
            for name in sorted(set(starts) | set(stops)):
                backend = backends.get(name)
                if backend is None:
                    log.warning("lease.no_backend", cluster=name)
                    continue
                backend.apply(ClusterDecisions(start=starts.get(name, []), preempt=stops.get(name, [])))
        session.timings[self.name] = time.perf_counter() - started
