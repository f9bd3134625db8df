"""``allocate``: progressive filling across queues.

Each queue offers its next unit (a job, or a whole gang), evicted jobs first,
then by the job order (priority, then submission time). The unit served next
is the one whose queue would have the smallest share over its fair share if
it got it; ties go to the queue whose name sorts first. When queues form a
tree, that choice is made level by level (:class:`~flotilla.core.queuetree.TreePicker`).
A unit that cannot be placed is passed over (it blocks nothing behind it); a queue is given up
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

The room of an evicted job may be taken only by a job whose priority class
has an equal or higher priority (armada-scheduler.txt: preemption to fair
share happens only for jobs "of equal PC priority"); this holds for new jobs
and for other evicted jobs returning alike.
"""

from __future__ import annotations

import heapq
import time

import structlog

from flotilla.core.nodeindex import EVICTED
from flotilla.core.queuetree import TreePicker
from flotilla.core.session import iter_units

log = structlog.get_logger("flotilla.actions.allocate")


class Allocate:
    name = "allocate"

    def execute(self, session) -> None:
        started = time.perf_counter()
        lookahead = session.settings.lookahead
        levels = session.index.levels
        self.base_level = levels[1] if len(levels) > 1 else EVICTED
        # Evicted jobs are preemptible, so their level is their class's priority.
        self.evicted_top = max((session.running[job_id].level for job_id in session.evicted), default=EVICTED)
        evicted_by_queue: dict[str, list] = {}
        for job in session.evicted.values():
            evicted_by_queue.setdefault(job.queue, []).append(job)

        picker = TreePicker(session) if session.nested else FlatPicker(session)
        passed_over: dict[str, int] = {}
        failed: dict[str, dict[tuple, object]] = {}
        for queue in session.queues.values():
            evicted = evicted_by_queue.get(queue.name, ())
            if not queue.queued and not evicted:
                continue
            units = iter_units(session, queue, evicted)
            passed_over[queue.name] = 0
            failed[queue.name] = {}
            self._offer(session, picker, queue, units)

        self.debug = session.debug
        considered = placed = 0
        while (chosen := picker.pop()) is not None:
            queue, unit, units, vec = chosen
            name = queue.name
            considered += 1
            if self._place(session, queue, unit, vec, failed[name]):
                placed += 1
            elif not self._is_return(session, unit):
                passed_over[name] += 1
                if passed_over[name] >= lookahead:
                    session.unexamined_reason[name] = f"lookahead {lookahead} reached in queue {name}"
                    picker.drop(queue)
                    continue
            self._offer(session, picker, queue, units)

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

    def _offer(self, session, picker, queue, units) -> None:
        unit = next(units, None)
        if unit is None:
            picker.drop(queue)
        else:
            picker.offer(queue, unit, units, self._unit_vector(session, unit))

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
            priority = session.priority_class(job).priority
            if priority >= self.evicted_top:
                node = session.find_node(job, vec, self.base_level, types, queue)
            else:
                node = self._find_over_evicted(session, queue, vec, priority, types)
        return node

    def _find_over_evicted(self, session, queue, vec, priority, types):
        """Smallest fit, tier by tier, in the room of evicted jobs of ``priority`` or lower only."""
        for tier in session.node_tiers_fn(queue):
            for i in session.index.iter_fitting(vec, self.base_level, types):
                if (tier == "any" or session.in_tier(i, tier, queue.name)) and self._fits_over_evicted(session, i, vec, priority):
                    return i
        return None

    def _fits_over_evicted(self, session, node, vec, priority) -> bool:
        """Does ``vec`` fit on ``node`` if only evicted jobs of ``priority`` or lower made way?"""
        index = session.index
        if priority >= self.evicted_top:
            return index.fits_on(node, vec, self.base_level)
        free = list(index.free[node][index.level_of[self.base_level]])
        for job_id, (_, held, level) in index.jobs[node].items():
            if level == EVICTED and session.running[job_id].level > priority:
                for r, amount in enumerate(held):
                    free[r] -= amount
        return all(amount <= room for amount, room in zip(vec, free))

    def _return_evicted(self, session, queue, job, vec) -> bool:
        if session.admit(queue, job, vec):
            return False
        running = session.running[job.id]
        if not self._fits_over_evicted(session, running.node, vec, running.level):
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
                    if not self._fits_over_evicted(session, running.node, member_vec, running.level):
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


class FlatPicker:
    """Allocate's next unit when no queue has a parent: one heap of the queues' offers.

    Same interface as :class:`~flotilla.core.queuetree.TreePicker`: after
    ``pop`` the caller ``offer``s the queue's next unit or ``drop``s the queue.
    """

    def __init__(self, session):
        self.session = session
        self.heap: list[tuple[float, str, object, object, tuple]] = []

    def offer(self, queue, unit, units, vec) -> None:
        # Queue names are unique, so the heap never compares units.
        heapq.heappush(self.heap, (self.session.fair_share_fraction(queue, vec), queue.name, unit, units, vec))

    def drop(self, queue) -> None:
        """Nothing to do: ``pop`` already took the queue's entry."""

    def pop(self):
        heap = self.heap
        while heap:
            fraction, name, unit, units, vec = heapq.heappop(heap)
            queue = self.session.queues[name]
            current = self.session.fair_share_fraction(queue, vec)
            if current > fraction and heap and current > heap[0][0]:
                # A plugin whose costs move with other queues' allocations: re-file and look again.
                heapq.heappush(heap, (current, name, unit, units, vec))
                continue
            return queue, unit, units, vec
        return None
