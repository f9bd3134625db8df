"""firstfit: packs queued jobs onto the first nodes, in node order, that take them.

An action of the ``flotilla.actions`` entry-point group, written against
``flotilla.plugin`` alone. For each queue it serves (by name), it takes the
queued jobs in job order and offers each to the nodes one by one through the
placement primitive: the core places it on the first node every rule allows
(taints, selector, queue limits, host ports, room, ...) and refuses the
others. A job no node takes waits with the last refusal's ``why`` as its reason
(a :class:`Reason`: its code is what the metrics count).
Gangs are left to ``allocate``, which places their members together.
"""

from __future__ import annotations

from flotilla.plugin import ActionSession, Refused, node_positions, queued_jobs, take_args, wait_reason


class FirstFit:
    name = "firstfit"

    def __init__(self, args):
        options = take_args(args, queues=None, maxJobs=None)
        queues, most = options["queues"], options["maxJobs"]
        if queues is not None and (not isinstance(queues, list) or not all(isinstance(q, str) for q in queues)):
            raise ValueError(f"queues must be a list of queue names, got {queues!r}")
        if most is not None and (isinstance(most, bool) or not isinstance(most, int) or most < 0):
            raise ValueError(f"maxJobs must be a whole number, got {most!r}")
        self.queues = None if queues is None else set(queues)
        self.most = most

    def execute(self, session: ActionSession) -> None:
        placed = 0
        for queue in session.queues.values():
            if self.queues is not None and queue.name not in self.queues:
                continue
            for job in list(queued_jobs(session, queue)):
                if self.most is not None and placed >= self.most:
                    return
                if job.gang is not None:
                    continue
                types = session.clear(job)  # the job's rules once; a refusal here is for every node
                if isinstance(types, Refused):
                    wait_reason(session, job, types.why)  # its code kept
                    continue
                last = None
                for node in node_positions(session):
                    last = session.place(job, node)
                    if last is None:
                        placed += 1
                        break
                else:
                    wait_reason(session, job, last.why if last is not None else "firstfit: no nodes")
