"""Leases: what clusters report each cycle, and what it does to the jobs they hold.

Armada's rule (armada-design.txt): a cluster renews the lease of every job
it runs at every heartbeat; a job whose lease is not renewed within
``lease.timeout`` is considered lost and runs elsewhere. Here a heartbeat is
a cycle in which the cluster answered (its ``snapshot`` and ``poll_events``
worked): every job it reports running gets its lease renewed. A lease that
expires gives the job a ``lease-expired`` event and sends it back to its
queue (``queued``), at most ``lease.maxRetries`` times; the next expiry fails
it with the reason. Retry policies (:mod:`flotilla.service.retry`) may decide
otherwise, for expiries and for every other failed run.

:func:`apply_reports` takes the active jobs (the loop's
:class:`~flotilla.service.store.leases.ActiveCopy`, which it updates) and the
reports, and returns the changes to write and the pods to stop on each
cluster, in four steps: each cluster's events, in order; heartbeats
(renewals, pods no job owns); expiry; stops asked for or due. :func:`ingest`
runs it inside the cycle's one store transaction
(:meth:`Store.update_active <flotilla.service.store.Store.update_active>`).
Its work follows what changed, not how many jobs are active: a cluster's
report is compared with the pods the copy expects there (two set differences
at C speed), a lease is written only when the report starts or stops
listing its job, every other lease of the cluster is renewed by the
cluster's one ``cluster_reports`` row, and expiry, stops and deadlines look
at the copy's indexes (jobs not listed, jobs asked to stop, a heap of
deadlines), except for a cluster silent past the timeout, whose jobs are all
looked at. The rules themselves (expiry, retries, node lost) are
:mod:`flotilla.core.leases`, shared with the in-memory runner; the model
(active jobs, the copy, pod ids) is the store's
(:mod:`flotilla.service.store.leases`).

A gang runs all together or not at all (:mod:`flotilla.plugins.gang`). So
when a member of a gang (not an elastic one) goes back to the queue from a
cluster's report (its bind returned for want of room, its pod lost, its
run failed and its retry policy runs it again) while
its mates are active (leased, pending or running), the mates' pods are
stopped and they go back to the queue with it (``returned``, then
``queued``), using none of their retries: the gang is placed again whole.
Left there, the member could never be placed on its own. The copy's index
of each gang's active members finds the mates. The same holds for a
member whose lease expired while its cluster kept answering (it stopped
listing the member): its mates still running there go back with it. A
cluster silent past the timeout has all its members' leases expire
together, each with its own ``lease-expired``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import TYPE_CHECKING, Mapping, Sequence

from flotilla.core.backend import NODE_RETURNED, JobEvent
from flotilla.core.leases import (LEASE_EXPIRED, Failure, decide, expiry_reason, lease_expired, lost_reason,
                                  returns_without_retry)
from flotilla.service.retry import Policies
from flotilla.service.store.leases import ActiveCopy, ActiveJob, Changes, IngestResult, job_of, pod_ids
from flotilla.service.store.records import (CANCELLED, FAILED, LEASED, PENDING, PREEMPTED, QUEUED, RUNNING,
                                            STOP_CANCEL, STOP_DEADLINE, STOP_NONE, SUCCEEDED)

if TYPE_CHECKING:
    from flotilla.service.store import Store

__all__ = ["DEADLINE_BACKSTOP", "IN_CLUSTER_POD", "QUEUED", "Changes", "ClusterReport", "IngestResult",
           "apply_reports", "ingest", "job_of", "pod_ids"]

#: The annotation an in-cluster pod's job carries (flotilla.kubernetes.intake.POD_UID).
IN_CLUSTER_POD = "flotilla.io/pod-uid"

_ID = attrgetter("id")

#: On a cluster that fails a job past its active deadline itself (a kubelet), the service stops the job only this
#: long after the deadline and its grace period: the cluster's own failure, with its reason, comes first.
DEADLINE_BACKSTOP = 10.0


@dataclass(slots=True)
class ClusterReport:
    """What one cluster said this cycle: events since the last poll and the pods it runs now.

    ``enforces_deadlines``: the cluster fails a pod past its ``activeDeadlineSeconds`` by itself, so the
    service's own deadline is a backstop (:data:`DEADLINE_BACKSTOP`).
    """

    events: Sequence[JobEvent] = ()
    running: set[str] = field(default_factory=set)
    enforces_deadlines: bool = False


#: A failure the service finds itself (as an expired lease, flotilla.core.leases): a job past its active deadline.
DEADLINE = Failure(False, cause="DeadlineExceeded")


def ingest(store: "Store", reports: Mapping[str, ClusterReport], now: float, lease_timeout: float,
           max_retries: int, copy: ActiveCopy | None = None) -> IngestResult:
    """One transaction per cycle, before scheduling: what clusters reported, lease renewal and expiry.

    ``reports`` has one entry per cluster that answered this cycle
    (events since the last poll, ids of the pods it runs). Leases of
    jobs a cluster runs are renewed; leases not renewed within
    ``lease_timeout`` expire (the job is queued again, or failed after
    ``max_retries`` expiries). Returns the active jobs after all that and
    what to stop on each cluster.

    ``copy``: the caller's :class:`ActiveCopy`, kept between calls; only
    the jobs with an event since the last call are read (under the
    write lock, so nothing interleaves), instead of every active job.
    A cycle in which every cluster lists what it listed last time writes
    one ``cluster_reports`` row per cluster and no lease.
    """
    def rules(active: ActiveCopy, policies: Policies) -> IngestResult:
        return apply_reports(active, reports, now, lease_timeout, max_retries, policies)

    return store.update_active(rules, now, copy)


def apply_reports(copy: ActiveCopy, reports: Mapping[str, ClusterReport], now: float, lease_timeout: float,
                  max_retries: int, policies: Policies | None = None) -> IngestResult:
    """Apply the clusters' ``reports`` to the active jobs of ``copy`` (see the module docstring).

    A failed or lost run runs again or fails as the job's and its queue's retry policies say (``policies``;
    None: the defaults, platform failures retried up to ``max_retries`` times).
    """
    cycle = _Cycle(copy, now, max_retries, policies)
    for cluster, report in reports.items():
        cycle.apply_events(cluster, report)
    for cluster, report in reports.items():
        cycle.heartbeat(cluster, report)
    cycle.expire(lease_timeout)
    cycle.stop_asked(reports)
    cycle.stop_past_deadline(reports)
    return IngestResult(copy.jobs, cycle.stops, cycle.changes, cycle.counts, cycle.returned, cycle.late_successes)


class _Cycle:
    """One cycle's application of the rules: the decisions so far (changes, stops, counts) and the moves that
    make them. Every move that ends a job's run drops it from the copy, which keeps later steps from seeing it."""

    def __init__(self, copy: ActiveCopy, now: float, max_retries: int, policies: Policies | None):
        self.copy = copy
        self.active = copy.jobs
        self.now = now
        self.max_retries = max_retries
        self.policies = policies
        self.changes = Changes()
        self.stops: dict[str, list[tuple[str, object]]] = {}
        self.counts: dict[str, int] = {}
        self.returned: dict[tuple[str, str], int] = {}
        self.late_successes: list[tuple[str, str, str | None, float, str]] = []

    # -- what a decision writes --------------------------------------------------------------------------------
    def count(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1

    def event(self, job: ActiveJob, kind: str, when: float, reason: str = "", cluster=None, node=None,
              pod: int | None = None) -> None:
        self.changes.events.append({"queue": job.queue, "job_set": job.job_set, "job_id": job.id, "kind": kind,
                                    "time": when, "cluster": cluster, "node": node, "reason": reason, "pod": pod})
        self.count(kind)

    def update(self, job: ActiveJob, **values) -> None:
        self.changes.job_updates.setdefault(job.id, {}).update(values)

    def stop_pods(self, job: ActiveJob, skip: str | None = None) -> None:
        for pod in pod_ids(job.id, job.npods):
            if pod != skip:
                self.stops.setdefault(job.cluster, []).append((pod, job))

    def end_lease(self, job: ActiveJob) -> None:
        """The job holds no lease from now: deleted in the store, dropped from the copy."""
        self.changes.lease_deletes.add(job.id)
        self.changes.lease_updates.pop(job.id, None)
        self.copy.drop(job.id)

    def rules_of(self, job: ActiveJob) -> tuple:
        return self.policies.rules(job.id, job.queue) if self.policies is not None else ()

    # -- how a run ends --------------------------------------------------------------------------------------
    def finish(self, job: ActiveJob, state: str, reason: str, when: float, stop_rest: bool = False,
               skip: str | None = None, pod: int | None = None) -> None:
        """The job ends in ``state``; ``stop_rest``: its other pods are stopped (all but ``skip``)."""
        self.update(job, state=state, reason=reason, finished=when)
        self.event(job, state, when, reason, job.cluster, _node_text(job), pod)
        self.end_lease(job)
        if stop_rest and job.npods > 1:
            self.stop_pods(job, skip)

    def retry_or_fail(self, job: ActiveJob, failure: Failure, reason: str, when: float, pod: int | None = None,
                      announced: bool = False, skip: str | None = None) -> None:
        """A run that failed: the retry policy (:mod:`flotilla.service.retry`) says whether the job runs again.

        ``announced``: the run's end has had its event already (``lease-expired``); otherwise it gets one here,
        ``run-failed`` when the job runs again, its final ``failed`` when not.
        """
        decision = decide(self.rules_of(job), failure, self.max_retries)
        retries = job.retries + 1
        if decision.retries_left(job.retries):
            if not announced:
                self.event(job, "run-failed", when, reason, job.cluster, _node_text(job), pod)
                if job.npods > 1:
                    self.stop_pods(job, skip)
            self.end_lease(job)
            self.update(job, state=QUEUED, retries=retries, cluster=None, node=None, started=None,
                        stop_requested=STOP_NONE, reason=f"{reason} ({decision.retry_text(retries)})")
            self.event(job, "queued", when, decision.retry_text(retries))
        elif announced:
            why = decision.fail_text(reason)
            self.update(job, state=FAILED, retries=retries, finished=when, reason=why)
            self.event(job, "failed", when, why)
        else:
            self.finish(job, FAILED, decision.fail_text(reason), when, stop_rest=True, skip=skip, pod=pod)

    def requeue_or_fail(self, job: ActiveJob, kind: str, reason: str, when: float, pod: int | None = None,
                        failure: Failure = Failure(True)) -> None:
        """The platform lost the run (``kind``: its event, ``lease-expired``)."""
        self.event(job, kind, when, reason, job.cluster, _node_text(job), pod)
        self.end_lease(job)
        if job.stop_requested == STOP_CANCEL:
            self.update(job, state=CANCELLED, retries=job.retries + 1, finished=when)
            self.event(job, "cancelled", when, "cancelled while its cluster was unreachable")
        elif job.stop_requested == STOP_DEADLINE:
            self.retry_or_fail(job, DEADLINE, "active deadline exceeded", when, announced=True)
        else:
            self.retry_or_fail(job, failure, reason, when, announced=True)

    def return_to_queue(self, job: ActiveJob, reason: str, when: float, pod: int | None,
                        announced: bool = False) -> None:
        """The run ended for the platform's reasons only (never bound, refused by a kubelet, its node lost): the
        job is queued again as it was, its retries kept. ``announced``: its event is written already."""
        if not announced:
            self.event(job, "returned", when, reason, job.cluster, _node_text(job), pod)
        self.end_lease(job)
        if job.stop_requested == STOP_CANCEL:
            self.update(job, state=CANCELLED, finished=when)
            self.event(job, "cancelled", when, "cancelled")
        elif job.stop_requested == STOP_DEADLINE:
            self.retry_or_fail(job, DEADLINE, "active deadline exceeded", when, announced=True)
        else:
            self.update(job, state=QUEUED, cluster=None, node=None, started=None, stop_requested=STOP_NONE,
                        reason=reason)
            self.event(job, "queued", when, reason)

    # -- 1. what each cluster reported, in order ----------------------------------------------------------------
    def apply_events(self, cluster: str, report: ClusterReport) -> None:
        for ev in report.events:
            job = self.active.get(job_of(ev.job_id))
            if ev.kind == "succeeded" and ev.cause == NODE_RETURNED and "#" not in ev.job_id:
                self.late_success(cluster, ev, job)
                continue
            if job is None or job.cluster != cluster:
                continue          # about a job that is no longer here: a stale report
            when = ev.time or self.now
            kind = ev.kind
            # A pod of a multi-pod job: its own events (pod-running, pod-succeeded) and the job's say which.
            pod = int(ev.job_id.split("#", 1)[1]) if "#" in ev.job_id else None
            if pod is not None and kind in ("failed", "lost"):
                ev = replace(ev, reason=f"pod {pod}: {ev.reason or kind}")
            if pod is not None and kind in ("running", "succeeded"):
                self.event(job, f"pod-{kind}", when, "", cluster, ev.node, pod)
            handler = _ON_EVENT.get(kind)
            if handler is not None:
                handler(self, cluster, job, ev, when, pod)

    def late_success(self, cluster: str, ev: JobEvent, job: ActiveJob | None) -> None:
        """A run given up when its node was lost finished meanwhile: the job keeps that success; a rerun,
        wherever it is, is stopped (a job of several pods is left to its rerun)."""
        when = ev.time or self.now
        reason = f"{ev.reason} (cluster {cluster})" if ev.reason else f"succeeded on cluster {cluster}"
        if job is None:
            self.late_successes.append((ev.job_id, cluster, ev.node, when, reason))
        else:
            self.stop_pods(job)
            self.finish(job, SUCCEEDED, f"{reason}; its rerun is cancelled", when)

    def on_running(self, cluster: str, job: ActiveJob, ev: JobEvent, when: float, pod: int | None) -> None:
        job.pods_running += 1
        self.changes.lease_updates.setdefault(job.id, {})["pods_running"] = job.pods_running
        if job.state in (LEASED, PENDING) and job.pods_running >= job.npods:
            job.state = RUNNING
            job.started = when
            self.copy.track_deadline(job)
            self.update(job, state=RUNNING, started=when, reason="")
            self.event(job, "running", when, ev.reason, cluster, _node_text(job))

    def on_succeeded(self, cluster: str, job: ActiveJob, ev: JobEvent, when: float, pod: int | None) -> None:
        job.pods_done += 1
        self.changes.lease_updates.setdefault(job.id, {})["pods_done"] = job.pods_done
        if job.pods_done >= job.npods:
            self.finish(job, SUCCEEDED, ev.reason, when)

    def on_failed(self, cluster: str, job: ActiveJob, ev: JobEvent, when: float, pod: int | None) -> None:
        reason = ev.reason or f"failed on {cluster}"
        if job.stop_requested == STOP_CANCEL or IN_CLUSTER_POD in job.annotations:
            # (An in-cluster pod that failed is its owner's to make again: its job is not retried.)
            self.finish(job, FAILED, reason, when, stop_rest=True, skip=ev.job_id, pod=pod)
        else:
            failure = DEADLINE if job.stop_requested == STOP_DEADLINE else Failure(False, ev.exit_code, ev.cause)
            self.retry_or_fail(job, failure, reason, when, pod, skip=ev.job_id)
            self.return_gang(job, when)   # retried: its gang runs again whole, as after a lost pod

    def on_preempted(self, cluster: str, job: ActiveJob, ev: JobEvent, when: float, pod: int | None) -> None:
        self.finish(job, PREEMPTED, ev.reason or f"preempted on {cluster}", when, stop_rest=True, skip=ev.job_id)

    def on_cancelled(self, cluster: str, job: ActiveJob, ev: JobEvent, when: float, pod: int | None) -> None:
        if job.stop_requested == STOP_CANCEL or ev.cause == "Deleted":
            # (Deleted: an in-cluster pod its owner deleted, kubectl delete job / pod.)
            self.finish(job, CANCELLED, ev.reason or "cancelled", when, stop_rest=True, skip=ev.job_id)
        elif job.stop_requested == STOP_DEADLINE:
            self.retry_or_fail(job, DEADLINE, "active deadline exceeded", when, skip=ev.job_id)
        else:
            self.finish(job, FAILED, f"stopped by cluster {cluster}: {ev.reason or 'cancelled'}", when,
                        stop_rest=True, skip=ev.job_id)

    def on_lost(self, cluster: str, job: ActiveJob, ev: JobEvent, when: float, pod: int | None) -> None:
        self.stop_pods(job)
        failure = Failure(True, ev.exit_code, ev.cause)
        reason = lost_reason(cluster, ev.reason)
        if job.stop_requested == STOP_NONE and returns_without_retry(failure, self.rules_of(job)):
            # Its node went away: the platform's doing, which uses none of the job's own retries (a retry
            # policy rule on NodeLost decides otherwise).
            self.event(job, "lease-expired", when, reason, job.cluster, _node_text(job), pod)
            self.return_to_queue(job, reason, when, pod, announced=True)
        else:
            self.requeue_or_fail(job, "lease-expired", reason, when, pod, failure)
        self.return_gang(job, when)

    def on_waiting(self, cluster: str, job: ActiveJob, ev: JobEvent, when: float, pod: int | None) -> None:
        if job.state in (LEASED, PENDING) and ev.reason:
            self.update(job, reason=ev.reason)   # why its pod waits on its node, as the kubelet says

    def on_returned(self, cluster: str, job: ActiveJob, ev: JobEvent, when: float, pod: int | None) -> None:
        # Not bound, or refused by the kubelet: the node was the wrong place at that moment (another
        # scheduler's pods took the room). Back to the queue, no retry used.
        label = (cluster, ev.cause or "Other")
        self.returned[label] = self.returned.get(label, 0) + 1
        self.stop_pods(job, ev.job_id)
        self.return_to_queue(job, ev.reason or f"returned by cluster {cluster}", when, pod)
        self.return_gang(job, when)

    def return_gang(self, job: ActiveJob, when: float) -> None:
        """``job``, just queued again from its cluster's report (returned, lost, or failed and retried), takes its
        gang's active members back to the queue with it, their pods stopped and their retries kept (module
        docstring)."""
        if not job.gang_id:
            return
        update = self.changes.job_updates.get(job.id)
        if update is None or update.get("state") != QUEUED:
            return                # cancelled, failed, or past its deadline: its gang is left to its own rules
        reason = f"gang {job.gang_id}: {job.id} went back to the queue ({update['reason']})"
        for mate in self.copy.gang_mates(job):
            self.stop_pods(mate)
            self.return_to_queue(mate, reason, when, None)

    # -- 2. heartbeats: renew the leases of what each cluster runs; stop what it should not run ----------------
    def heartbeat(self, cluster: str, report: ClusterReport) -> None:
        copy, active, now = self.copy, self.active, self.now
        running = report.running
        missing_pods, foreign = copy.report_difference(cluster, running)
        missing: set[str] = set()
        for pod in missing_pods:
            job_id = job_of(pod)
            if job_id not in missing:
                job = active[job_id]
                if job.npods == 1 or not any(p in running for p in pod_ids(job_id, job.npods)):
                    missing.add(job_id)
        present = len(copy.on_cluster.get(cluster, ())) - len(missing)
        if present:
            self.counts["lease-renewed"] = self.counts.get("lease-renewed", 0) + present
        unseen = copy.unseen.get(cluster, set())
        beat = copy.beat(cluster)
        lease_updates = self.changes.lease_updates
        for job_id in sorted(missing - unseen):   # no longer listed: renewed last at the cluster's previous report
            job = active[job_id]
            job.lease_renewed = job.renewed_at
            job.seen = False
            lease_updates.setdefault(job_id, {}).update(renewed_at=job.lease_renewed, seen=0)
        for job_id in sorted(unseen - missing):   # listed (again): renewed now, and with the cluster from now on
            job = active[job_id]
            job.lease_renewed = now
            job.seen = True
            lease_updates.setdefault(job_id, {}).update(renewed_at=now, seen=1)
        copy.set_unseen(cluster, missing)
        beat.at = now
        self.changes.beats[cluster] = now
        if foreign:
            stops = self.stops.setdefault(cluster, [])
            stopped = {pod for pod, _ in stops}   # (the rest of a job's pods, a returned gang's: stopped already)
            for pod in sorted(foreign - stopped):
                stops.append((pod, None))
                self.count("reconciled")

    # -- 3. expiry: leases not renewed within the timeout ------------------------------------------------------
    def expire(self, lease_timeout: float) -> None:
        """Only jobs their cluster did not list can be past the timeout, unless the cluster itself has not
        answered within it."""
        copy, now = self.copy, self.now
        expired = []
        for cluster, here in copy.on_cluster.items():
            beat = copy.beats.get(cluster)
            if beat is None or lease_expired(beat.at, now, lease_timeout):
                expired.extend(job for job in here.values() if lease_expired(job.renewed_at, now, lease_timeout))
            else:
                expired.extend(here[job_id] for job_id in copy.unseen[cluster]
                               if lease_expired(here[job_id].lease_renewed, now, lease_timeout))
        expired.sort(key=_ID)
        for job in expired:
            self.stop_pods(job)
            self.requeue_or_fail(job, "lease-expired", expiry_reason(job.cluster, job.renewed_at, now, lease_timeout),
                                 now, failure=LEASE_EXPIRED)
        for job in expired:   # after all of them: a mate whose lease expired too has had its own expiry
            self.return_gang(job, now)

    # -- 4. stops asked for (cancel) or due (active deadline), on clusters that answered ------------------------
    def stop_asked(self, reports: Mapping[str, ClusterReport]) -> None:
        """A job to stop that its cluster does not run (never started there) is finished at once."""
        for job_id in sorted(self.copy.stopping):
            job = self.active[job_id]
            report = reports.get(job.cluster)
            if report is None:
                continue
            if not any(pod in report.running for pod in pod_ids(job.id, job.npods)):
                if job.stop_requested == STOP_CANCEL:
                    self.finish(job, CANCELLED, "cancelled", self.now)
                else:
                    self.retry_or_fail(job, DEADLINE, "active deadline exceeded", self.now)
                continue
            self.stop_pods(job)

    def stop_past_deadline(self, reports: Mapping[str, ClusterReport]) -> None:
        """Running jobs past their active deadline (a backstop's time later where the cluster enforces it)."""
        now = self.now
        later = []
        for entry in self.copy.due_deadlines(now):
            job = self.active.get(entry[1])
            if job is None or job.state != RUNNING or job.stop_requested != STOP_NONE or not job.deadline \
                    or job.started is None or job.started + job.deadline != entry[0]:
                continue              # gone, or changed since (a newer entry stands for it)
            report = reports.get(job.cluster)
            backstop = job.grace_period + DEADLINE_BACKSTOP if report is not None and report.enforces_deadlines \
                else 0.0
            if report is None or not now - job.started > job.deadline + backstop:
                later.append(entry)   # its cluster did not answer, or not quite due: next cycle
                continue
            self.copy.stop(job, STOP_DEADLINE)
            self.update(job, stop_requested=STOP_DEADLINE, reason="active deadline exceeded")
            self.stop_pods(job)
        self.copy.defer(later)


def _node_text(job: ActiveJob) -> str:
    return ",".join(dict.fromkeys(job.nodes))


_ON_EVENT = {"running": _Cycle.on_running, "succeeded": _Cycle.on_succeeded, "failed": _Cycle.on_failed,
             "preempted": _Cycle.on_preempted, "cancelled": _Cycle.on_cancelled, "lost": _Cycle.on_lost,
             "waiting": _Cycle.on_waiting, "returned": _Cycle.on_returned}
