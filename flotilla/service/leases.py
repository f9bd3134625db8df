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
:class:`~flotilla.service.store.ActiveCopy`, which it updates) and the reports,
and returns the changes to write (one transaction, see
:meth:`Store.ingest <flotilla.service.store.Store.ingest>`) and the pods to
stop on each cluster. Its work follows what changed, not how many jobs are
active: a cluster's report is compared with the pods the copy expects there
(two set differences at C speed), a lease is written only when the report
starts or stops listing its job, every other lease of the cluster is renewed
by the cluster's one ``cluster_reports`` row, and expiry, stops and deadlines
look at the copy's indexes (jobs not listed, jobs asked to stop, a heap of
deadlines), except for a cluster silent past the timeout, whose jobs are all
looked at. Pods: a job of one pod is known to clusters by its id;
a job of several pods (``podSpecs``) by ``ID#0``, ``ID#1``, ...
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import Mapping, Sequence

from flotilla.core.backend import NODE_RETURNED, JobEvent
from flotilla.service.retry import Failure, Policies, decide

#: The annotation an in-cluster pod's job carries (flotilla.kubernetes.intake.POD_UID).
IN_CLUSTER_POD = "flotilla.io/pod-uid"

QUEUED, LEASED, PENDING, RUNNING = "queued", "leased", "pending", "running"
SUCCEEDED, FAILED, PREEMPTED, CANCELLED = "succeeded", "failed", "preempted", "cancelled"
STOP_NONE, STOP_CANCEL, STOP_DEADLINE = 0, 1, 2
_ID = attrgetter("id")


def pod_ids(job_id: str, npods: int) -> list[str]:
    return [job_id] if npods == 1 else [f"{job_id}#{i}" for i in range(npods)]


def job_of(pod_id: str) -> str:
    return pod_id.split("#", 1)[0]


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


@dataclass(slots=True)
class Changes:
    job_updates: dict[str, dict] = field(default_factory=dict)
    lease_updates: dict[str, dict] = field(default_factory=dict)
    lease_deletes: set[str] = field(default_factory=set)
    beats: dict[str, float] = field(default_factory=dict)   # cluster -> when it answered (renews its seen leases)
    events: list[dict] = field(default_factory=list)


@dataclass(slots=True)
class IngestResult:
    active: dict                       # job id -> ActiveJob, after this cycle's changes
    stops: dict[str, list[tuple[str, object]]]   # cluster -> [(pod id, ActiveJob or None)]
    changes: Changes
    counts: dict[str, int] = field(default_factory=dict)
    #: Binds returned to the queue this cycle, by (cluster, reason label): flotilla_binds_returned_total.
    returned: dict[tuple[str, str], int] = field(default_factory=dict)
    #: Successes of runs given up when their node was lost, for jobs not active now (queued again): (job id,
    #: cluster, node, time, reason). The store finishes those still queued (Store.ingest).
    late_successes: list[tuple[str, str, str | None, float, str]] = field(default_factory=list)


#: The failures the service finds itself: a lease not renewed in time, a job past its active deadline.
LEASE_EXPIRED = Failure(True, cause="LeaseExpired")
DEADLINE = Failure(False, cause="DeadlineExceeded")


