"""``evict``: the first half of preemption to fair share.

For each node (in cluster, then node order), one draw from the session's
seeded generator decides whether all of that node's preemptible jobs are
evicted (probability ``evict.probability``). Evicting a gang member evicts
every running member of its gang, wherever it runs. Evicted jobs stop
counting for their queue and go to the front of it; ``allocate`` may return
them to their own node, and those it does not become preemptions. Nothing is
stopped here: eviction exists only inside the session.
"""

from __future__ import annotations

import time

import structlog

from flotilla.core.nodeindex import NONPREEMPTIBLE

log = structlog.get_logger("flotilla.actions.evict")


class Evict:
    name = "evict"

    def execute(self, session) -> None:
        started = time.perf_counter()
        probability = session.settings.evict_probability
        if probability <= 0 or not session.running:
            session.timings[self.name] = time.perf_counter() - started
            return
        index = session.index
        order = sorted(range(len(index.nodes)), key=lambda i: (index.nodes[i].cluster, index.nodes[i].name))
        chosen: dict[str, object] = {}
        for i in order:
            candidates = [r for r in session.jobs_on(i) if r.level != NONPREEMPTIBLE]
            if not candidates:
                continue
            if session.rng.random() >= probability:
                continue
            for running in sorted(candidates, key=lambda r: r.job.id):
                job = running.job
                members = session.gangs.get(job.gang.id, [job]) if job.gang is not None else [job]
                for member in members:
                    if member.id in session.running and member.id not in chosen:
                        chosen[member.id] = member
        stmt = session.statement()
        for job in chosen.values():
            stmt.evict(job)
            if session.debug:
                log.debug("evict", job=job.id, queue=job.queue, node=job.node)
        stmt.commit()
        session.counters["evicted"] += len(chosen)
        session.timings[self.name] = time.perf_counter() - started
