"""``allocate``: progressive filling across queues.

Each queue offers its next unit (a job, or a whole gang), evicted jobs first,
then by the job order (priority, then submission time). The unit served next
is the one whose queue would have the smallest ``queue_order`` key (the
fairness policy's: for asset fairness, its share over its fair share) if it
got it; ties go to the queue whose name sorts first. When queues form a
tree, that choice is made level by level (:class:`~flotilla.actions.pickers.TreePicker`).
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

A plugin that fails while a unit is placed (:class:`~flotilla.core.extensions.PluginFailed`)
is caught once per unit, not per node: a job-scoped failure leaves the
unit's jobs waiting with its reason (passed over, as a unit that does not
fit), a queue-scoped one (``node_tiers``, ``queue_order``) leaves the queue
out of the rest of the cycle. Whatever the unit had taken is given back.
"""

from __future__ import annotations

import time

import structlog

from flotilla.core.extensions import PluginFailed
from flotilla.core.nodeindex import EVICTED
from flotilla.core.podplacements import pod_checked
from flotilla.actions.pickers import FlatPicker, TreePicker
from flotilla.core.topology import GangPlace, gang_places, no_domain_reason
from flotilla.core.units import KnownMisfits, QueueUnits
from flotilla.core.whynot import Shortfall
from flotilla.core.placement import GANG, JOB, Refused
from flotilla.core.reasons import make
from flotilla.plugin import take_args

log = structlog.get_logger("flotilla.actions.allocate")


class _QueueRun:
    """One queue's progress through allocate: its units, how many were passed over, what it knows fails."""

    __slots__ = ("queue", "units", "passed", "misfits", "covers_all")

    def __init__(self, queue, units, covers_all: bool, ahead: set[str], affinity: bool = False):
        self.queue = queue
        self.units = units
        self.passed = 0
        #: (requests, priority class, node selector, tolerations) by identity -> the failure recorded.
        #: Jobs with node affinity or host ports are never recorded (their key leaves those out).
        self.misfits = KnownMisfits(ahead, affinity)
        #: Whether the queue's node tiers cover every node, so "no node fits" is true for every queue.
        self.covers_all = covers_all


def requirements_key(job) -> tuple:
    """What decides where a job may go, by object identity (bulk-loaded jobs share these objects).

    Two jobs of one queue with the same key have the same vector and the same
    node types, so the failure of one is the failure of the other.
    """
    selector = job.node_selector
    return id(job.requests), job.priority_class, id(selector) if selector else 0, id(job.tolerations)




