"""In-cluster pods into the store: which queue, job set, priority class and gang; refusals told on the pod.

Each cycle the leader's loop takes, from every Kubernetes backend, the
waiting in-cluster pods that are new or changed and those that left
(:class:`~flotilla.kubernetes.intake.IntakeTracker`: watch events only, no
listing), and writes them in one transaction (:meth:`Store.intake`): a pod
becomes a queued job of source ``cluster`` whose id is its uid's 32 hex
digits, so the same pod is never stored twice, whichever leader offers it
and however often; a pod that left while queued cancels its job.

How a pod maps to a job:

* queue: the pod's label ``flotilla.io/queue`` (or Kueue's
  ``kueue.x-k8s.io/queue-name``), else its PodGroup's ``spec.queue``, else
  the same labels on its controlling batch/v1 Job (or that Job's JobSet),
  else its namespace's
  label; the queue must exist and list the pod's namespace in
  ``namespaces``. Where none names one, the config's placement rules give
  it (:mod:`flotilla.service.placement`: a queue per namespace, made on
  first use, or a fixed queue), and that queue may take the pod whatever
  namespaces it lists;
* job set: the label ``flotilla.io/job-set``, else the controlling owner's
  name (a Job's), else the pod's name;
* priority class: ``spec.priorityClassName``, else its PodGroup's: a
  Flotilla priority class, else one of the cluster's PriorityClass objects
  (:mod:`flotilla.kubernetes.priorityclasses`); a pod given no class is of
  the class ``(none)``, priority 0, as in Kubernetes (not the config's
  default class, which is for API jobs). Within its queue a pod goes by its
  Kubernetes priority (``spec.priority``, highest first), as kube-scheduler's
  queue orders pods;
* requests as kube-scheduler counts them; nodeSelector, tolerations, node
  affinity, host ports as for submitted jobs (what a submitted job is
  refused for, a pod is refused for, with its field path);
* gangs: ``armadaproject.io/gangId`` and ``gangCardinality`` (and
  ``flotilla.io/gang-min-available``) on the pods, read as everywhere
  (:mod:`flotilla.core.gangannotations`), stored once all members wait.
  ``armadaproject.io/gangNodeUniformityLabel`` on them is stored with the
  gang, which then runs on nodes sharing one value of that node label, as a
  submitted gang does; its members must agree on it as on the cardinality
  (a pod that comes after the gang started is placed one by one, as below,
  and so is not held to the gang's domain). Or Volcano's ``scheduling.k8s.io/group-name`` (or
  ``scheduling.volcano.sh/group-name``, as Volcano's job controller and
  Kubeflow Trainer write it): the pods of that
  PodGroup are stored as one gang once ``minMember`` of them wait (its
  minimum is ``minMember``; the PodGroup fields Flotilla does not honour
  are refused on its pods, :func:`~flotilla.kubernetes.intake.read_podgroup`,
  and so is a uniformity label on them: Volcano has no such word).
  A pod coming for a gang already stored fills a place left empty while
  the gang has not started, and is stored one by one otherwise (``_join``).

A queued job cancelled through Flotilla has its waiting pod deleted (the
store's ``cancelled`` events, read from a cursor; at a change of leader,
the waiting pods' jobs). A pod Flotilla bound while its job is queued in
the store (a leader that stopped after the bind, before its record) is
recorded where it runs (:meth:`Store.adopt_bound`), never cancelled nor
bound again.

A pod that cannot be stored yet (refused, or a gang not complete) is
*parked*: it is told why with ``PodScheduled=False`` (the
:class:`~flotilla.kubernetes.conditions.PodReporter`), and looked at again
when it changes, a member of its gang arrives, or the queues change. A
waiting pod that is stored is told the scheduler's reason each cycle it
stays queued (the dashboard's reasons), at most one write per pod per the
reporter's interval and only when the reason changed.
"""

from __future__ import annotations