def apply_reports(copy, reports: Mapping[str, ClusterReport], now: float, lease_timeout: float,
                  max_retries: int, policies: Policies | None = None) -> IngestResult:
    """Apply the clusters' ``reports`` to the active jobs of ``copy`` (see the module docstring).

    A failed or lost run runs again or fails as the job's and its queue's retry policies say (``policies``;
    None: the defaults, platform failures retried up to ``max_retries`` times).
    """
    active = copy.jobs
    changes = Changes()
    stops: dict[str, list[tuple[str, object]]] = {}
    counts: dict[str, int] = {}
    returned: dict[tuple[str, str], int] = {}
    late_successes: list[tuple[str, str, str | None, float, str]] = []

    def count(name: str) -> None:
        counts[name] = counts.get(name, 0) + 1

    def event(job, kind: str, when: float, reason: str = "", cluster=None, node=None, pod: int | None = None) -> None:
        changes.events.append({"queue": job.queue, "job_set": job.job_set, "job_id": job.id, "kind": kind,
                               "time": when, "cluster": cluster, "node": node, "reason": reason, "pod": pod})
        count(kind)

    def update(job, **values) -> None:
        changes.job_updates.setdefault(job.id, {}).update(values)

    def node_text(job) -> str:
        return ",".join(dict.fromkeys(job.nodes))

    def stop_pods(job, skip: str | None = None) -> None:
        for pod in pod_ids(job.id, job.npods):
            if pod != skip:
                stops.setdefault(job.cluster, []).append((pod, job))

    def finish(job, state: str, reason: str, when: float, stop_rest: bool = False, skip: str | None = None,
               pod: int | None = None) -> None:
        update(job, state=state, reason=reason, finished=when)
        event(job, state, when, reason, job.cluster, node_text(job), pod)
        changes.lease_deletes.add(job.id)
        changes.lease_updates.pop(job.id, None)
        copy.drop(job.id)
        if stop_rest and job.npods > 1:
            stop_pods(job, skip)

    def rules_of(job) -> tuple:
        return policies.rules(job.id, job.queue) if policies is not None else ()

    def retry_or_fail(job, failure: Failure, reason: str, when: float, pod: int | None = None,
                      announced: bool = False, skip: str | None = None) -> None:
        """A run that failed: the retry policy (:mod:`flotilla.service.retry`) says whether the job runs again.

        ``announced``: the run's end has had its event already (``lease-expired``); otherwise it gets one here,
        ``run-failed`` when the job runs again, its final ``failed`` when not.
        """
        decision = decide(rules_of(job), failure, max_retries)
        retries = job.retries + 1
        if decision.retry and job.retries < decision.limit:
            if not announced:
                event(job, "run-failed", when, reason, job.cluster, node_text(job), pod)
                if job.npods > 1:
                    stop_pods(job, skip)
            changes.lease_deletes.add(job.id)
            changes.lease_updates.pop(job.id, None)
            copy.drop(job.id)
            update(job, state=QUEUED, retries=retries, cluster=None, node=None, started=None,
                   stop_requested=STOP_NONE, reason=f"{reason} ({decision.retry_text(retries)})")
            event(job, "queued", when, decision.retry_text(retries))
        elif announced:
            why = decision.fail_text(reason)
            update(job, state=FAILED, retries=retries, finished=when, reason=why)
            event(job, "failed", when, why)
        else:
            finish(job, FAILED, decision.fail_text(reason), when, stop_rest=True, skip=skip, pod=pod)

    def requeue_or_fail(job, kind: str, reason: str, when: float, pod: int | None = None,
                        failure: Failure = Failure(True)) -> None:
        """The platform lost the run (``kind``: its event, ``lease-expired``)."""
        event(job, kind, when, reason, job.cluster, node_text(job), pod)
        changes.lease_deletes.add(job.id)
        changes.lease_updates.pop(job.id, None)
        copy.drop(job.id)
        if job.stop_requested == STOP_CANCEL:
            update(job, state=CANCELLED, retries=job.retries + 1, finished=when)
            event(job, "cancelled", when, "cancelled while its cluster was unreachable")
        elif job.stop_requested == STOP_DEADLINE:
            retry_or_fail(job, DEADLINE, "active deadline exceeded", when, announced=True)
        else:
            retry_or_fail(job, failure, reason, when, announced=True)

    def return_to_queue(job, reason: str, when: float, pod: int | None, announced: bool = False) -> None:
        """The run ended for the platform's reasons only (never bound, refused by a kubelet, its node lost): the
        job is queued again as it was, its retries kept. ``announced``: its event is written already."""
        if not announced:
            event(job, "returned", when, reason, job.cluster, node_text(job), pod)
        changes.lease_deletes.add(job.id)
        changes.lease_updates.pop(job.id, None)
        copy.drop(job.id)
        if job.stop_requested == STOP_CANCEL:
            update(job, state=CANCELLED, finished=when)
            event(job, "cancelled", when, "cancelled")
        elif job.stop_requested == STOP_DEADLINE:
            retry_or_fail(job, DEADLINE, "active deadline exceeded", when, announced=True)
        else:
            update(job, state=QUEUED, cluster=None, node=None, started=None, stop_requested=STOP_NONE,
                   reason=reason)
            event(job, "queued", when, reason)

    # 1. What each cluster reported, in order.
    for cluster, report in reports.items():
        for ev in report.events:
            job = active.get(job_of(ev.job_id))
            if ev.kind == "succeeded" and ev.cause == NODE_RETURNED and "#" not in ev.job_id:
                # A run given up when its node was lost finished meanwhile: the job keeps that success; a rerun,
                # wherever it is, is stopped (a job of several pods is left to its rerun).
                when = ev.time or now
                reason = f"{ev.reason} (cluster {cluster})" if ev.reason else f"succeeded on cluster {cluster}"
                if job is None:
                    late_successes.append((ev.job_id, cluster, ev.node, when, reason))
                else:
                    stop_pods(job)
                    finish(job, SUCCEEDED, f"{reason}; its rerun is cancelled", when)
                continue
            if job is None or job.cluster != cluster:
                continue          # about a job that is no longer here: a stale report
            when = ev.time or now
            kind = ev.kind
            # A pod of a multi-pod job: its own events (pod-running, pod-succeeded) and the job's say which.
            pod = int(ev.job_id.split("#", 1)[1]) if "#" in ev.job_id else None
            if pod is not None and kind in ("failed", "lost"):
                ev = replace(ev, reason=f"pod {pod}: {ev.reason or kind}")
            if pod is not None and kind in ("running", "succeeded"):
                event(job, f"pod-{kind}", when, "", cluster, ev.node, pod)
            if kind == "running":
                job.pods_running += 1
                changes.lease_updates.setdefault(job.id, {})["pods_running"] = job.pods_running
                if job.state in (LEASED, PENDING) and job.pods_running >= job.npods:
                    job.state = RUNNING
                    job.started = when
                    copy.track_deadline(job)
                    update(job, state=RUNNING, started=when, reason="")
                    event(job, "running", when, ev.reason, cluster, node_text(job))
            elif kind == "succeeded":
                job.pods_done += 1
                changes.lease_updates.setdefault(job.id, {})["pods_done"] = job.pods_done
                if job.pods_done >= job.npods:
                    finish(job, SUCCEEDED, ev.reason, when)
            elif kind == "failed":
                reason = ev.reason or f"failed on {cluster}"
                if job.stop_requested == STOP_CANCEL or IN_CLUSTER_POD in job.annotations:
                    # (An in-cluster pod that failed is its owner's to make again: its job is not retried.)
                    finish(job, FAILED, reason, when, stop_rest=True, skip=ev.job_id, pod=pod)
                else:
                    failure = DEADLINE if job.stop_requested == STOP_DEADLINE else \
                        Failure(False, ev.exit_code, ev.cause)
                    retry_or_fail(job, failure, reason, when, pod, skip=ev.job_id)
            elif kind == "preempted":
                finish(job, PREEMPTED, ev.reason or f"preempted on {cluster}", when, stop_rest=True, skip=ev.job_id)
            elif kind == "cancelled":
                if job.stop_requested == STOP_CANCEL or ev.cause == "Deleted":
                    # (Deleted: an in-cluster pod its owner deleted, kubectl delete job / pod.)
                    finish(job, CANCELLED, ev.reason or "cancelled", when, stop_rest=True, skip=ev.job_id)
                elif job.stop_requested == STOP_DEADLINE:
                    retry_or_fail(job, DEADLINE, "active deadline exceeded", when, skip=ev.job_id)
                else:
                    finish(job, FAILED, f"stopped by cluster {cluster}: {ev.reason or 'cancelled'}", when,
                           stop_rest=True, skip=ev.job_id)
            elif kind == "lost":
                stop_pods(job)
                failure = Failure(True, ev.exit_code, ev.cause)
                reason = f"lost on cluster {cluster}: {ev.reason or 'no reason given'}"
                if ev.cause == "NodeLost" and job.stop_requested == STOP_NONE \
                        and not any(rule.matches(failure) for rule in rules_of(job)):
                    # Its node went away: the platform's doing, which uses none of the job's own retries (a retry
                    # policy rule on NodeLost decides otherwise).
                    event(job, "lease-expired", when, reason, job.cluster, node_text(job), pod)
                    return_to_queue(job, reason, when, pod, announced=True)
                else:
                    requeue_or_fail(job, "lease-expired", reason, when, pod, failure)
            elif kind == "waiting":
                if job.state in (LEASED, PENDING) and ev.reason:
                    update(job, reason=ev.reason)   # why its pod waits on its node, as the kubelet says
            elif kind == "returned":
                # Not bound, or refused by the kubelet: the node was the wrong place at that moment (another
                # scheduler's pods took the room). Back to the queue, no retry used.
                label = (cluster, ev.cause or "Other")
                returned[label] = returned.get(label, 0) + 1
                stop_pods(job, ev.job_id)
                return_to_queue(job, ev.reason or f"returned by cluster {cluster}", when, pod)

    # 2. Heartbeats: renew the leases of what each cluster runs; stop what it should not run.
    for cluster, report in reports.items():
        running = report.running
        expected = copy.pods.get(cluster, set())
        version = copy.versions.get(cluster, 0)
        cached = copy.report_cache.get(cluster)
        if cached is not None and cached[0] is running and cached[1] == version:
            missing_pods, foreign = cached[2], cached[3]     # the same report against the same jobs
        else:
            missing_pods, foreign = expected - running, running - expected
            copy.report_cache[cluster] = (running, version, missing_pods, foreign)
        missing: set[str] = set()
        for pod in missing_pods:
            job_id = job_of(pod)
            if job_id not in missing:
                job = active[job_id]
                if job.npods == 1 or not any(p in running for p in pod_ids(job_id, job.npods)):
                    missing.add(job_id)
        present = len(copy.on_cluster.get(cluster, ())) - len(missing)
        if present:
            counts["lease-renewed"] = counts.get("lease-renewed", 0) + present
        unseen = copy.unseen.get(cluster, set())
        beat = copy.beat(cluster)
        for job_id in sorted(missing - unseen):   # no longer listed: renewed last at the cluster's previous report
            job = active[job_id]
            job.lease_renewed = job.renewed_at
            job.seen = False
            changes.lease_updates.setdefault(job_id, {}).update(renewed_at=job.lease_renewed, seen=0)
        for job_id in sorted(unseen - missing):   # listed (again): renewed now, and with the cluster from now on
            job = active[job_id]
            job.lease_renewed = now
            job.seen = True
            changes.lease_updates.setdefault(job_id, {}).update(renewed_at=now, seen=1)
        if cluster in copy.unseen:
            copy.unseen[cluster] = missing
        beat.at = now
        changes.beats[cluster] = now
        for pod in sorted(foreign):
            stops.setdefault(cluster, []).append((pod, None))
            count("reconciled")

    # 3. Expiry: leases not renewed within the timeout. Only jobs their cluster did not list can be past it,
    #    unless the cluster itself has not answered within the timeout.
    horizon = now - lease_timeout
    expired = []
    for cluster, here in copy.on_cluster.items():
        beat = copy.beats.get(cluster)
        if beat is None or beat.at < horizon:
            expired.extend(job for job in here.values() if job.renewed_at < horizon)
        else:
            expired.extend(here[job_id] for job_id in copy.unseen[cluster] if here[job_id].lease_renewed < horizon)
    for job in sorted(expired, key=_ID):
        stop_pods(job)
        requeue_or_fail(job, "lease-expired",
                        f"lease on cluster {job.cluster} not renewed for {now - job.renewed_at:.0f}s "
                        f"(timeout {lease_timeout:g}s)", now, failure=LEASE_EXPIRED)

    # 4. Stops asked for (cancel) or due (active deadline), on clusters that answered. A job to stop
    #    that its cluster does not run (never started there) is finished at once.
    for job_id in sorted(copy.stopping):
        job = active[job_id]
        report = reports.get(job.cluster)
        if report is None:
            continue
        if not any(pod in report.running for pod in pod_ids(job.id, job.npods)):
            if job.stop_requested == STOP_CANCEL:
                finish(job, CANCELLED, "cancelled", now)
            else:
                retry_or_fail(job, DEADLINE, "active deadline exceeded", now)
            continue
        stop_pods(job)
    later = []
    heap = copy.deadlines
    while heap and heap[0][0] <= now:
        entry = heapq.heappop(heap)
        job = active.get(entry[1])
        if job is None or job.state != RUNNING or job.stop_requested != STOP_NONE or not job.deadline \
                or job.started is None or job.started + job.deadline != entry[0]:
            continue              # gone, or changed since (a newer entry stands for it)
        report = reports.get(job.cluster)
        backstop = job.grace_period + DEADLINE_BACKSTOP if report is not None and report.enforces_deadlines else 0.0
        if report is None or not now - job.started > job.deadline + backstop:
            later.append(entry)   # its cluster did not answer, or not quite due: next cycle
            continue
        job.stop_requested = STOP_DEADLINE
        copy.stopping.add(job.id)
        update(job, stop_requested=STOP_DEADLINE, reason="active deadline exceeded")
        stop_pods(job)
    for entry in later:
        heapq.heappush(heap, entry)
    return IngestResult(active, stops, changes, counts, returned, late_successes)
