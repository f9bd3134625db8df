"""The placement primitive: may this job go on this node now, and placing it, every rule in one order.

A mixin of :class:`~flotilla.core.session.Session`. Every action that
starts a queued job goes through it, built in or from another package: the
only way to put a job on a node is :meth:`Placing.place` (or a statement's
``allocate``, which calls it), and it refuses what the rules refuse, so no
action can place around them. The rules, in the order they are asked:

1. ``gang``: a gang's members go together; one member alone only once its
   gang has started (an elastic gang's members beyond its minimum);
   the plugins' ``gang_ready`` rules;
2. ``job``: the job is valid (``job_valid``: its priority class is known, ...);
3. ``queue``: its queue admits it (queue limits, then the plugins'
   ``queue_admit``; a gang's members are admitted together, as their sum);
4. ``nodes``: the node types it may use: unschedulable nodes, untolerated
   taints, node selector and required node affinity
   (:mod:`flotilla.core.feasibility`), the plugins' predicates, its
   claims' nodes, and for a gang member its gang's place (cluster or
   topology domain);
5. ``node``: on the node itself: its host ports are free, its claims can be
   had there, its pod rules and the held pods' anti-affinity allow it, and
   every node filter agrees (:meth:`~flotilla.core.registry.ExtensionRegistry.node_allowed`);
6. ``fit``: its requests fit the node's free space, counting the room of
   jobs evicted this cycle whose priority is not above its own.

Steps 1 to 4 are about the job and do not depend on the node: an action
asks them once with :meth:`Placing.clear` (one job) or
:meth:`Placing.clear_gang` and :meth:`Placing.clear_member` (a gang), gets
the node types to search, finds a node, and places the job there;
:meth:`Placing.place` then asks 5 and 6 only (a job it was not asked about
before is asked 1 to 4 first). A clearance holds until the next placement
outside the gang it was given for (a placement changes what queues hold).

Every refusal is one type, :class:`Refused`: the step that refused (its
``stage``) and the reason, a :class:`~flotilla.core.reasons.Reason` (or a
plugin's words), worded only when shown (a shortfall of room is counted when
asked, :class:`~flotilla.core.whynot.Shortfall`).
Refusals are returned, not raised: a search tries many nodes and most
tries fail.
"""

from __future__ import annotations

from typing import Sequence

from flotilla.core.feasibility import PORTS_TAKEN, FILTERED
from flotilla.core.model import Job
from flotilla.core.nodeindex import EVICTED
from flotilla.core.podplacements import pod_refusal
from flotilla.core.reasons import NO_NODES, code_of, insufficient, make, on_node
from flotilla.core.statement import place as _place_now
from flotilla.core.topology import place_types
from flotilla.core.volumes import BIND_CONFLICT

#: The steps of the module docstring, as a refusal names them.
GANG, JOB, QUEUE, NODES, NODE, FIT = "gang", "job", "queue", "nodes", "node", "fit"
STAGES = (GANG, JOB, QUEUE, NODES, NODE, FIT)


class Refused(Exception):
    """The core refused a placement: at which step (``stage``, one of :data:`STAGES`) and why: ``why``, a
    :class:`~flotilla.core.reasons.Reason` (or a plugin's words); ``code``, its code; ``reason``, its words.

    An exception type so that an action may raise it as it is; the core
    returns it.
    """

    __slots__ = ("stage", "why")

    def __init__(self, stage: str, why):
        super().__init__(stage, why)
        self.stage = stage
        self.why = why

    @property
    def reason(self) -> str:
        """Why, in words (made when asked)."""
        return str(self.why)

    @property
    def code(self) -> str:
        """Why, as a code (:data:`~flotilla.core.reasons.CODES`)."""
        return code_of(self.why)

    def __str__(self) -> str:
        return f"{self.stage}: {self.reason}"

    def __repr__(self) -> str:
        return f"Refused({self.stage!r}, {self.why!r})"


