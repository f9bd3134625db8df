"""``reserve``: reservation and backfill, so that big units never starve (volcano-scheduler.txt).

A unit (job or gang) that heads its queue, cannot fit, and has waited longer
than ``reservation.after`` since it was last queued reserves the nodes that
would fit it soonest:
those of one cluster whose non-backfill work would end soonest, as many as
hold the unit once emptied. Backfill (preemptible jobs) goes the moment the
unit fits, so only the rest must end by itself; Flotilla knows no job's end
time, so the least non-backfill work held (in resource order) ranks first,
then the least backfill, then the node's position. A node that holds only
backfill therefore comes first, and the unit starts there at once. At most
``reservation.maxUnits`` units hold reservations at once (the longest
waiting first). A job is last queued when it is submitted or when it goes
back to its queue: preempted by a cycle, or gone from the running jobs
between cycles (a lost node, a lease that expired), so a job put back waits
its ``after`` again before it may reserve. Backfill units (any member
preemptible) never reserve: they may run on reserved nodes anyway, and one
reserving would preempt other backfill jobs only to be preempted in turn.

While the reservation holds, no new job starts on a reserved node unless it
is preemptible (backfill): a node filter refuses the others, so the node
drains as its jobs finish. Each cycle, before ``allocate``, the unit is
tried on its reserved nodes as if their preemptible jobs were gone; when it
fits, those backfilled jobs are preempted (as few as it needs, in victim
order) and the unit is placed. Until then its jobs wait with the reason
``waiting for N reserved nodes (node-3, ...)``, passed over by ``allocate``
and ``preempt``. A reservation ends when its unit starts or leaves the head
of its queue.

Put it after ``evict`` and before ``allocate``: ``actions: [evict, reserve,
allocate, preempt, lease]`` with ``reservation: {after: 10m}``. The action
object lives as long as the scheduler: that is what keeps reservations
across cycles.
"""

from __future__ import annotations

import time
from collections import deque

import structlog

from flotilla.core.hostports import HostPorts
from flotilla.core.nodeindex import EVICTED, NONPREEMPTIBLE
from flotilla.core.placement import GANG, JOB, QUEUE, Refused
from flotilla.core.reasons import make
from flotilla.core.topology import every_place, place_types
from flotilla.core.units import iter_units

log = structlog.get_logger("flotilla.actions.reserve")