class Allocate:
    """The ``allocate`` action; ``args``: ``lookahead`` (default: the config's ``allocate.lookahead``)."""

    name = "allocate"

    def __init__(self, args=None):
        lookahead = take_args(args, lookahead=None)["lookahead"]
        if lookahead is not None and (isinstance(lookahead, bool) or not isinstance(lookahead, int) or lookahead < 1):
            raise ValueError(f"lookahead: expected a whole number of at least 1, got {lookahead!r}")
        #: Units a queue may pass over before it is given up on for the cycle; None: the config's.
        self.lookahead_arg: int | None = lookahead

    def execute(self, session) -> None:
        started = time.perf_counter()
        self.lookahead = self.lookahead_arg or session.settings.lookahead
        levels = session.index.levels
        self.base_level = levels[1] if len(levels) > 1 else EVICTED
        # Evicted jobs are preemptible, so their level is their class's priority.
        self.evicted_top = max((session.running[job_id].level for job_id in session.evicted), default=EVICTED)
        self.debug = session.debug
        self.skipped = 0
        valid_fns = session.job_valid_fns
        # One validity check (the usual case) is called directly: same answer, one call less per job.
        self.job_valid = (valid_fns[0] if len(valid_fns) == 1 else session.job_valid) if valid_fns else None
        #: (vector, node types) that found no node at any level: free space only shrinks during allocate.
        self.shapes_without_room: set[tuple] = set()
        #: Gangs placed this cycle -> where (their cluster, and their domain for a topology gang).
        self.gang_places: dict[str, GangPlace] = {}
        evicted_by_queue: dict[str, list] = {}
        for job in session.evicted.values():
            evicted_by_queue.setdefault(job.queue, []).append(job)

        # Skips recorded by an earlier allocate of this cycle go into the failures before this one writes any.
        session.flush_passed_over()
        had_failures = bool(session.failures)
        #: Jobs placed this cycle that may lie ahead in their queue: by earlier actions, and gang members.
        self.ahead = ahead = set(session.scheduled_ids)
        self.picker = picker = TreePicker(session) if session.nested else FlatPicker(session)
        affinity = session.state.affinity_jobs > 0
        failed = session.failed_queues
        for queue in session.queues.values():
            evicted = evicted_by_queue.get(queue.name, ())
            if not queue.queued and not evicted or queue.name in failed:
                continue
            try:
                tiers = set(session.node_tiers_fn(queue))
            except PluginFailed as failure:
                session.plugin_failed(failure)
                continue
            # A shape with no node is none for every queue when the tiers cover all nodes and no node filter
            # (they answer per job) applies.
            shared = ("any" in tiers or {"unused", "used"} <= tiers) and not session.node_filter_fns
            run = _QueueRun(queue, QueueUnits(session, queue, evicted), shared, ahead, affinity)
            self._offer(session, picker, run)

        considered = 0
        while (chosen := picker.pop()) is not None:
            queue, unit, run, vec = chosen
            considered += 1
            try:
                placed = self._place(session, run, unit, vec)
            except PluginFailed as failure:
                session.plugin_failed(failure, unit if unit.__class__ is list else (unit,))
                placed = False
                if failure.scope == "queue":
                    session.fail_queue(queue.name, failure.why)
                    picker.drop(queue)
                    continue
            if not placed and not self._is_return(session, unit):
                if self._pass_over(session, run):
                    picker.drop(queue)
                    continue
            self._offer(session, picker, run)

        if had_failures:
            # A failure an earlier action recorded for a job passed over here must read as the pass-over's.
            session.flush_passed_over()
        session.preempt_evicted()
        # Known misfits passed over count as considered too; "skipped" says how many of them there were.
        session.counters["considered"] += considered + self.skipped
        session.counters["skipped"] += self.skipped
        session.counters["scheduled"] = len(session.scheduled)
        session.timings[self.name] = time.perf_counter() - started

    # -- helpers --------------------------------------------------------------
    def _bulk_valid(self, job) -> str | None:
        """``job_valid`` for a run of known misfits: a failure stops the run before the job (read on its own)."""
        try:
            return self.job_valid(job)
        except PluginFailed as failure:
            return failure.why

    def _pass_over(self, session, run) -> bool:
        """Count a unit passed over; True when the queue has used up its lookahead."""
        run.passed += 1
        if run.passed >= self.lookahead:
            name = run.queue.name
            session.unexamined_reason[name] = make("lookahead", self.lookahead, name)
            return True
        return False

    @staticmethod
    def _unit_vector(session, unit):
        if unit.__class__ is not list:
            return session.space.vector(unit.requests)
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

    def _offer(self, session, picker, run) -> None:
        """Offer the queue's next unit to the picker, passing over known misfits on the way.

        A queued job whose requirements already failed in this queue this
        cycle cannot fit now either (free space only shrinks during allocate
        and queue usage only grows), so it is recorded with the same failure
        and passed over here, without a heap entry, a cost computation or a
        node search. Runs of them are passed over in bulk
        (:meth:`~flotilla.core.units.QueueUnits.skip_known`); what does not
        fit a run (a gang, an evicted job, a job an earlier action placed) is
        read one unit at a time.
        """
        units, misfits, evicted, failures = run.units, run.misfits, session.evicted, session.failures
        known = misfits.by_key
        job_valid = self.job_valid
        valid_fns = session.job_valid_fns
        # In a run of known misfits, a check that answers by priority class alone (part of the key) needs no
        # call: the key's first job passed it.
        bulk_valid = None if all(getattr(fn, "by_priority_class", False) for fn in valid_fns) else \
            self._bulk_valid
        lookahead = self.lookahead
        passed = run.passed
        skipped = 0
        offered = None
        while True:
            if known and units.queued_phase():
                bulk = units.skip_known(misfits, lookahead - passed, bulk_valid)
                if bulk:
                    session.pass_over(bulk, misfits)
                    skipped += len(bulk)
                    passed += len(bulk)
                    if passed >= lookahead:
                        # The last one passed over used up the lookahead: _pass_over records why the queue stops.
                        run.passed = passed - 1
                        self._pass_over(session, run)
                        break
            unit = units.next()
            if unit is None:
                run.passed = passed
                break
            if known and unit.__class__ is not list and unit.id not in evicted:
                selector = unit.node_selector  # requirements_key(unit), inlined: this loop is per job
                failure = known.get((id(unit.requests), unit.priority_class, id(selector) if selector else 0,
                                     id(unit.tolerations)))
                if failure is not None and unit.affinity is None:
                    try:
                        refused = job_valid is not None and job_valid(unit)
                    except PluginFailed:
                        refused = True   # offered on its own: placing it meets the failure again, and records it
                    if not refused:
                        failures[unit.id] = failure
                        skipped += 1
                        passed += 1
                        if passed < lookahead:
                            continue
                        run.passed = passed - 1
                        self._pass_over(session, run)
                        break
            run.passed = passed
            offered = unit
            break
        self.skipped += skipped
        if offered is None:
            picker.drop(run.queue)
        else:
            picker.offer(run.queue, offered, run, self._unit_vector(session, offered))

    def _place(self, session, run, unit, vec) -> bool:
        queue = run.queue
        if unit.__class__ is list:
            return self._place_gang(session, queue, unit, vec)
        job = unit
        if job.gang is not None:
            return self._place_elastic_member(session, queue, job, vec)
        if job.id in session.evicted:
            return self._return_evicted(session, queue, job, vec)
        types = session.clear(job)
        if types.__class__ is Refused:
            session.failures[job.id] = reason = types.why
            if types.stage is not JOB and job.affinity is None and not job.claims:
                run.misfits.by_key[requirements_key(job)] = reason
            return False
        shape = (vec, id(types))
        if run.covers_all and shape in self.shapes_without_room:
            node = None
        else:
            node = self._find(session, queue, job, vec, types)
        if node is None and (job.host_ports or job.claims or ((job.pod_rules is not None or session.state.pods.anti)
                                                              and pod_checked(session, job))):
            # Its ports, claims or pod rules (or held pods' anti-affinity selecting it), not its key, may be what
            # failed: jobs of the same key are not misfits.
            session.failures[job.id] = Shortfall(vec, EVICTED, types, job)
            return False
        if node is None:
            session.failures[job.id] = failure = Shortfall(vec, EVICTED, types, job)
            if job.affinity is None:  # its types are its affinity's: not those of its key's other jobs
                run.misfits.by_key[requirements_key(job)] = failure
            if run.covers_all:
                self.shapes_without_room.add(shape)
            return False
        refused = session.place(job, node)
        if refused is not None:
            session.failures[job.id] = refused.why
            return False
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
                node = self._find_over_evicted(session, queue, job, vec, priority, types)
        return node

    def _find_over_evicted(self, session, queue, job, vec, priority, types):
        """Smallest fit, tier by tier, in the room of evicted jobs of ``priority`` or lower only."""
        for tier in session.node_tiers_fn(queue):
            for i in session.index.iter_fitting(vec, self.base_level, types):
                if (tier == "any" or session.in_tier(i, tier, queue.name)) and session.node_allowed(job, i) \
                        and self._fits_over_evicted(session, i, vec, priority):
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

    def _elastic_cluster(self, session, gang) -> tuple[GangPlace | None, str | None]:
        """Where an elastic gang runs (its cluster, and its domain for a topology gang), or why its other
        members cannot go yet."""
        place = self.gang_places.get(gang.id)
        if place is None:
            for member in session.gangs[gang.id]:
                if member.id in session.running and member.id not in session.evicted:
                    node = session.index.nodes[session.running[member.id].node]
                    label = gang.uniformity_label
                    place = GangPlace(node.cluster, label, node.labels.get(label, "") if label else "")
                    break
        if place is None:
            return None, make("gang_minimum", gang.id, gang.min_available)
        return place, None

    def _place_elastic_member(self, session, queue, job, vec) -> bool:
        """One member of an elastic gang beyond its minimum: on the gang's cluster (and domain), when there is room."""
        place, why = self._elastic_cluster(session, job.gang)
        if why is None and job.id in session.evicted:
            return self._return_evicted(session, queue, job, vec)
        types = session.clear(job, place) if why is None else Refused(GANG, why)
        if types.__class__ is Refused:
            if job.id not in session.evicted:
                session.failures[job.id] = types.why
            return False
        node = self._find(session, queue, job, vec, types)
        if node is None:
            cluster = place if place is None or place.__class__ is str else place.cluster
            session.failures[job.id] = Shortfall(vec, EVICTED, types, job, cluster)
            return False
        refused = session.place(job, node)
        if refused is not None:
            session.failures[job.id] = refused.why
            return False
        return True

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
        refused = session.clear_gang(members, queue)
        if refused is not None:
            for member in members:
                if member.id not in session.evicted:
                    session.failures[member.id] = refused.why
            return False
        evicted = [m for m in members if m.id in session.evicted]
        clusters = sorted({session.node_name(session.running[m.id].node)[0] for m in evicted}) if evicted else \
            sorted({node_type.cluster for node_type in session.index.types})
        if gang.min_available:
            running, _ = self._elastic_cluster(session, gang)
            if running is not None:
                clusters = [running.cluster]
        # A topology gang tries the domains of its label, tightest first; any other gang each cluster whole.
        domains = gang_places(session, gang, members, clusters, self.gang_places, demand=vec) \
            if gang.uniformity_label else None
        places = domains.places if domains is not None else [GangPlace(cluster) for cluster in clusters]
        best = 0
        for place in places:
            stmt = session.statement()
            placed = 0
            try:
                for member in members:
                    member_vec = session.vector(member)
                    if member.id in session.evicted:
                        running = session.running[member.id]
                        if not self._fits_over_evicted(session, running.node, member_vec, running.level):
                            break
                        stmt.unevict(member)
                    else:
                        types = session.clear_member(member, place)
                        if types.__class__ is Refused:
                            break
                        node = self._find(session, queue, member, member_vec, types)
                        if node is None or session.place(member, node, stmt) is not None:
                            break
                    placed += 1
            except PluginFailed:
                stmt.discard()   # the members placed so far go back: the gang waits whole
                raise
            if placed == len(members):
                stmt.commit()
                self.ahead.update(member.id for member in members)
                if any(member.queue != queue.name for member in members):
                    # Members of other queues changed those queues' allocations: their offers are recomputed.
                    self.picker.steady = False
                self.gang_places[gang.id] = place
                log.debug("allocate.gang", gang=gang.id, queue=queue.name, place=str(place), members=placed)
                return True
            stmt.discard()
            best = max(best, placed)
            if domains is not None:
                domains.failed(placed, len(members))
        reason = no_domain_reason(gang, len(members), domains) if domains is not None else \
            make("gang_fit", gang.id, best, len(members))
        for member in members:
            if member.id not in session.evicted:
                session.failures[member.id] = reason
        return False