class Placing:
    """The placement primitive (a mixin of Session); see the module docstring."""

    def _open_placement(self) -> None:
        #: id(job) -> the node types it was cleared for, until the next placement (module docstring).
        self._cleared: dict[int, list[int]] = {}
        #: id(member) of the gang last cleared by clear_gang.
        self._gang_cleared: set[int] = set()
        #: id(types) -> the same types as a set, for long type lists.
        self._type_sets: dict[int, frozenset[int]] = {}
        #: (job, node, vector, types, level) of the core's last node search: that node passed steps 4 and 5 for
        #: those types in the search, and the job fits there at that level
        #: (:meth:`~flotilla.core.nodesearch.NodeSearch.find_node` keeps it); nothing has been placed or returned
        #: since.
        self._found: tuple | None = None
        #: The highest priority of a job evicted this cycle (never lowered when one returns: an upper bound): a
        #: job of that priority or above may take all the room of evicted jobs (step 6).
        self._evicted_top: int = EVICTED

    # -- steps 1 to 4: about the job ---------------------------------------------------------
    def clear(self, job: Job, place=None):
        """Steps 1 to 4 for one job, in its own queue: its node types (in ``place``: a cluster name or a gang's
        place, if given), or :class:`Refused`."""
        queue = self.queues.get(job.queue)
        if queue is None:
            return Refused(QUEUE, make("unknown_queue", job.queue))
        if job.gang is not None:
            refused = self._gang_alone(job)
            if refused is not None:
                return refused
        for fn in self.job_valid_fns:
            reason = fn(job)
            if reason:
                return Refused(JOB, reason)
        if self.queue_admit_fns:
            vec = self.vector(job)
            for fn in self.queue_admit_fns:
                reason = fn(queue, job, vec)
                if reason:
                    return Refused(QUEUE, reason)
        types, why = self.allowed_types(job) if place is None else place_types(self, job, place)
        if not types:
            return Refused(NODES, why or NO_NODES)
        self._cleared[id(job)] = types
        return types

    def clear_gang(self, members: Sequence[Job], queue=None) -> Refused | None:
        """Steps 1 to 3 for a gang's members placed together, admitted as their summed requests by ``queue`` (the
        queue the gang is served from, one of its members'; default the first member's); then
        :meth:`clear_member` gives each member's node types in a place."""
        gang = members[0].gang
        self._gang_cleared = set()
        if queue is None or queue.name not in {m.queue for m in members} or self.queues.get(queue.name) is not queue:
            queue = self.queues.get(members[0].queue)
            if queue is None:
                return Refused(QUEUE, make("unknown_queue", members[0].queue))
        refused = self._gang_whole(gang, members)
        if refused is not None:
            return refused
        reason = self.gang_ready(gang, members)
        if reason:
            return Refused(GANG, reason)
        for member in members:
            why = self.job_valid(member)
            if why:
                return Refused(JOB, make("gang_member", gang.id, member.id, why))
        vec = tuple(map(sum, zip(*(self.vector(m) for m in members))))
        reason = self.admit(queue, members[0], vec)
        if reason:
            return Refused(QUEUE, reason)
        self._gang_cleared = set(map(id, members))
        return None

    def clear_member(self, member: Job, place=None):
        """Step 4 for a member of the gang :meth:`clear_gang` cleared last: its node types in ``place``, or
        :class:`Refused`."""
        if id(member) not in self._gang_cleared:
            return Refused(GANG, make("gang_not_cleared", member.id))
        types, why = place_types(self, member, place)
        if not types:
            return Refused(NODES, why or NO_NODES)
        self._cleared[id(member)] = types
        return types

    def _gang_whole(self, gang, members: Sequence[Job]) -> Refused | None:
        """Whether ``members`` are what the gang places together: every member not running (evicted ones
        included) nor placed this cycle; for an elastic gang, at least what its minimum still needs."""
        if gang is None or any(m.gang is None or m.gang.id != gang.id for m in members):
            return Refused(GANG, make("gang_not_one"))
        running, evicted, placed = self.running, self.evicted, self.scheduled_ids
        known = self.gangs.get(gang.id, members)
        if gang.min_available:
            started = sum(1 for m in known if m.id in running and m.id not in evicted)
            if started + len(members) >= gang.min_available:
                return None
            return Refused(GANG, make("gang_minimum", gang.id, gang.min_available))
        pending = {m.id for m in known if m.id in evicted or (m.id not in running and m.id not in placed)}
        if pending == {m.id for m in members}:
            return None
        return Refused(GANG, make("gang_partial", gang.id, len(pending), len(members)))

    def _gang_alone(self, job: Job) -> Refused | None:
        """A gang member asked about alone: only an elastic gang's member, once the gang has started."""
        gang = job.gang
        if not gang.min_available:
            return Refused(GANG, make("gang_together", gang.id))
        running, evicted, placed = self.running, self.evicted, self.scheduled_ids
        for member in self.gangs.get(gang.id, ()):
            if member.id in placed or (member.id in running and member.id not in evicted):
                return None
        return Refused(GANG, make("gang_minimum", gang.id, gang.min_available))

    # -- steps 5 and 6: about the node -------------------------------------------------------
    def node_refusal(self, job: Job, i: int, types: Sequence[int],
                     making_way: frozenset[str] | set[str] = frozenset()) -> Refused | None:
        """Whether ``job`` (cleared for ``types``) may go on node ``i`` but for room: None, or the
        :class:`Refused` of step 4 (the node's type is not one of ``types``) or step 5.

        ``making_way``: ids of jobs on the node taken to be gone (victims to be), whose host ports do not
        count as held.
        """
        t = self.index.type_of[i]
        if not (t in types if len(types) <= 8 else t in self._type_set(types)):
            return Refused(NODES, self._type_refusal(job, i))
        if self.node_checked(job) and not self.node_allowed(job, i, making_way):
            return Refused(NODE, self._node_refusal_reason(job, i))
        return None

    def _type_set(self, types: Sequence[int]) -> frozenset[int]:
        """``types`` as a set (long lists only), kept by identity: type lists are interned for the cycle."""
        found = self._type_sets.get(id(types))
        if found is None:
            found = self._type_sets[id(types)] = frozenset(types)
        return found

    def fits(self, job: Job, i: int) -> bool:
        """Step 6: does ``job`` fit node ``i`` now, in free space or the room of evicted jobs of its priority or
        lower?"""
        return self._fits(job, i, self.vector(job))

    def _fits(self, job: Job, i: int, vec) -> bool:
        index = self.index
        if index.fits_on(i, vec, EVICTED):
            return True
        if not self.evicted:
            return False
        levels = index.levels
        base = levels[1] if len(levels) > 1 else EVICTED
        priority = self.priority_class(job).priority
        if priority >= self._evicted_top:
            return index.fits_on(i, vec, base)  # every evicted job's room is its to take
        free = list(index.free[i][index.level_of[base]])
        running = self.running
        for job_id, (_, held, level) in index.jobs[i].items():
            if level == EVICTED and running[job_id].level > priority:
                for r, amount in enumerate(held):
                    free[r] -= amount
        return all(amount <= room for amount, room in zip(vec, free))

    def _level_fits(self, job: Job, level: int) -> bool:
        """Whether fitting at ``level`` is fitting by step 6: the lowest running level (the room of every evicted
        job counted), for a job of a priority no evicted job's is above."""
        levels = self.index.levels
        return len(levels) > 1 and level == levels[1] and self.priority_class(job).priority >= self._evicted_top

    # -- placing ----------------------------------------------------------------------------
    def place(self, job: Job, node: int, stmt=None) -> Refused | None:
        """Place queued ``job`` on node ``node`` if every rule allows it; None when placed, else :class:`Refused`.

        With ``stmt`` (a :class:`~flotilla.core.statement.Statement`) the
        placement is one of its operations, committed or discarded with it;
        without, it is committed at once. A job not cleared since the last
        placement is cleared first (steps 1 to 4, for its own queue).
        """
        if job.id in self.scheduled_ids or job.id in self.running:
            return Refused(JOB, make("already_placed", job.id))
        found, self._found = self._found, None
        cleared = self._cleared
        types = cleared.get(id(job))
        if found is not None and found[0] is job and found[1] == node and found[3] is types and \
                (found[4] == EVICTED or self._level_fits(job, found[4])):
            # The search just found this node for it, among the types it was cleared for, at a level where it
            # fits by step 6: steps 4 to 6 held there and nothing changed since.
            if job.gang is None:
                cleared.clear()
                if self._gang_cleared:
                    self._gang_cleared = set()
            else:
                cleared.pop(id(job), None)
            if stmt is None:
                _place_now(self, job, node, found[2])
            else:
                stmt._allocate(job, node, found[2])
            return None
        vec = self.vector(job)
        if types is None:
            types = self.clear(job)
            if types.__class__ is Refused:
                return types
        # node_refusal and _fits, inlined for the common job (no ports, claims, pod rules or node filters).
        index = self.index
        if job.host_ports or job.claims or job.pod_rules is not None or self.node_filter_fns or self.state.pods.anti \
                or not (index.type_of[node] in types if len(types) <= 8 else index.type_of[node] in self._type_set(types)):
            refused = self.node_refusal(job, node, types)
            if refused is not None:
                return refused
        if not index.fits_on(node, vec, EVICTED) and not self._fits(job, node, vec):
            return Refused(FIT, self._fit_refusal(job, node, vec))
        if job.gang is None:
            # What queues hold changes: clearances given before this placement no longer hold.
            cleared.clear()
            if self._gang_cleared:
                self._gang_cleared = set()
        else:
            del cleared[id(job)]
        if stmt is None:
            _place_now(self, job, node, vec)
        else:
            stmt._allocate(job, node, vec)
        return None

    # -- reasons (refusals only) --------------------------------------------------------------
    def _type_refusal(self, job: Job, i: int):
        node_type = self.index.types[self.index.type_of[i]]
        for fn in self.predicate_fns:
            reason = fn(job, node_type)
            if reason:
                return on_node(self.index.nodes[i].name, (reason,))
        return make("not_in_place", self.index.nodes[i].name)

    def _node_refusal_reason(self, job: Job, i: int):
        name = self.index.nodes[i].name
        if job.host_ports and not self.state.ports.free(i, job.host_ports):
            return on_node(name, (PORTS_TAKEN,))
        if job.claims and self.volume_picks is not None and not self.volume_picks.allowed(job, i):
            return on_node(name, (BIND_CONFLICT,))
        if job.pod_rules is not None or self.state.pods.anti:
            reason = pod_refusal(self, job, i)
            if reason is not None:
                return on_node(name, (reason,))
        return on_node(name, (FILTERED,))

    def _fit_refusal(self, job: Job, i: int, vec):
        free = self.index.free[i][self.index.level_of[EVICTED]]
        short = [name for name, amount, room in zip(self.space.names, vec, free) if amount > room]
        return on_node(self.index.nodes[i].name, tuple(insufficient(name) for name in short))


__all__ = ["FIT", "GANG", "JOB", "NODE", "NODES", "Placing", "QUEUE", "Refused", "STAGES"]