class Reserve:
    name = "reserve"

    def __init__(self):
        #: Unit key (gang id or job id) -> reserved (cluster, node) names, kept across cycles.
        self.reservations: dict[str, list[tuple[str, str]]] = {}
        #: Job id -> when it last went back to its queue (or stopped running), kept until ``after`` has passed.
        self.requeued: dict[str, float] = {}
        #: ``(time, job id)`` as recorded (times never decrease): what to forget first.
        self._expiry: deque[tuple[float, str]] = deque()
        #: The last cycle's preemptions (its session's dict, complete once that cycle ended) and its time.
        self._last_preempted: tuple[dict, float] | None = None

    def execute(self, session) -> None:
        started = time.perf_counter()
        after = session.settings.reservation_after
        if after is None:
            session.timings[self.name] = time.perf_counter() - started
            return
        self._note_requeued(session, after)
        heads: dict[str, tuple] = {}
        for queue in session.queues.values():
            if queue.queued:
                for unit in iter_units(session, queue, ()):
                    members = unit if isinstance(unit, list) else [unit]
                    key = members[0].gang.id if members[0].gang is not None else members[0].id
                    heads[key] = (queue, members)
                    break
        self.reservations = {key: nodes for key, nodes in self.reservations.items() if key in heads}
        since = {key: self._queued_since(members) for key, (_, members) in heads.items()}
        waiting = sorted(heads.items(), key=lambda kv: (since[kv[0]], kv[0]))
        for key, (queue, members) in waiting:
            if key in self.reservations or len(self.reservations) >= session.settings.reservation_max_units:
                continue
            if session.now - since[key] < after:
                session.wake_at(since[key] + after)   # it may reserve then, with nothing else changed
                continue
            if _is_backfill(session, members) or not self._waits_for_room(session, queue, members):
                continue
            taken = {name for names in self.reservations.values() for name in names}
            nodes = self._choose_nodes(session, members, taken)
            if nodes:
                self.reservations[key] = nodes
                log.info("reserve", unit=key, nodes=[name for _, name in nodes])

        reserved: dict[int, str] = {}
        withheld: dict[str, str] = {}
        position = session.index.position
        for key, names in list(self.reservations.items()):
            queue, members = heads[key]
            nodes = [position[n] for n in names if n in position]
            if len(nodes) == len(names) and self._place_over_backfill(session, queue, members, nodes):
                del self.reservations[key]
                continue
            shown = ", ".join(name for _, name in names[:3]) + (", ..." if len(names) > 3 else "")
            reason = make("reserved_nodes", len(names), "s" * (len(names) != 1), shown)
            for member in members:
                withheld[member.id] = reason
            for i in nodes:
                reserved[i] = key
        if withheld:
            session.set_aside = {**session.set_aside, **withheld}
            session.failures.update(withheld)
        if reserved:
            level_of = session.job_level

            def backfill_only(job, i):
                return i not in reserved or level_of(job) != NONPREEMPTIBLE

            session.add_node_filter(backfill_only)
        session.counters["reserved_units"] = len(self.reservations)
        session.timings[self.name] = time.perf_counter() - started

    # -- helpers ------------------------------------------------------------
    def _note_requeued(self, session, after: float) -> None:
        """Record the jobs that went back to their queues since the last cycle; forget those ``after`` ago."""
        now, requeued, expiry = session.now, self.requeued, self._expiry
        if self._last_preempted is not None:
            preempted, when = self._last_preempted
            for job_id in preempted:
                requeued[job_id] = when
                expiry.append((when, job_id))
        # The session's own dict: later actions of this cycle fill it; read at the next cycle.
        self._last_preempted = (session.preempted, now)
        for job_id in session.state.stopped_running:
            requeued[job_id] = now
            expiry.append((now, job_id))
        while expiry and now - expiry[0][0] >= after:
            when, job_id = expiry.popleft()
            if requeued.get(job_id) == when:
                del requeued[job_id]

    def _queued_since(self, members) -> float:
        """When the unit was last queued: the latest of its members' submissions and returns to the queue."""
        requeued = self.requeued
        return max(max(m.submitted, requeued.get(m.id, m.submitted)) for m in members)

    @staticmethod
    def _waits_for_room(session, queue, members) -> bool:
        """Whether the unit waits for room alone: the core clears it (gang, validity, queue admission, node
        types) and it fits in free space nowhere right now (on one cluster, one domain for a topology gang),
        tried through the placement primitive and undone."""
        gang = _gang(members)
        refused = session.clear_gang(members, queue) if gang else None
        if refused is not None:
            return False
        for place in every_place(session, members[0].gang, sorted({t.cluster for t in session.index.types})):
            stmt = session.statement()
            for member in members:
                types = session.clear_member(member, place) if gang else session.clear(member, place)
                if types.__class__ is Refused:
                    if types.stage in (GANG, JOB, QUEUE):
                        stmt.discard()
                        return False
                    break
                node = session.find_node(member, session.vector(member), EVICTED, types, queue)
                if node is None or stmt.allocate(member, node) is not None:
                    break
            else:
                stmt.discard()
                return False
            stmt.discard()
        return True

    @staticmethod
    def _choose_nodes(session, members, taken) -> list[tuple[str, str]]:
        """The nodes of one cluster (one domain for a topology gang) with the least running on them that would
        hold the unit once emptied.

        Nodes another unit has reserved (``taken``, by cluster and name) are not shared.
        """
        index = session.index
        best = None
        for place in every_place(session, members[0].gang, sorted({t.cluster for t in index.types})):
            cluster = place.cluster
            allowed = [session.interned_types(place_types(session, m, place)[0]) for m in members]
            types = set().union(*allowed)
            nodes = [i for i, node in enumerate(index.nodes)
                     if node.cluster == cluster and (node.cluster, node.name) not in taken
                     and index.type_of[i] in types]
            # Soonest free: the least non-backfill work (which must end by itself), then the least backfill
            # (preempted the moment the unit fits), in resource order, then the node's position.
            load = {i: _load(session, i) for i in nodes}
            nodes.sort(key=lambda i: (load[i], i))
            chosen: list[int] = []
            for i in nodes:
                if not any(session.node_refusal(m, i, a) is None for m, a in zip(members, allowed)):
                    continue  # no member may go there whatever runs on it (node filters, held host ports, ...)
                chosen.append(i)
                if _first_fit(session, members, chosen, allowed, {j: list(index.allocatable[j]) for j in chosen}):
                    cost = tuple(tuple(map(sum, zip(*(load[j][part] for j in chosen)))) for part in (0, 1))
                    if best is None or (len(chosen), cost) < best[0]:
                        best = ((len(chosen), cost), [index.nodes[j] for j in chosen])
                    break
        return [(node.cluster, node.name) for node in best[1]] if best else []

    @staticmethod
    def _place_over_backfill(session, queue, members, nodes) -> bool:
        """Place the unit on its nodes if preempting their preemptible jobs makes room; True when placed.

        Each member is placed through the placement primitive after its
        node's victims are preempted (the holders of its host ports there
        first, then as few as its room needs, in victim order); a refusal
        undoes the whole unit.
        """
        index = session.index
        cluster = index.nodes[nodes[0]].cluster
        gang = _gang(members)
        if gang:
            if session.clear_gang(members, queue) is not None:
                return False
            allowed = [session.clear_member(m, cluster) for m in members]
        else:
            allowed = [session.clear(members[0], cluster)]
        if any(types.__class__ is Refused for types in allowed):
            return False
        removable = {i: [r for r in session.jobs_on(i) if r.level != NONPREEMPTIBLE] for i in nodes}
        room = {}
        for i in nodes:
            free = list(index.free[i][0])
            for running in removable[i]:
                for r, amount in enumerate(running.vec):
                    free[r] += amount
            room[i] = free
        assignment = _first_fit(session, members, nodes, allowed, room, removable)
        if assignment is None:
            return False
        stmt = session.statement()
        gone: set[str] = set()
        for member, i in assignment:
            vec = session.vector(member)
            holders = session.state.ports.holders(i, member.host_ports) if member.host_ports else ()
            victims = [r for r in removable[i] if r.job.id not in gone and r.job.id not in session.preempted]
            victims.sort(key=lambda r: (r.job.id not in holders, session.victim_key(r)))
            while victims and (not index.fits_on(i, vec, EVICTED) or victims[0].job.id in holders):
                victim = victims.pop(0)
                gone.add(victim.job.id)
                stmt.preempt(victim.job)
            if gang:
                session.clear_member(member, cluster)
            elif session.clear(member, cluster).__class__ is Refused:
                stmt.discard()
                return False
            if stmt.allocate(member, i) is not None:
                stmt.discard()
                return False
        stmt.commit()
        log.info("reserve.placed", unit=members[0].gang.id if members[0].gang else members[0].id,
                 preempted=sum(1 for op in stmt.ops if op[0] == "preempt"))
        return True