import json
from typing import AbstractSet as Set, Iterable, Mapping

import structlog

from flotilla.core.capabilities import Backends, PodIntake
from flotilla.core.gangannotations import read_gang_annotations
from flotilla.core.model import (GANG_CARDINALITY_ANNOTATION, GANG_ID_ANNOTATION, GANG_MIN_AVAILABLE_ANNOTATION,
                                 GANG_NODE_UNIFORMITY_LABEL_ANNOTATION, OWNER_ANNOTATION)
from flotilla.kubernetes.public import (JOB_SET_LABEL, KUEUE_QUEUE_LABEL, NO_CLASS, POD_NAME, POD_NAMESPACE, POD_UID,
                                       QUEUE_LABEL, Arrival, queue_label)
from flotilla.service.placement import place
from flotilla.service.store import retiring_reason

log = structlog.get_logger("flotilla.service.intake")

#: Waiting pods told the scheduler's reason per cluster and cycle (the rest are told in later cycles).
REPORT_LIMIT = 2_000


def _dump(value) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _label_word(label: str | None) -> str:
    """A uniformity label as a refusal quotes it: ``'rack'``, or ``none``."""
    return "none" if label is None else repr(label)


def _disagreement(members: list, key: str, word) -> str | None:
    """Each member's annotation ``key`` as a refusal lists them (``NAME says VALUE``, VALUE as ``word`` writes
    it), or None when the gang's members all say the same."""
    said = [(arrival.pod.name, arrival.pod.annotations.get(key)) for arrival, _ in members]
    if len({value for _, value in said}) == 1:
        return None
    return ", ".join(f"{name} says {word(value)}" for name, value in said)


def _refuse_all(refused: dict, members: list, why: str) -> None:
    """Every pod of the gang's ``members`` is parked, told ``why``."""
    for arrival, _ in members:
        refused[arrival.pod.uid] = (arrival, why)


