"""``preempt``: urgency-based preemption, by priority class.

A queued job that did not fit may displace running jobs whose priority class
has a lower priority, when every preemptable plugin agrees the victim may go
(built in: the victim's class is preemptible and of lower priority). A job
whose class does not preempt (``preemptionPolicy: Never``) is not tried.
Victims are whole jobs (volcano-scheduler.txt: "preempt a whole job/PodGroup
with a lower priority instead of several pods from different jobs"): a gang,
or a job's pods, go together. On each node the eligible jobs are taken
lowest priority class first, the largest first within a class (then victim
order), until the job fits. Among the nodes where it would then fit, the one
whose victims' highest class is lowest wins, then the one with the fewest
whole jobs, then the fewest pods. If the job would not fit even
with every eligible victim gone, nothing is preempted.

A job whose pod rules can refuse a node (required pod affinity or
anti-affinity, a ``DoNotSchedule`` spread constraint, or running pods'
anti-affinity selecting it) chooses its victims as kube-scheduler's
DefaultPreemption does (``SelectVictimsOnNode``), whole jobs for pods: on a
node its rules do not refuse for good (a missing topology label, required
affinity unmet), every eligible job is taken off, and the node is a
candidate only if the job then fits and its rules allow it; then the
eligible jobs are given back one by one, the most important first (the
reverse of the order above), each kept running if the job still fits and
its rules still allow the node. So removing a lower-priority pod may satisfy
a spread constraint or an anti-affinity rule. As in kube-scheduler, a node
where the job's required affinity is met only by pods it could preempt is
not a candidate (they are all off when the node is first checked), and
neither is a node with nothing to preempt. Jobs without such rules pay
nothing for this.

Jobs are tried from the highest priority class down; within one, queues in
fairness order. Only the first ``allocate.lookahead`` queued jobs of each
queue are looked at, as in allocate.
"""

from __future__ import annotations

import time
from itertools import islice

import structlog

from flotilla.core.nodeindex import EVICTED
from flotilla.core.extensions import PluginFailed
from flotilla.core.placement import Refused
from flotilla.core.podplacements import AFFINITY_NOT_MATCHED, SPREAD_MISSING_LABEL, pod_checked, pod_refusal
from flotilla.core.topology import gang_places
from flotilla.core.units import iter_units

log = structlog.get_logger("flotilla.actions.preempt")


