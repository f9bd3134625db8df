"""``allocate``: progressive filling across queues.

Each queue offers its next unit (a job, or a whole gang), evicted jobs first,
then by the job order (priority, then submission time). The unit served next
is the one whose queue would have the smallest share over its fair share if
it got it; ties go to the queue whose name sorts first. A unit that cannot
be placed is passed over (it blocks nothing behind it); a queue is given up
on for this cycle after ``allocate.lookahead`` units were passed over.
Evicted jobs that cannot return to their node do not count as passed over
(as in Armada, re-scheduled jobs do not count towards the limit): each has
one node to try, and counting them cut queues off below their fair share.

Placing a new job takes two passes over the node tiers the node-order plugin
asks for (per-queue best fit: the queue's own nodes, unused nodes, then the
rest; the least free space that fits within each): first without touching
the room of evicted jobs, then taking it if it must. An evicted job may only
return to its own node. Evicted jobs that do not return become preemptions
when the action ends, which frees their room for ``preempt``.
"""

from __future__ import annotations

import heapq
import time

import structlog

from flotilla.core.nodeindex import EVICTED
from flotilla.core.session import iter_units

log = structlog.get_logger("flotilla.actions.allocate")


class Allocate:
    name = "allocate"

    def execute(self, session) -> None:
        started = time.perf_counter()
        lookahead = session.settings.lookahead
        levels = session.index.levels
        self.base_level = levels[1] if len(levels) > 1 else EVICTED
        evicted_by_queue: dict[str, list] = {}
        for job in session.evicted.values():
            evicted_by_queue.setdefault(job.queue, []).append(job)

        heap: list[tuple[float, str, object, object]] = []
        passed_over: dict[str, int] = {}
        failed: dict[str, dict[tuple, object]] = {}
        for queue in session.queues.values():
            evicted = evicted_by_queue.get(queue.name, ())
            if not queue.queued and not evicted:
                continue
            units = iter_units(session, queue, evicted)
            passed_over[queue.name] = 0
            failed[queue.name] = {}
            self._offer(session, heap, queue, units)

        self.debug = session.debug
        considered = placed = 0
        while heap:
            fraction, name, unit, units = heapq.heappop(heap)
            queue = session.queues[name]
            vec = self._unit_vector(session, unit)
            current = session.fair_share_fraction(queue, vec)
            if current > fraction and heap and current > heap[0][0]:
                # A plugin whose costs move with other queues' allocations: re-file and look again.
                heapq.heappush(heap, (current, name, unit, units))
                continue
            considered += 1
            if self._place(session, queue, unit, vec, failed[name]):
                placed += 1
            elif not self._is_return(session, unit):
                passed_over[name] += 1
                if passed_over[name] >= lookahead:
                    session.unexamined_reason[name] = f"lookahead {lookahead} reached in queue {name}"
                    continue
            self._offer(session, heap, queue, units)

        session.preempt_evicted()
        session.counters["considered"] += considered
        session.counters["scheduled"] = len(session.scheduled)
        session.timings[self.name] = time.perf_counter() - started

    # -- helpers --------------------------------------------------------------
    @staticmethod
    def _unit_vector(session, unit):
        if isinstance(unit, list):
            total = [0] * len(session.space)
            for job in unit:
                for r, amount in enumerate(session.vector(job)):
                    total[r] += amount
            return tuple(total)
        return session.vector(unit)

    @staticmethod
    def _is_return(session, unit) -> bool:
        """Whether ``unit`` is evicted jobs going back to their own nodes only.

        Such a unit has one node per job to try, so a failure is cheap and
        does not count towards the lookahead: counting it would let a queue
        whose evicted jobs lost their room run out of lookahead before its
        remaining evicted jobs (which may still fit) are offered, and the
        queue would end below its fair share.
        """
        if isinstance(unit, list):
            return all(member.id in session.evicted for member in unit)
        return unit.id in session.evicted

    def _offer(self, session, heap, queue, units) -> None:
        unit = next(units, None)
        if unit is None:
            return
        fraction = session.fair_share_fraction(queue, self._unit_vector(session, unit))
        # Queue names are unique, so the heap never compares units.
        heapq.heappush(heap, (fraction, queue.name, unit, units))

    def _place(self, session, queue, unit, vec, failed) -> bool:
        if isinstance(unit, list):
            return self._place_gang(session, queue, unit, vec)
        job = unit
        if job.id in session.evicted:
            return self._return_evicted(session, queue, job, vec)
        reason = session.job_valid(job)
        if reason:
            session.failures[job.id] = reason
            return False
        types, why = session.allowed_types(job)
        key = (vec, id(types))
        hit = failed.get(key)
        if hit is not None:
            session.failures[job.id] = hit
            return False
        reason = session.admit(queue, job, vec) or why
        if reason:
            failed[key] = session.failures[job.id] = reason
            return False
        node = self._find(session, queue, job, vec, types)
        if node is None:
            failed[key] = session.failures[job.id] = (vec, EVICTED, types)
            return False
        stmt = session.statement()
        stmt.allocate(job, node)
        stmt.commit()
        if self.debug:
            log.debug("allocate", job=job.id, queue=queue.name, node=session.node_name(node))
        return True

    def _find(self, session, queue, job, vec, types):
        node = session.find_node(job, vec, EVICTED, types, queue)
        if node is None and session.evicted:
            node = session.find_node(job, vec, self.base_level, types, queue)
        return node

    def _return_evicted(self, session, queue, job, vec) -> bool:
        if session.admit(queue, job, vec):
            return False
        running = session.running[job.id]
        if not session.index.fits_on(running.node, vec, self.base_level):
            return False
        stmt = session.statement()
        stmt.unevict(job)
        stmt.commit()
        if self.debug:
            log.debug("allocate.return", job=job.id, queue=queue.name, node=session.node_name(running.node))
        return True

    def _place_gang(self, session, queue, members, vec) -> bool:
        gang = members[0].gang
        reason = session.gang_ready(gang, members) or session.admit(queue, members[0], vec)
        if not reason:
            invalid = [(m, session.job_valid(m)) for m in members]
            reason = next((f"gang {gang.id}: {m.id}: {why}" for m, why in invalid if why), None)
        if reason:
            for member in members:
                if member.id not in session.evicted:
                    session.failures[member.id] = reason
            return False
        evicted = [m for m in members if m.id in session.evicted]
        clusters = sorted({session.node_name(session.running[m.id].node)[0] for m in evicted}) if evicted else \
            sorted({node_type.cluster for node_type in session.index.types})
        best = 0
        for cluster in clusters:
            stmt = session.statement()
            placed = 0
            for member in members:
                member_vec = session.vector(member)
                if member.id in session.evicted:
                    running = session.running[member.id]
                    if not session.index.fits_on(running.node, member_vec, self.base_level):
                        break
                    stmt.unevict(member)
                else:
                    types, _ = session.allowed_types(member, cluster)
                    node = self._find(session, queue, member, member_vec, types) if types else None
                    if node is None:
                        break
                    stmt.allocate(member, node)
                placed += 1
            if placed == len(members):
                stmt.commit()
                log.debug("allocate.gang", gang=gang.id, queue=queue.name, cluster=cluster, members=placed)
                return True
            stmt.discard()
            best = max(best, placed)
        reason = f"gang {gang.id}: {best} of {len(members)} members fit"
        for member in members:
            if member.id not in session.evicted:
                session.failures[member.id] = reason
        return False

