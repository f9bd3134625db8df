"""``evict``: the first half of preemption to fair share.

For each node (in cluster, then node order), one draw from the session's
seeded generator decides whether all of that node's preemptible jobs (of
classes not kept out of it: ``PriorityClass.fair_share``) are evicted (probability ``evict.probability``). Evicting a gang member evicts
every running member of its gang, wherever it runs. Evicted jobs stop
counting for their queue and go to the front of it; ``allocate`` may return
them to their own node, and those it does not become preemptions. Nothing is
stopped here: eviction exists only inside the session.

Protected fair share (``evict.protectedFractionOfFairShare``, *f*, default
1), with shares as the core measures them (:mod:`flotilla.core.shares`):

* a queue at or below *f* times its fair share keeps every job
  (armada-scheduler.txt's protected fraction);
* a queue above it loses at most what leaves it at that floor, so a
  preemption to fair share never leaves its victim's queue below the floor
  afterwards (Volcano's reclaim rule: a victim's queue keeps its deserved
  share). In a queue tree the floor is the victim's own queue's; room
  moving between branches is left to the fair shares.

A chosen job may lose its room only to a job of another queue whose class
has an equal or higher priority (allocate's rule), so only such jobs are at
risk; the others return for certain. A queue that would end below its floor
were all its jobs at risk preempted takes units back (a gang whole): its
higher priority classes first, then in the order it would offer them to
``allocate``, until it would not. Those jobs are not evicted: they stay on
their nodes as if returned, and nothing may take their room this cycle. This
is decided here, before ``allocate``, because once another job has taken an
evicted job's room the job can no longer return. *f* = 0 turns the floor
off; above 1 it spares queues somewhat over their fair share too.
"""

from __future__ import annotations

import time

import structlog

from flotilla.core.nodeindex import NONPREEMPTIBLE
from flotilla.core.shares import weight_vector

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
        classes, default = session.priority_classes, session.default_priority_class
        spared = {name for name, pc in classes.items() if not pc.fair_share}
        for i in order:
            candidates = [r for r in session.jobs_on(i) if r.level != NONPREEMPTIBLE]
            if spared:   # classes kept out of preemption to fair share (cluster classes, as Kubernetes has it)
                candidates = [r for r in candidates if (r.job.priority_class or default) not in spared]
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
        fraction = session.settings.evict_protected_fraction
        if fraction > 0 and chosen:
            chosen = self._protect(session, chosen, fraction)
        stmt = session.statement()
        for job in chosen.values():
            stmt.evict(job)
            if session.debug:
                log.debug("evict", job=job.id, queue=job.queue, node=job.node)
        stmt.commit()
        session.counters["evicted"] += len(chosen)
        session.timings[self.name] = time.perf_counter() - started

    @staticmethod
    def _protect(session, chosen: dict, fraction: float) -> dict:
        """``chosen`` less the units its queues take back to stay at ``fraction`` of their fair share (see above).

        Work is per chosen job and per queue: queued jobs are read only as each queue's count per priority
        class, which the queue keeps.
        """
        running, queues = session.running, session.queues
        # A job may lose its room only to another queue's job of a priority class at least as high (allocate's
        # rule); jobs no such rival exists for return for certain and count as kept. The floor is the job's own
        # queue's: an inner queue of a tree would count moves inside its branch as losses, which they are not.
        rival = _rivals(session)
        tops = {name: rival(name) for name in {job.queue for job in chosen.values()}}
        if all(top is None for top in tops.values()):
            return chosen
        under: dict[str, list] = {}               # queue -> its jobs at risk
        for job in chosen.values():
            top = tops[job.queue]
            if top is not None and running[job.id].level <= top:
                under.setdefault(job.queue, []).append(job)
        if not under:
            return chosen
        weights = weight_vector(session.space.names, session.settings.share_weights)
        pool_cost = sum(w * a for w, a in zip(weights, session.pool)) or 1.0
        costs = {job.id: sum(w * a for w, a in zip(weights, running[job.id].vec))
                 for jobs in under.values() for job in jobs}
        # What each queue would keep were all its jobs at risk preempted.
        kept = {name: sum(w * a for w, a in zip(weights, queues[name].allocated))
                - sum(costs[job.id] for job in jobs) for name, jobs in under.items()}
        risked = {name: {job.id for job in jobs} for name, jobs in under.items()}
        kept_back: set[str] = set()
        for name in sorted(under):
            queue = queues[name]
            # A hair of tolerance: a queue exactly at its floor in exact arithmetic counts as at it.
            floor = fraction * queue.fair_share * pool_cost - 1e-9 * pool_cost
            if kept[name] >= floor:
                continue
            # Higher priority classes first, then the order the queue offers its evicted jobs to allocate.
            order = sorted(under[name], key=lambda j: (-running[j.id].level, *session.job_sort_key(j, 0), j.id))
            for job in order:
                if kept[name] >= floor:
                    break
                if job.id in kept_back or costs[job.id] <= 0:
                    continue  # taken back already, or costs nothing: keeping it would not lift the queue
                gang = job.gang
                unit = [m for m in session.gangs.get(gang.id, ()) if m.id in chosen] if gang is not None else [job]
                for member in unit:
                    kept_back.add(member.id)
                    if member.id in risked.get(member.queue, ()):
                        kept[member.queue] += costs[member.id]
        if kept_back:
            session.counters["protected"] += len(kept_back)
            if session.debug:
                log.debug("evict.protected", jobs=sorted(kept_back))
        return {job_id: job for job_id, job in chosen.items() if job_id not in kept_back}


def _rivals(session):
    """``rival(queue)``: the highest priority class queued in any queue but ``queue``, or None.

    Cordoned queues start nothing new, so they take no room and are left out.
    """
    classes, default = session.priority_classes, session.default_priority_class
    tops: list[tuple[int, str]] = []          # (priority, queue), highest first
    for queue in session.queues.values():
        if not queue.queued or queue.name in session.cordoned:
            continue
        found = [classes[name or default].priority for name, n in queue.queued.classes.items()
                 if n > 0 and (name or default) in classes]
        if found:
            tops.append((max(found), queue.name))
    tops.sort(key=lambda t: -t[0])

    def rival(name: str) -> int | None:
        return next((priority for priority, queue in tops if queue != name), None)

    return rival
