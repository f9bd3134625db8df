"""All-or-nothing changes to a session (Volcano's Statement).

Every tentative change an action makes goes through a statement: it takes
effect in the session at once (so the next member of a gang sees the space
the previous one took) and is either committed, which records the decision
and tells the plugins' event handlers, or discarded, which undoes each
operation in reverse order and leaves no trace. A statement works on the
:class:`~flotilla.core.session.Session` it is given (the session makes
statements, so this module does not import it).
"""

from __future__ import annotations

from flotilla.core.decisions import Placement
from flotilla.core.model import Job
from flotilla.core.nodeindex import EVICTED
from flotilla.core.queuetree import charge


def place(session, job: Job, node: int, vec) -> None:
    """Place a queued job on ``node`` and commit it at once: a statement's ``allocate`` then ``commit``.

    Called by :meth:`~flotilla.core.placement.Placing.place` once the rules allow the placement, never
    directly.

    Most placements are one job alone, with nothing to undo; this skips the
    statement object and its list of operations, with the same effects in
    the same order.
    """
    session.index.bind(node, job.id, job.queue, vec, session.job_level(job))
    if session.type_room:
        _touch(session, node)
    if job.host_ports:
        session.state.ports.add(node, job.id, job.host_ports)
    if job.claims and session.volume_picks is not None:
        session.volume_picks.take(job, node)
    session.state.pods.add(node, job)
    charge(session.queues[job.queue], vec, 1)
    _record_placement(session, job, node)


def _touch(session, node: int) -> None:
    """Node ``node``'s free space changed: its type's summed free room (:mod:`flotilla.core.topology`) is stale."""
    session.type_room.pop(session.index.type_of[node], None)


def _record_placement(session, job: Job, node: int) -> None:
    """A committed placement: into the decisions, no longer a failure, told to the event handlers."""
    where = session.index.nodes[node]
    picks = session.volume_picks
    chosen = picks.by_job.get(job.id, ()) if job.claims and picks is not None else ()
    session.scheduled.append(Placement(job, where.cluster, where.name, chosen))
    session.scheduled_ids.add(job.id)
    session.failures.pop(job.id, None)
    for handler in session.allocate_handlers:
        handler(job, node)


class Statement:
    __slots__ = ("session", "ops", "_closed")

    def __init__(self, session):
        self.session = session
        self.ops: list[tuple[str, Job, int, int]] = []
        self._closed = False

    def __len__(self) -> int:
        return len(self.ops)

    # -- operations ---------------------------------------------------------
    def allocate(self, job: Job, node: int):
        """Place a queued job on ``node`` as one of this statement's operations, if the core's rules allow it.

        None when placed, else the :class:`~flotilla.core.placement.Refused`
        that says why not (:meth:`~flotilla.core.placement.Placing.place`).
        """
        return self.session.place(job, node, self)

    def _allocate(self, job: Job, node: int, vec) -> None:
        """The operation itself, once :meth:`~flotilla.core.placement.Placing.place` has checked it."""
        s = self.session
        s.index.bind(node, job.id, job.queue, vec, s.job_level(job))
        if s.type_room:
            _touch(s, node)
        if job.host_ports:
            s.state.ports.add(node, job.id, job.host_ports)
        if job.claims and s.volume_picks is not None:
            s.volume_picks.take(job, node)
        s.state.pods.add(node, job)
        charge(s.queues[job.queue], vec, 1)
        self.ops.append(("allocate", job, node, 0))

    def unevict(self, job: Job) -> None:
        """Return an evicted job to the node it was evicted from."""
        s = self.session
        s._found = None  # it takes room a node search counted free
        running = s.running[job.id]
        s.index.relevel(running.node, job.id, running.level)
        if s.type_room:
            _touch(s, running.node)
        charge(s.queues[job.queue], running.vec, 1)
        self.ops.append(("unevict", job, running.node, 0))

    def evict(self, job: Job) -> None:
        """Take a running job off its node for this cycle; it stops counting for its queue."""
        s = self.session
        running = s.running[job.id]
        s.index.relevel(running.node, job.id, EVICTED)
        if running.level > s._evicted_top:
            s._evicted_top = running.level  # the placement primitive's bound on evicted priorities (step 6)
        if s.type_room:
            _touch(s, running.node)
        charge(s.queues[job.queue], running.vec, -1)
        self.ops.append(("evict", job, running.node, 0))

    def preempt(self, job: Job) -> None:
        """Stop a running (or evicted) job: its space is free for the rest of the cycle."""
        s = self.session
        running = s.running[job.id]
        _, _, level = s.index.unbind(running.node, job.id)
        if s.type_room:
            _touch(s, running.node)
        if job.host_ports:
            s.state.ports.remove(running.node, job.id, job.host_ports)
        s.state.pods.remove(job.id)
        if level != EVICTED:
            charge(s.queues[job.queue], running.vec, -1)
        self.ops.append(("preempt", job, running.node, level))

    # -- ending -------------------------------------------------------------
    def commit(self) -> None:
        s = self.session
        self._close()
        for op, job, node, _ in self.ops:
            if op == "allocate":
                _record_placement(s, job, node)
            elif op == "unevict":
                del s.evicted[job.id]
                for handler in s.allocate_handlers:
                    handler(job, node)
            elif op == "evict":
                s.evicted[job.id] = job
                for handler in s.evict_handlers:
                    handler(job, node)
            else:  # preempt
                was_evicted = s.evicted.pop(job.id, None) is not None
                s.preempted[job.id] = job
                s.queues[job.queue].running -= 1
                if not was_evicted:
                    for handler in s.evict_handlers:
                        handler(job, node)

    def discard(self) -> None:
        s = self.session
        self._close()
        s._found = None  # what it gives back may take room a node search counted free
        room = s.type_room
        for op, job, node, level in reversed(self.ops):
            if room:
                _touch(s, node)
            if op == "allocate":
                vec = s.vector(job)
                s.index.unbind(node, job.id)
                if job.host_ports:
                    s.state.ports.remove(node, job.id, job.host_ports)
                if job.claims and s.volume_picks is not None:
                    s.volume_picks.release(job)
                s.state.pods.remove(job.id)
                charge(s.queues[job.queue], vec, -1)
            elif op == "unevict":
                running = s.running[job.id]
                s.index.relevel(node, job.id, EVICTED)
                charge(s.queues[job.queue], running.vec, -1)
            elif op == "evict":
                running = s.running[job.id]
                s.index.relevel(node, job.id, running.level)
                charge(s.queues[job.queue], running.vec, 1)
            else:  # preempt: back at the level it was taken from
                running = s.running[job.id]
                s.index.bind(node, job.id, job.queue, running.vec, level)
                if job.host_ports:
                    s.state.ports.add(node, job.id, job.host_ports)
                s.state.pods.add(node, running.job)
                if level != EVICTED:
                    charge(s.queues[job.queue], running.vec, 1)
        self.ops.clear()

    def _close(self) -> None:
        if self._closed:
            raise RuntimeError("statement already committed or discarded")
        self._closed = True
