"""Where the ``lease`` action hands a cycle's decisions: a :class:`LeaseSink`.

Every entry point runs the same actions, ``lease`` last; what differs is the
sink the session carries (``session.lease_sink``):

* ``simulate`` and the in-memory runner (:mod:`flotilla.kubernetes.runner`):
  :class:`BackendSink`, which records nothing and applies every decision to
  the cluster backends;
* ``serve``: the service's sink (:mod:`flotilla.service.handover`), which
  records the leases in the store, then applies what it recorded;
* ``schedule-once`` and ``wishlist``: none; the decisions are printed and the
  action does nothing.

The contract of a sink, in two calls made in this order:

1. :meth:`LeaseSink.record` keeps the decisions where they outlive the
   process (one transaction in the service) and returns what it accepted:
   a job it refuses (cancelled while the cycle ran, say) is not handed over.
2. :meth:`LeaseSink.hand_over` applies the accepted decisions to the
   clusters. A cluster that cannot take them keeps its recorded leases
   until they expire.

Recording before applying means a crash between the two leaves recorded
leases that no cluster runs: they expire (``lease.timeout``) and their jobs
are queued again, so no job is lost or run twice by the hand-over itself.
A sink that recorded nothing has nothing to expire.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Protocol

import structlog

from flotilla.core.backend import ClusterDecisions
from flotilla.core.decisions import Placement
from flotilla.core.model import Job

log = structlog.get_logger("flotilla.lease")


@dataclass(slots=True)
class Handover:
    """What a cycle hands to the clusters: placements to start, running pods to stop (preempted)."""

    start: list[Placement] = field(default_factory=list)
    stop: list[Job] = field(default_factory=list)

    def by_cluster(self) -> dict[str, ClusterDecisions]:
        """The decisions per cluster, in cluster-name order."""
        starts: dict[str, list[Placement]] = {}
        for placement in self.start:
            starts.setdefault(placement.cluster, []).append(placement)
        stops: dict[str, list[Job]] = {}
        for job in self.stop:
            stops.setdefault(job.cluster, []).append(job)
        return {name: ClusterDecisions(start=starts.get(name, []), preempt=stops.get(name, []))
                for name in sorted(set(starts) | set(stops))}


class LeaseSink(Protocol):
    """Takes a cycle's decisions from the ``lease`` action: :meth:`record`, then :meth:`hand_over`."""

    def record(self, handover: Handover) -> Handover:
        """Keep ``handover`` and return what was accepted (a part of it, in its order)."""
        ...

    def hand_over(self, accepted: Handover) -> None:
        """Apply what :meth:`record` accepted to the clusters."""
        ...


class BackendSink:
    """A sink with nothing to record: every decision goes to the backend of its cluster (by name)."""

    def __init__(self, backends: Mapping[str, object]):
        self.backends = backends

    def record(self, handover: Handover) -> Handover:
        return handover

    def hand_over(self, accepted: Handover) -> None:
        for name, decisions in accepted.by_cluster().items():
            backend = self.backends.get(name)
            if backend is None:
                log.warning("lease.no_backend", cluster=name)
                continue
            backend.apply(decisions)


__all__ = ["BackendSink", "Handover", "LeaseSink"]