class ClusterIntake:
    """The loop's intake step (see the module docstring); ``resync`` after every change of leader."""

    def __init__(self, store):
        self.store = store
        self.parked: dict[str, dict[str, tuple[Arrival, str]]] = {}   # cluster -> uid -> (arrival, why)
        self.resync = True
        #: Placement rules (flotilla.service.placement) for pods whose pod, Job, PodGroup and namespace name no
        #: queue; the loop sets them from its settings.
        self.placement: tuple = ()
        self._queues_key = None
        self._report_from: dict[str, int] = {}
        self._cancel_cursor = 0
        self._doomed: list[tuple[str, str, str, str]] = []   # waiting pods whose jobs were cancelled: deleted

    @staticmethod
    def backends(backends: Mapping[str, object]) -> dict[str, PodIntake]:
        """The backends that take in cluster-made pods (the :class:`~flotilla.core.capabilities.PodIntake`
        capability), by name."""
        return Backends.of(backends).having("intake")

    def run(self, backends: Mapping[str, object], answered: Iterable[str], queues, priority_classes: set[str],
            default_priority_class: str, now: float, preemptible: Set[str] = frozenset()) -> dict[str, int]:
        """Take in what each answering cluster's pods did since the last cycle; returns counts for the report.

        ``preemptible``: the names of the preemptible priority classes (a PodGroup's ``preemptable`` is checked
        against them)."""
        counts = {"taken": 0, "parked": 0, "left": 0}
        mine = self.backends(backends)
        if not mine:
            return counts
        queue_map = {q.name: q for q in queues}
        key = tuple((q.name, tuple(q.namespaces), q.retiring is None) for q in queues) + (tuple(sorted(priority_classes)),
                                                                      default_priority_class,
                                                                      tuple(sorted(preemptible)))
        queues_changed = key != self._queues_key
        self._queues_key = key
        resync, self.resync = self.resync, False
        if resync:   # cancellations from here on come as events; those before, from the waiting pods' jobs
            self._cancel_cursor = self.store.last_event_id()
            cancelled = []
        else:
            self._cancel_cursor, cancelled = self.store.cancelled_from_cluster(self._cancel_cursor)
        for name in sorted(set(answered) & set(mine)):
            backend = mine[name]
            parked = self.parked.setdefault(name, {})
            extra_gone: dict[str, str] = {}
            self._doomed = [(namespace, pod, uid, self._cancel_message(job_id, reason))
                            for job_id, namespace, pod, uid, reason in cancelled if uid is not None]
            deleted = {job_id: self._cancel_message(job_id, reason)
                       for job_id, _, _, uid, reason in cancelled if uid is None}
            if deleted:
                self._doomed.extend((pod.namespace, pod.name, pod.uid, deleted[pod.job_id])
                                    for pod in backend.waiting_pods() if pod.job_id in deleted)
            if resync:
                waiting = backend.intake_resync()
                bound = backend.bound_in_cluster()
                parked.clear()
                for job_id in self.store.queued_from_cluster(name):
                    if job_id not in waiting and job_id not in bound:
                        extra_gone[job_id] = "pod gone while no scheduler led"
            else:
                bound = backend.take_bound()
            if bound:   # bound by Flotilla while its job was queued (a leader that stopped before recording it)
                adopted = self.store.adopt_bound(name, bound, now)
                if adopted:
                    counts["adopted"] = counts.get("adopted", 0) + len(adopted)
                    log.warning("intake.adopted", cluster=name, jobs=len(adopted),
                                reason="queued jobs whose pods Flotilla had bound: recorded on their nodes")
            arrivals, gone = backend.take_intake()
            gone.update(extra_gone)
            if gone:
                for uid in [uid for uid, (a, _) in parked.items() if a.pod.job_id in gone]:
                    del parked[uid]
            fresh = {a.pod.uid: a for a in arrivals}
            for uid in fresh:
                parked.pop(uid, None)
            if queues_changed or resync:
                again = dict(parked)
                parked.clear()
            else:   # members of the gangs that arrivals belong to are looked at again with them
                keys = {self._gang_key(a) for a in arrivals} - {None}
                again = {uid: entry for uid, entry in parked.items() if self._gang_key(entry[0]) in keys}
                for uid in again:
                    del parked[uid]
            candidates = list(fresh.values()) + [entry[0] for uid, entry in again.items() if uid not in fresh]
            if gone and candidates:   # first, so that a pod made again for a gang's member finds its place empty
                self.store.intake([], gone, now)
            rows, refused = self._admit(name, candidates, queue_map, priority_classes, default_priority_class,
                                        preemptible)
            parked.update(refused)
            if self._doomed:
                backend.delete_cancelled(self._doomed)
            left = {} if gone and candidates else gone   # (taken already, above)
            stored = self.store.intake(rows, left, now) if rows or left else []
            counts["taken"] += len(stored)
            counts["parked"] += len(refused)
            counts["left"] += len(gone)
            if stored or gone:
                log.info("intake.pods", cluster=name, stored=len(stored), left=len(gone), parked=len(parked))
        return counts

    # -- admission -----------------------------------------------------------------------
    @staticmethod
    def _gang_key(arrival: Arrival):
        pod = arrival.pod
        if pod.group_name:
            return ("podgroup", pod.namespace, pod.group_name)
        gang = pod.annotations.get(GANG_ID_ANNOTATION)
        return ("gang", pod.namespace, gang) if gang else None

    def _admit(self, cluster: str, candidates: list[Arrival], queues: Mapping, priority_classes: set[str],
               default_pc: str, preemptible: Set[str] = frozenset()
               ) -> tuple[list[dict], dict[str, tuple[Arrival, str]]]:
        rows: list[dict] = []
        refused: dict[str, tuple[Arrival, str]] = {}
        if not candidates:
            return rows, refused
        known = self.store.known_jobs(a.pod.job_id for a in candidates)
        gangs: dict[tuple, list[tuple[Arrival, dict]]] = {}
        for arrival in candidates:
            pod = arrival.pod
            if pod.job_id in known:
                if known[pod.job_id][1] == "cancelled":   # cancelled through Flotilla while no leader looked
                    self._doomed.append((pod.namespace, pod.name, pod.uid, self._cancel_message(pod.job_id, "")))
                continue          # stored already (by this leader or an earlier one): nothing to do
            if pod.gated:
                refused[pod.uid] = (arrival, "")   # kube-scheduler's own rule: nothing is said of a gated pod
                continue
            row, why = self._row(cluster, arrival, queues, priority_classes, default_pc, preemptible)
            if why is not None:
                refused[pod.uid] = (arrival, why)
                continue
            gang = self._gang_key(arrival)
            if gang is None:
                rows.append(row)
            else:
                gangs.setdefault(gang, []).append((arrival, row))
        for gang, members in sorted(gangs.items()):
            kind, namespace, name = gang
            members.sort(key=lambda member: member[0].pod.name)
            first = members[0][0]
            gang_id = f"podgroup/{namespace}/{name}" if kind == "podgroup" else f"{namespace}/{name}"
            if kind == "gang":
                detail = _disagreement(members, GANG_CARDINALITY_ANNOTATION, str)
                if detail is not None:
                    _refuse_all(refused, members, f"metadata.annotations.{GANG_CARDINALITY_ANNOTATION}: gang "
                                                  f"{name!r} has inconsistent cardinality ({detail})")
                    continue
                detail = _disagreement(members, GANG_NODE_UNIFORMITY_LABEL_ANNOTATION, _label_word)
                if detail is not None:
                    _refuse_all(refused, members, f"metadata.annotations.{GANG_NODE_UNIFORMITY_LABEL_ANNOTATION}: "
                                                  f"gang {name!r} members disagree on the uniformity label ({detail})")
                    continue
            cardinality, queued, started = self.store.gang_live(members[0][1]["queue"], gang_id)
            if queued or started:
                self._join(kind, name, gang_id, members, cardinality, queued, started, rows, refused)
                continue
            if kind == "podgroup":
                minimum = first.group_min
                if len(members) < minimum:
                    _refuse_all(refused, members, f"PodGroup {namespace}/{name}: {len(members)} of its minMember "
                                                  f"{minimum} pods waiting")
                    continue
                for _, row in members:
                    self._into_gang(row, gang_id, len(members), minimum)
                    rows.append(row)
                continue
            cardinality = int(first.pod.annotations[GANG_CARDINALITY_ANNOTATION])
            if len(members) != cardinality:
                _refuse_all(refused, members, f"gang {name!r}: {len(members)} of its {cardinality} pods waiting")
                continue
            for _, row in members:
                row.update(gang_id=gang_id, gang_cardinality=cardinality, gang_pods=cardinality)
                rows.append(row)
        return rows, refused

    @staticmethod
    def _cancel_message(job_id: str, reason: str) -> str:
        return (f"job {job_id} was cancelled through Flotilla" + (f" ({reason})" if reason else "")
                + ": the pod is deleted (a controller that owns it may make a new pod, which is a new job)")

    @staticmethod
    def _into_gang(row: dict, gang_id: str, cardinality: int, minimum: int) -> None:
        """Make ``row`` a member of a PodGroup gang of ``cardinality`` pods whose minimum is ``minimum``."""
        annotations = json.loads(row["annotations"])
        annotations[GANG_MIN_AVAILABLE_ANNOTATION] = str(max(1, min(minimum, cardinality)))
        row.update(gang_id=gang_id, gang_cardinality=cardinality, gang_pods=cardinality,
                   annotations=_dump(annotations))

    def _join(self, kind: str, name: str, gang_id: str, members: list[tuple[Arrival, dict]], cardinality: int,
              queued: int, started: int, rows: list[dict], refused: dict) -> None:
        """Pods arriving for a gang whose members are stored already (live, not finished).

        While none of the gang has started, a pod fills a place left empty (a member deleted while queued,
        made again by its controller): it joins the gang, which starts once complete. Once the gang has
        started, its all-or-nothing is past, and pods that come later are placed one by one, as room appears
        (as an elastic gang's members beyond its minimum are). A pod of a complete gang that has not started
        is placed one by one if it belongs to a PodGroup (Volcano places pods beyond minMember so), and refused
        if it carries gang annotations (the gang has its gangCardinality pods already).
        """
        if kind == "gang":
            said = int(members[0][0].pod.annotations[GANG_CARDINALITY_ANNOTATION])
            if said != cardinality:
                _refuse_all(refused, members, f"metadata.annotations.{GANG_CARDINALITY_ANNOTATION}: gang {name!r} "
                                              f"was stored with cardinality {cardinality}, this pod says {said}")
                return
            label = GANG_NODE_UNIFORMITY_LABEL_ANNOTATION
            stored = self.store.gang_annotation(members[0][1]["queue"], gang_id, label)
            said_label = members[0][0].pod.annotations.get(label)
            if said_label != stored:
                _refuse_all(refused, members, f"metadata.annotations.{label}: gang {name!r} was stored with "
                                              f"uniformity label {_label_word(stored)}, this pod says "
                                              f"{_label_word(said_label)}")
                return
        if started:
            rows.extend(row for _, row in members)
            return
        vacancy = max(0, cardinality - queued)
        for arrival, row in members[:vacancy]:
            if kind == "podgroup":
                self._into_gang(row, gang_id, cardinality, arrival.group_min or cardinality)
            else:
                row.update(gang_id=gang_id, gang_cardinality=cardinality, gang_pods=cardinality)
            rows.append(row)
        for arrival, row in members[vacancy:]:
            if kind == "podgroup":
                rows.append(row)
            else:
                refused[arrival.pod.uid] = (arrival, f"gang {name!r} has its {cardinality} pods queued already")

    def _make_queue(self, spec):
        """A queue a placement rule makes on first use (another leader may have made it already)."""
        existing = self.store.get_queue(spec.name)
        if existing is not None:
            return existing
        try:
            made = self.store.create_queue(spec)
        except Exception:   # made meanwhile by another process
            made = self.store.get_queue(spec.name)
            if made is None:
                raise
        log.info("intake.queue_made", queue=spec.name, namespaces=list(spec.namespaces),
                 reason="placement rule: a queue per namespace")
        return made

    def _row(self, cluster: str, arrival: Arrival, queues: Mapping, priority_classes: set[str],
             default_pc: str, preemptible: Set[str] = frozenset()) -> tuple[dict | None, str | None]:
        """The job row for a pod, or why it is refused (naming the field, the namespace, the queue)."""
        pod = arrival.pod
        if pod.problems:
            return None, "; ".join(f"{path}: {why}" for path, why in pod.problems)
        group = arrival.group
        if pod.group_name:
            if GANG_NODE_UNIFORMITY_LABEL_ANNOTATION in pod.annotations:
                return None, (f"metadata.annotations.{GANG_NODE_UNIFORMITY_LABEL_ANNOTATION}: a PodGroup's pods are "
                              f"not held to one domain of a node label; name the gang with {GANG_ID_ANNOTATION} and "
                              f"{GANG_CARDINALITY_ANNOTATION} instead, or remove the annotation")
            if arrival.group_problem:
                return None, f"metadata.annotations.scheduling.k8s.io/group-name: {arrival.group_problem}"
            if group is None:
                return None, f"PodGroup {pod.namespace}/{pod.group_name} does not exist (yet)"
            if group.problems:
                return None, "; ".join(group.problems)
            if GANG_ID_ANNOTATION in pod.annotations:
                return None, (f"metadata.annotations: give either scheduling.k8s.io/group-name or "
                              f"{GANG_ID_ANNOTATION}, not both")
        else:
            group = None
        # The queue: the pod's own label, else its PodGroup's spec.queue, else its namespace's label (the most
        # specific word first; a pod and its group disagreeing is refused, since a gang has one queue).
        key = QUEUE_LABEL if pod.labels.get(QUEUE_LABEL) else KUEUE_QUEUE_LABEL
        label = queue_label(pod.labels)
        if label and group is not None and group.queue and group.queue != label:
            return None, (f"metadata.labels.{key}: the pod says queue {label!r}, its PodGroup {group.key} "
                          f"spec.queue says {group.queue!r}; a gang has one queue")
        placed = None
        if label:
            queue_name, where = label, f"pod label {key}"
        elif group is not None and group.queue:
            queue_name, where = group.queue, f"PodGroup {group.key} spec.queue"
        elif arrival.owner_queue:
            queue_name, where = arrival.owner_queue, f"labels of its Job {pod.owner!r}"
        elif arrival.namespace_queue:
            queue_name, where = arrival.namespace_queue, f"label {QUEUE_LABEL} of namespace {pod.namespace!r}"
        else:
            queue_name, made, where = place(self.placement, pod.namespace, queues)
            if queue_name is None:
                return None, (f"no queue: label the pod, its Job or its namespace {pod.namespace!r} with "
                              f"{QUEUE_LABEL}" + (f" (placement rules: {where})" if where else ""))
            if made is not None:
                queues[queue_name] = self._make_queue(made)
            placed = queue_name
        queue = queues.get(queue_name)
        if queue is None:
            return None, f"queue {queue_name!r} (from the {where}) does not exist"
        if queue.retiring is not None:
            return None, f"{retiring_reason(queue_name)} (from the {where})"
        if placed is None and pod.namespace not in queue.namespaces:
            allowed = ", ".join(queue.namespaces) or "none"
            return None, (f"namespace {pod.namespace!r} may not use queue {queue_name!r} (the queue's namespaces: "
                          f"{allowed})")
        if pod.priority_class and group is not None and group.priority_class \
                and group.priority_class != pod.priority_class:
            return None, (f"spec.priorityClassName: the pod says {pod.priority_class!r}, its PodGroup {group.key} "
                          f"spec.priorityClassName says {group.priority_class!r}")
        priority_class = pod.priority_class or (group.priority_class if group is not None else None) or NO_CLASS
        if priority_class not in priority_classes:
            field_path = "spec.priorityClassName" if pod.priority_class or group is None or not group.priority_class \
                else f"PodGroup {group.key} spec.priorityClassName"
            return None, (f"{field_path}: {priority_class!r} is neither a Flotilla priority class nor a PriorityClass "
                          f"of the cluster (known: {', '.join(sorted(priority_classes))})")
        if group is not None and group.preemptable is not None \
                and group.preemptable != (priority_class in preemptible):
            kind = "preemptible" if priority_class in preemptible else "not preemptible"
            wanted = "a preemptible" if group.preemptable else "a non-preemptible"
            return None, (f"PodGroup {group.key} spec.preemptable: {str(group.preemptable).lower()} disagrees with "
                          f"priority class {priority_class!r}, which is {kind} (in Flotilla a priority class says "
                          f"whether its jobs may be preempted: name {wanted} one)")
        annotations = {POD_UID: pod.uid, POD_NAMESPACE: pod.namespace, POD_NAME: pod.name,
                       OWNER_ANNOTATION: pod.namespace}
        if not pod.group_name:
            gang = read_gang_annotations(pod.annotations, unit="pods")
            if gang.problems:
                key, why = gang.problems[0]
                return None, f"metadata.annotations.{key}: {why}"
            if gang.id is not None:
                annotations[GANG_ID_ANNOTATION] = gang.id
                annotations[GANG_CARDINALITY_ANNOTATION] = str(gang.cardinality)
                minimum = pod.annotations.get(GANG_MIN_AVAILABLE_ANNOTATION)
                if minimum is not None:
                    annotations[GANG_MIN_AVAILABLE_ANNOTATION] = minimum
                if gang.uniformity_label:
                    annotations[GANG_NODE_UNIFORMITY_LABEL_ANNOTATION] = gang.uniformity_label
        spec_pod: dict = {"requests": dict(pod.requests)}
        if pod.node_selector:
            spec_pod["nodeSelector"] = dict(pod.node_selector)
        if pod.tolerations:
            spec_pod["tolerations"] = [dict(t) for t in pod.tolerations]
        if pod.host_ports:
            spec_pod["hostPorts"] = [list(p) for p in pod.host_ports]
        if pod.node_affinity:
            spec_pod["nodeAffinity"] = pod.node_affinity
        if pod.labels:
            spec_pod["labels"] = dict(pod.labels)
        spec_pod["namespace"] = pod.namespace
        if pod.pod_rules:
            spec_pod["podRules"] = pod.pod_rules
        if pod.claims:
            spec_pod["claims"] = list(pod.claims)
        job_set = pod.labels.get(JOB_SET_LABEL) or pod.owner or pod.name
        return {
            "id": pod.job_id, "queue": queue_name, "job_set": job_set, "owner": pod.namespace,
            "priority": -pod.priority,   # the pod's Kubernetes priority: higher first in its queue, as PrioritySort
            "priority_class": priority_class, "submitted": pod.submitted, "pods": _dump([spec_pod]), "npods": 1,
            "gang_id": None, "gang_cardinality": None, "gang_pods": None, "grace_period": pod.grace_period,
            "deadline": pod.deadline, "annotations": _dump(annotations),
            "spec": _dump({"cluster": cluster, "pod": {"namespace": pod.namespace, "name": pod.name, "uid": pod.uid}}),
            "pod_namespace": pod.namespace, "pod_name": pod.name, "pod_uid": pod.uid,
        }, None

    # -- why not ---------------------------------------------------------------------------
    def explain(self, backends: Mapping[str, object], decisions, queued: Mapping[str, tuple], scheduled: set[str]
                ) -> None:
        """Tell each waiting pod why: a parked one its refusal, a stored one still queued the scheduler's reason (a
        :class:`~flotilla.core.reasons.Reason`, worded by the backend when it writes) (at most :data:`REPORT_LIMIT`
        per cluster and cycle, taking turns; repeats cost no write)."""
        if decisions is None:
            return
        why = getattr(decisions, "why", None) or decisions.explain
        for name, backend in sorted(self.backends(backends).items()):
            pods = backend.waiting_pods()
            parked = self.parked.get(name, {})
            notes = []
            start = self._report_from.get(name, 0) % max(1, len(pods))
            turn = pods[start:] + pods[:start]
            groups: dict[tuple[str, str], tuple[str, bool]] = {}   # PodGroup -> (why its pods wait, stored)
            for pod in turn[:REPORT_LIMIT]:
                entry = parked.get(pod.uid)
                if entry is not None:
                    if entry[1]:      # refused or waiting for its gang: told why (a gated pod: nothing)
                        notes.append((pod.namespace, pod.name, pod.uid, entry[1]))
                        if pod.group_name:
                            groups.setdefault((pod.namespace, pod.group_name), (entry[1], False))
                    continue
                held = queued.get(pod.job_id)
                if held is None or pod.job_id in scheduled:
                    continue
                notes.append((pod.namespace, pod.name, pod.uid, why(held[1][0])))
                if pod.group_name:
                    groups.setdefault((pod.namespace, pod.group_name), (str(notes[-1][3]), True))
            self._report_from[name] = start + REPORT_LIMIT
            backend.report_waiting(notes)
            backend.report_podgroups(groups)


__all__ = ["ClusterIntake", "REPORT_LIMIT"]
