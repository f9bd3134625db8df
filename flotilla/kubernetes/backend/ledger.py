"""The cluster's bookkeeping of its jobs and their pods, and the job events it has to say (called under the cluster's
lock).

Every part that changes what a job or a pod of ours is (a start, a stop, a
pod event, a pod given up) writes here, and reads what the others wrote: it
is the one record of each job's starts and attempts, of the pods being
stopped, of what was last said about each pod. Written rules:

* what was said about a pod (``reported``) is said once: a pod whose story
  has ended (:data:`~flotilla.kubernetes.backend.podcache.FINAL`) says
  nothing more;
* a job's start count (``starts``) tells a stale word from news: an event
  about an earlier run of a job started again since (a delete that
  finished late) is dropped when the events are taken (:meth:`take_events`),
  as the service would take it for news about the new run.
"""

from __future__ import annotations

from collections import deque
from typing import Callable

from flotilla.core.backend import JobEvent
from flotilla.core.model import Job

PodKey = tuple[str, str]


class Ledger:
    """The bookkeeping of cluster ``cluster``; ``clock``: the cluster's clock (events are stamped with it)."""

    def __init__(self, cluster: str, clock: Callable[[], float]) -> None:
        self.cluster = cluster
        self.clock = clock
        self.job_pod: dict[str, PodKey] = {}          # job id -> its live pod
        self.attempts: dict[str, int] = {}            # job id -> its newest attempt (a pod name's number)
        self.inflight: dict[str, Job] = {}            # started, pod not seen yet
        self.starts: dict[str, int] = {}              # job id -> times started: tells a stale delete
        self.stopping: dict[str, str] = {}            # job id -> preempted | cancelled
        #: Pods Flotilla is deleting by a decision -> when: not counted by a snapshot (the cluster's docstring,
        #: Stopped pods) until gone, or until ``stuck_pod_expiry`` has passed.
        self.stopped: dict[PodKey, float] = {}
        self.kill_on_create: dict[str, str] = {}      # stopped before its pod was created
        self.ignore_delete: set[PodKey] = set()       # deletes of ours: the pod going is no news
        self.reported: dict[PodKey, str] = {}         # what was last said about each pod
        self.starting: dict[PodKey, float] = {}       # our pods not started yet -> first seen
        self.pull_backoffs: dict[PodKey, int] = {}    # our waiting pods -> times the kubelet backed off
        #: Our pods given up because their node was NotReady past nodeLostTimeout: a success they report when the
        #: node returns is their job's (NODE_RETURNED).
        self.lost_on_node: set[PodKey] = set()
        self.finished: dict[PodKey, float] = {}       # finished pods kept for their logs -> when to delete
        self.events: deque[tuple[JobEvent, int | None]] = deque()   # (event, the run it is about)

    def emit(self, job_id: str, kind: str, node: str | None, reason: str = "", run: int | None = None,
             exit_code: int | None = None, cause: str = "") -> None:
        """Say ``kind`` of ``job_id`` (``run``: the start it is about; None: whichever is current)."""
        self.events.append((JobEvent(job_id, kind, self.cluster, node, self.clock(), reason, exit_code, cause), run))

    def take_events(self) -> list[JobEvent]:
        """The events said since the last call, but those about an earlier run of their job (module docstring)."""
        starts = self.starts
        events = [ev for ev, run in self.events if run is None or run == starts.get(ev.job_id, 0)]
        self.events.clear()
        return events


__all__ = ["Ledger", "PodKey"]
