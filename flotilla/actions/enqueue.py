"""``enqueue``: set aside the jobs no node of any cluster could ever run (Volcano's enqueue).

A job whose requirements match no node type (a node selector that matches
nothing, a taint nobody tolerates), or that asks for more than any matching
node has in total (bigger than the largest node), cannot run however long it
waits. This action finds such jobs when they first appear, records why
(``fits no node: cpu 64 > largest 32``), and takes them out of the cycle's
queues before ``allocate`` and ``preempt`` look at them; later cycles skip
them with one lookup, without examining them again (``session.set_aside``:
``allocate`` and ``preempt`` pass over them). A gang with such a
member is set aside whole. When the nodes change (a node added, removed,
relabelled, resized), everything set aside is looked at again.

Put it first: ``actions: [enqueue, evict, allocate, preempt, lease]``. The
action object lives as long as the scheduler, which is what lets it
remember across cycles.
"""

from __future__ import annotations

import time

import structlog

from flotilla.core.feasibility import never_fits
from flotilla.core.reasons import make

log = structlog.get_logger("flotilla.actions.enqueue")


def node_signature(session) -> tuple:
    """What decides whether a job can ever fit: every node's cluster, labels, taints, schedulability and size."""
    return tuple((n.cluster, n.name, tuple(sorted(n.labels.items())), n.taints, n.unschedulable,
                  tuple(sorted(n.resources.items()))) for n in session.index.nodes)


class Enqueue:
    name = "enqueue"

    def __init__(self):
        self.signature: tuple | None = None
        #: Job id -> why it can never run, kept across cycles until the nodes change.
        self.set_aside: dict[str, str] = {}

    def execute(self, session) -> None:
        started = time.perf_counter()
        signature = node_signature(session)
        if signature != self.signature:
            if self.set_aside:
                log.info("enqueue.nodes_changed", reexamined=len(self.set_aside))
            self.signature, self.set_aside = signature, {}
        set_aside = self.set_aside
        verdicts: dict[tuple, str | None] = {}
        fresh = 0
        for queue in session.queues.values():
            for job in queue.queued.jobs():
                if job.id in set_aside:
                    continue
                key = (id(job.requests), job.priority_class, tuple(sorted(job.node_selector.items())), job.tolerations,
                       job.affinity)
                if key not in verdicts:
                    verdicts[key] = never_fits(session, job)
                reason = verdicts[key]
                if reason is not None:
                    fresh += 1
                    set_aside[job.id] = reason
                    for member in session.gangs.get(job.gang.id, ()) if job.gang is not None else ():
                        if member.id != job.id:
                            set_aside.setdefault(member.id, make("gang_member", job.gang.id, job.id, reason))
        # The queues' orders live across cycles: the jobs set aside stay in them and are passed over.
        session.set_aside = set_aside
        withheld = 0
        for job in session.snapshot.queued:
            reason = set_aside.get(job.id)
            if reason is not None:
                session.failures[job.id] = reason
                withheld += 1
        if fresh:
            log.info("enqueue.unschedulable", jobs=fresh)
        session.counters["set_aside"] = withheld
        session.timings[self.name] = time.perf_counter() - started