def _load(session, i) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """What node ``i`` holds: (its non-backfill work, everyone else's pods included; its backfill), as vectors."""
    index = session.index
    held = [a - f for a, f in zip(index.allocatable[i], index.free[i][0])]
    backfill = [0] * len(held)
    for running in session.jobs_on(i):
        if running.level != NONPREEMPTIBLE:
            for r, amount in enumerate(running.vec):
                backfill[r] += amount
    return tuple(h - b for h, b in zip(held, backfill)), tuple(backfill)


def _is_backfill(session, members) -> bool:
    """Whether some member is preemptible (a class the snapshot does not define counts as not)."""
    classes, default = session.priority_classes, session.default_priority_class
    for member in members:
        pc = classes.get(member.priority_class or default)
        if pc is not None and pc.preemptible:
            return True
    return False


def _gang(members) -> bool:
    """Whether the unit is a gang's members placed together (not one job, nor an elastic gang's extra member)."""
    return len(members) > 1 or (members[0].gang is not None and not members[0].gang.min_available)


def _first_fit(session, members, nodes, allowed, room, removable=None):
    """Members onto ``nodes`` (each with ``room``, changed in place), first fit; ``[(member, node)]`` or None.

    A member goes only on a node the placement primitive lets it use but
    for room (:meth:`~flotilla.core.placement.Placing.node_refusal`: its
    node types, node filters, host ports, claims, pod rules), and not on
    a node where an earlier member of the unit takes one of its host ports.
    With ``removable`` (node -> running jobs that would make way), a host
    port held only by those does not count as held.
    """
    out = []
    taken = HostPorts()  # the unit's own host ports, per node of this fit
    making_way = {i: frozenset(r.job.id for r in jobs) for i, jobs in removable.items()} if removable else {}
    for member, types in zip(members, allowed):
        vec = session.vector(member)
        ports = member.host_ports
        for i in nodes:
            free = room[i]
            if not all(a <= f for a, f in zip(vec, free)):
                continue
            if ports and not taken.free(i, ports):
                continue
            if session.node_refusal(member, i, types, making_way.get(i, frozenset())) is not None:
                continue
            for r, amount in enumerate(vec):
                free[r] -= amount
            taken.add(i, member.id, ports)
            out.append((member, i))
            break
        else:
            return None
    return out