class Preempt:
    name = "preempt"

    def execute(self, session) -> None:
        started = time.perf_counter()
        session.preempt_evicted()
        preemptible = sorted({pc.priority for pc in session.priority_classes.values() if pc.preemptible})
        if not preemptible or not session.running:
            session.timings[self.name] = time.perf_counter() - started
            return
        lowest = preemptible[0]
        # Only jobs above the lowest preemptible priority may displace anything; a queue's order counts
        # its jobs per priority class, so queues without such jobs are passed over without a look.
        urgent = {name for name, pc in session.priority_classes.items() if pc.priority > lowest and pc.preempts}
        if session.default_priority_class in urgent:
            urgent.add("")
        candidates = []
        failed = session.failed_queues
        for queue in session.queues.values():
            if not queue.queued.has_class(urgent) or queue.name in failed:
                continue
            for position, unit in enumerate(islice(iter_units(session, queue, ()), session.settings.lookahead)):
                if not isinstance(unit, list) and unit.gang is not None:
                    continue  # an elastic gang's member beyond its minimum: only on its gang's cluster, by allocate
                members = unit if isinstance(unit, list) else [unit]
                if any(m.id in session.scheduled_ids for m in members):
                    continue
                classes = [session.priority_classes.get(m.priority_class or session.default_priority_class)
                           for m in members]
                if None in classes:
                    continue  # a class the snapshot does not define: job_valid refused it in allocate, it waits
                if not all(pc.preempts for pc in classes):
                    continue  # preemptionPolicy: Never: it waits for room
                priority = max(pc.priority for pc in classes)
                if priority > lowest:
                    try:
                        rank = session.preempt_rank(queue)
                    except PluginFailed as failure:
                        session.plugin_failed(failure)
                        break
                    candidates.append((-priority, rank, queue.name, position, members))
        candidates = [c for c in candidates if c[2] not in failed]
        candidates.sort(key=lambda c: c[:4])
        preempted = 0
        for _, _, name, _, members in candidates:
            if name in failed:
                continue
            try:
                preempted += self._try(session, session.queues[name], members)
            except PluginFailed as failure:
                # The unit waits with the failure (a queue-scoped one leaves its queue out): no one is displaced.
                session.plugin_failed(failure, members)
        session.counters["preempted_urgency"] += preempted
        session.timings[self.name] = time.perf_counter() - started

    def _try(self, session, queue, members) -> int:
        """Place ``members`` (one job, or a gang on one cluster) by displacing; returns victims taken."""
        vec = tuple(map(sum, zip(*(session.vector(m) for m in members))))
        gang = members[0].gang
        if gang is not None and session.clear_gang(members, queue) is not None:
            return 0
        if gang is None and session.clear(members[0]).__class__ is Refused:
            return 0
        clusters = sorted({t.cluster for t in session.index.types})
        if gang is not None and gang.uniformity_label:
            # A topology gang displaces within one domain of its label, tried in the order allocate tries them.
            level = max(session.priority_class(m).priority for m in members)
            places = gang_places(session, gang, members, clusters, {}, level, vec).places
        else:
            places = clusters if len(members) > 1 else [None]
        for cluster in places:
            stmt = session.statement()
            victims_taken = 0
            try:
                for member in members:
                    taken = self._place_one(session, stmt, member, cluster)
                    if taken is None:
                        break
                    victims_taken += taken
                else:
                    stmt.commit()
                    for member in members:
                        session.failures.pop(member.id, None)
                    return victims_taken
            except PluginFailed:
                stmt.discard()
                raise
            stmt.discard()
        return 0

    def _place_one(self, session, stmt, job, cluster) -> int | None:
        """Place ``job`` (cleared by :meth:`_try`) in ``cluster``, on free room or by displacing; the victims
        taken, or None."""
        vec = session.vector(job)
        queue = session.queues[job.queue]
        # A gang member's types in its gang's place; a lone job's as _try cleared it (their statement places
        # nothing else before it).
        types = session.clear_member(job, cluster) if job.gang is not None else session.clear(job, cluster)
        if types.__class__ is Refused:
            return None
        free_node = session.find_node(job, vec, EVICTED, types, queue)
        if free_node is not None:
            return 0 if stmt.allocate(job, free_node) is None else None
        priority = session.priority_class(job).priority
        best = None
        fitting = session.index.iter_fitting(vec, priority, types)
        ruled = (job.pod_rules is not None or bool(session.state.pods.anti)) and pod_checked(session, job)
        for i in list(islice(fitting, session.settings.preempt_max_candidates)):
            if session.node_filter_fns and not all(fn(job, i) for fn in session.node_filter_fns):
                continue
            if ruled:
                if pod_refusal(session, job, i) in _UNRESOLVABLE:
                    continue
                found = self._ruled_victims(session, job, priority, vec, i)
            else:
                found = self._victims(session, job, priority, vec, i)
            if found is None:
                continue
            victims, units = found
            top = max(session.priority_class(v.job).priority for v in victims) if victims else 0
            score = (top, units, len(victims))
            if best is None or score < best[0]:
                best = (score, i, victims)
        if best is None:
            return None
        _, node, victims = best
        for victim in victims:
            stmt.preempt(victim.job)
            log.debug("preempt", job=victim.job.id, by=job.id, node=session.node_name(node))
        if stmt.allocate(job, node) is not None:
            # The core refuses it there even with the victims gone (a victim's gang mates elsewhere moved what the
            # pod rules count, say): the caller discards.
            return None
        return len(victims)

    @staticmethod
    def _units(session, job, priority, node) -> tuple[dict[str, list], set[str]] | None:
        """The eligible running jobs on ``node`` grouped into whole jobs (a gang's members together), and the
        holders of the job's host ports there (they must go); None if a holder may not be preempted."""
        eligible = [r for r in session.jobs_on(node) if r.level < priority and session.may_preempt(job, r.job)]
        holders = session.state.ports.holders(node, job.host_ports) if job.host_ports else ()
        if holders and not holders <= {r.job.id for r in eligible}:
            return None
        units: dict[str, list] = {}
        for running in eligible:
            gang = running.job.gang
            units.setdefault(gang.id if gang is not None else running.job.id, []).append(running)
        return units, set(holders)

    @staticmethod
    def _unit_order(session, members) -> tuple:
        """Victim order of whole jobs: lowest class first, then the most freed on the node, then victim order."""
        freed = [sum(col) for col in zip(*(m.vec for m in members))]
        top = max(session.priority_class(m.job).priority for m in members)
        return (top, [-x for x in freed], min(session.victim_key(m) for m in members))

    @staticmethod
    def _expand(session, chosen) -> list:
        """The chosen running jobs with their gangs' other members (victims are whole jobs)."""
        expanded = {}
        for running in chosen:
            gang = running.job.gang
            members = session.gangs.get(gang.id, []) if gang is not None else [running.job]
            for member in members:
                if member.id in session.running and member.id not in session.preempted:
                    expanded[member.id] = session.running[member.id]
        return list(expanded.values())

    def _ruled_victims(self, session, job, priority, vec, node):
        """kube-scheduler's dry run on ``node`` for a job whose pod rules may refuse it (module docstring): every
        eligible whole job taken off, then given back most important first where the job still fits and its
        rules still allow the node. Returns ``(victims, whole jobs taken)``, or None."""
        found = self._units(session, job, priority, node)
        if found is None:
            return None
        units, holders = found
        if not units:
            return None
        pods = session.state.pods
        held = {}
        for members in units.values():
            for running in members:
                at = pods.where.get(running.job.id)
                if at is not None:
                    held[running.job.id] = at
                    pods.remove(running.job.id)
        free = list(session.index.free[node][0])
        for members in units.values():
            for running in members:
                free = [f + a for f, a in zip(free, running.vec)]
        try:
            if not all(a <= f for a, f in zip(vec, free)) or pod_refusal(session, job, node) is not None:
                return None
            chosen = []
            taken = 0
            order = sorted(units.values(), key=lambda m: self._unit_order(session, m), reverse=True)
            for members in order:
                if not any(r.job.id in holders for r in members):
                    back = [f - a for f, a in zip(free, map(sum, zip(*(r.vec for r in members))))]
                    if all(a <= f for a, f in zip(vec, back)):
                        for running in members:
                            if running.job.id in held:
                                pods.add(*held[running.job.id])
                        if pod_refusal(session, job, node) is None:
                            free = back
                            continue  # reprieved
                        for running in members:
                            if running.job.id in held:
                                pods.remove(running.job.id)
                taken += 1
                chosen.extend(members)
            return self._expand(session, chosen), taken
        finally:
            for pod_id, (at, pod) in held.items():
                if pod_id not in pods.where:
                    pods.add(at, pod)

    @staticmethod
    def _victims(session, job, priority, vec, node):
        """Whole eligible jobs on ``node`` that let ``job`` fit, and how many; None if none do.

        Jobs (a gang's or a job's pods together) are taken lowest class first, largest (on this node)
        first within a class, then in victim order.
        """
        # The holders of the job's host ports on the node must go, whatever room they free.
        found = Preempt._units(session, job, priority, node)
        if found is None:
            return None
        units, holders = found
        free = list(session.index.free[node][0])
        chosen = []
        taken = 0
        key = Preempt._unit_order
        for members in sorted(units.values(), key=lambda m: (not any(r.job.id in holders for r in m), key(session, m))):
            if all(a <= f for a, f in zip(vec, free)) and not any(r.job.id in holders for r in members):
                break
            taken += 1
            for running in members:
                chosen.append(running)
                free = [f + a for f, a in zip(free, running.vec)]
        if not all(a <= f for a, f in zip(vec, free)):
            return None
        return Preempt._expand(session, chosen), taken


#: A refusal no victim can lift (kube-scheduler's UnschedulableAndUnresolvable): the node is not tried.
_UNRESOLVABLE = (SPREAD_MISSING_LABEL, AFFINITY_NOT_MATCHED)
