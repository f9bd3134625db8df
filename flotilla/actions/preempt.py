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

Jobs are tried from the highest priority class down; within one, queues in
fairness order. Only the first ``allocate.lookahead`` queued jobs of each
queue are looked at, as in allocate.
"""

from __future__ import annotations

import time
from itertools import islice

import structlog

from flotilla.core.nodeindex import EVICTED
from flotilla.core.podplacements import pod_refusal
from flotilla.core.extensions import PluginFailed
from flotilla.core.topology import gang_places, place_types
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
        if session.admit(queue, members[0], vec) or any(session.job_valid(m) for m in members):
            return 0
        if members[0].gang is not None and session.gang_ready(members[0].gang, members):
            return 0
        clusters = sorted({t.cluster for t in session.index.types})
        gang = members[0].gang
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
        types, _ = place_types(session, job, cluster)
        if not types:
            return None
        vec = session.vector(job)
        queue = session.queues[job.queue]
        free_node = session.find_node(job, vec, EVICTED, types, queue)
        if free_node is not None:
            stmt.allocate(job, free_node)
            return 0
        priority = session.priority_class(job).priority
        best = None
        fitting = session.index.iter_fitting(vec, priority, types)
        checked = job.pod_rules is not None or bool(session.state.pods.anti)
        for i in list(islice(fitting, session.settings.preempt_max_candidates)):
            if session.node_filter_fns and not all(fn(job, i) for fn in session.node_filter_fns):
                continue
            if checked and pod_refusal(session, job, i) is not None:
                continue  # victims are chosen for room and ports, not to satisfy pod rules
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
        stmt.allocate(job, node)
        return len(victims)

    @staticmethod
    def _victims(session, job, priority, vec, node):
        """Whole eligible jobs on ``node`` that let ``job`` fit, and how many; None if none do.

        Jobs (a gang's or a job's pods together) are taken lowest class first, largest (on this node)
        first within a class, then in victim order.
        """
        eligible = [r for r in session.jobs_on(node) if r.level < priority and session.may_preempt(job, r.job)]
        # The holders of the job's host ports on the node must go, whatever room they free.
        holders = session.state.ports.holders(node, job.host_ports) if job.host_ports else ()
        if holders and not holders <= {r.job.id for r in eligible}:
            return None
        units: dict[str, list] = {}
        for running in eligible:
            gang = running.job.gang
            units.setdefault(gang.id if gang is not None else running.job.id, []).append(running)

        def unit_order(members):
            freed = [sum(col) for col in zip(*(m.vec for m in members))]
            top = max(session.priority_class(m.job).priority for m in members)
            return (top, [-x for x in freed], min(session.victim_key(m) for m in members))

        free = list(session.index.free[node][0])
        chosen = []
        taken = 0
        for members in sorted(units.values(), key=lambda m: (not any(r.job.id in holders for r in m), unit_order(m))):
            if all(a <= f for a, f in zip(vec, free)) and not any(r.job.id in holders for r in members):
                break
            taken += 1
            for running in members:
                chosen.append(running)
                free = [f + a for f, a in zip(free, running.vec)]
        if not all(a <= f for a, f in zip(vec, free)):
            return None
        expanded = {}
        for running in chosen:
            gang = running.job.gang
            members = session.gangs.get(gang.id, []) if gang is not None else [running.job]
            for member in members:
                if member.id in session.running and member.id not in session.preempted:
                    expanded[member.id] = session.running[member.id]
        return list(expanded.values()), taken
