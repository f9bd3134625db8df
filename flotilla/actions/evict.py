"""``evict``: the first half of preemption to fair share.

For each node (in cluster, then node order), one draw from the session's
seeded generator decides whether all of that node's preemptible jobs (of
classes not kept out of it: ``PriorityClass.fair_share``) are evicted (probability ``evict.probability``). Evicting a gang member evicts
every running member of its gang, wherever it runs. Evicted jobs stop
counting for their queue and go to the front of it; ``allocate`` may return
them to their own node, and those it does not become preemptions. Nothing is
stopped here: eviction exists only inside the session.

Protected fair share (``evict.protectedFractionOfFairShare``, *f*, default
1, or a queue's own ``protectedFractionOfFairShare``), with shares as the
core measures them (:mod:`flotilla.core.shares`):

* a queue at or below *f* times its fair share keeps every job
  (armada-scheduler.txt's protected fraction);
* a queue above it loses at most what leaves it at that floor, so a
  preemption to fair share never leaves its victim's queue below the floor
  afterwards (Volcano's reclaim rule: a victim's queue keeps its deserved
  share). In a queue tree the floor is the victim's own queue's; room
  moving between branches is left to the fair shares.

A chosen job may lose its room only to a job of another queue whose class
has an equal or higher priority (allocate's rule), so only such jobs are at
risk; the others return for certain. The jobs at risk are weighed one unit
at a time (a gang whole) in victim order, as Volcano's reclaim weighs
victims: a unit stays at risk while every queue it belongs to stays at or
above its floor without it and every ``reclaimable`` plugin agrees; any
other unit is taken back: not evicted, it stays on its node as if returned
and nothing may take its room this cycle. Victim order is the plugins'
``reclaim_order`` keys, then the lowest priority class first, then the
largest unit first, then the unit on the node where its queue has the
fewest jobs at risk (so a queue gives back whole nodes, not a job here and
there that no other job can use), then the highest job (or gang) id in
natural order (``a-10`` after ``a-9``) first; never the submission order,
so which jobs a queue keeps does not depend on the order they came in. This is decided
here, before ``allocate``, because once another job has taken an evicted
job's room the job can no longer return. *f* = 0 turns the floor off;
above 1 it spares queues somewhat over their fair share too.
"""

from __future__ import annotations

import time

import structlog

from flotilla.core.extensions import PluginFailed
from flotilla.core.nodeindex import NONPREEMPTIBLE
from flotilla.core.shares import weight_vector

log = structlog.get_logger("flotilla.actions.evict")

_DIGIT_CHARS = "0123456789"


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
        if chosen and (session.settings.evict_protected_fraction > 0 or session.settings.queue_protected_fractions
                       or session.reclaimable_fns):
            try:
                chosen = self._protect(session, chosen)
            except PluginFailed as failure:
                # A plugin failed to say who may be reclaimed, or in which order: no one is, this cycle.
                session.plugin_failed(failure)
                chosen = {}
        stmt = session.statement()
        for job in chosen.values():
            stmt.evict(job)
            if session.debug:
                log.debug("evict", job=job.id, queue=job.queue, node=job.node)
        stmt.commit()
        session.counters["evicted"] += len(chosen)
        session.timings[self.name] = time.perf_counter() - started

    @staticmethod
    def _protect(session, chosen: dict) -> dict:
        """``chosen`` less the units its queues take back to stay at their floors (see above).

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
        if not session.reclaimable_fns and not session.reclaim_order_fns:
            kept = _protect_one_job_units(session, chosen, tops)
            if kept is not None:
                return kept
        at_risk: set[str] = set()
        for job in chosen.values():
            top = tops[job.queue]
            if top is not None and running[job.id].level <= top:
                at_risk.add(job.id)
        if not at_risk:
            return chosen
        weights = weight_vector(session.space.names, session.settings.share_weights)
        pool_cost = sum(w * a for w, a in zip(weights, session.pool)) or 1.0
        # Units (a gang's chosen members together), each with what it costs each queue of its members at risk.
        units: dict[str, list] = {}
        for job_id in at_risk:
            job = chosen[job_id]
            gang = job.gang
            key = gang.id if gang is not None else job.id
            if key not in units:
                units[key] = [m for m in session.gangs.get(gang.id, ()) if m.id in chosen] if gang is not None \
                    else [job]

        def cost(vec) -> float:
            return sum(w * a for w, a in zip(weights, vec))

        names = {chosen[j].queue for j in at_risk}
        left = {name: cost(queues[name].allocated) for name in names}
        floors = _floors(session, names, pool_cost)
        reclaimable = session.reclaimable_fns
        # What each queue holds, as a vector, only for the plugins that are asked (``left``).
        held = {name: list(queues[name].allocated) for name in names} if reclaimable else None
        # Jobs of one shape share their vector object: each distinct vector is costed once.
        by_vector: dict[int, float] = {}
        costs = {}
        for job_id in at_risk:
            vec = running[job_id].vec
            amount = by_vector.get(id(vec))
            if amount is None:
                amount = by_vector[id(vec)] = cost(vec)
            costs[job_id] = amount

        kept_back: set[str] = set()
        if not reclaimable:
            # Without plugins to ask, the order matters only for queues between two bounds: a queue that the
            # cheapest of its jobs at risk would take below its floor keeps every unit that costs it anything
            # (what it holds only shrinks), a queue that stays at
            # its floor losing all its jobs at risk loses them whatever the order. Units touching neither kind
            # alone are weighed in order below; the others are settled here, with no sort.
            total: dict[str, float] = {}
            least: dict[str, float] = {}     # the least a unit can cost the queue, when it costs anything
            for job_id in at_risk:
                name, amount = chosen[job_id].queue, costs[job_id]
                total[name] = total.get(name, 0.0) + amount
                if amount > 0 and amount < least.get(name, float("inf")):
                    least[name] = amount
            bound = _bounds(left, least, total, floors)
            ordered = {}
            for key, unit in units.items():
                if len(unit) == 1:
                    # One member (at risk, as every unit's key comes from a job at risk): its queue's bound.
                    job = unit[0]
                    verdict = bound[job.queue] if costs[job.id] > 0 else False
                    if verdict:
                        kept_back.add(job.id)
                    elif verdict is None:
                        ordered[key] = unit
                    continue
                touched = {m.queue for m in unit if m.id in at_risk and costs[m.id] > 0}
                if any(left[name] - least[name] < floors[name] for name in touched):
                    kept_back.update(member.id for member in unit)
                elif all(left[name] - total[name] >= floors[name] for name in touched):
                    continue   # taken whatever the order
                else:
                    ordered[key] = unit
            units = ordered
        for key in _victim_order(session, units, costs):
            unit = units[key]
            if not reclaimable and len(unit) == 1:
                # One job at risk, no plugin to ask: taken while its queue stays at its floor.
                name, amount = unit[0].queue, costs[unit[0].id]
                if amount <= 0 or left[name] - amount >= floors[name]:
                    left[name] -= amount
                else:
                    kept_back.add(unit[0].id)
                continue
            members = [m for m in unit if m.id in at_risk]
            loss: dict[str, float] = {}
            for member in members:
                loss[member.queue] = loss.get(member.queue, 0.0) + costs[member.id]
            # Costing nothing, a unit cannot take its queue below anything; else the queue must stay at its floor.
            taken = all(amount <= 0 or left[name] - amount >= floors[name] for name, amount in loss.items())
            if taken and reclaimable:
                after = {name: list(vec) for name, vec in held.items() if name in loss}
                for member in members:
                    row = after[member.queue]
                    for r, amount in enumerate(running[member.id].vec):
                        row[r] -= amount
                taken = all(fn(queues[m.queue], m, tuple(after[m.queue])) for m in members for fn in reclaimable)
                if taken:
                    held.update(after)
            if taken:
                for name, amount in loss.items():
                    left[name] -= amount
            else:
                kept_back.update(member.id for member in units[key])
        if kept_back:
            session.counters["protected"] += len(kept_back)
            if session.debug:
                log.debug("evict.protected", jobs=sorted(kept_back))
        return {job_id: job for job_id, job in chosen.items() if job_id not in kept_back}


def _protect_one_job_units(session, chosen: dict, tops: dict) -> dict | None:
    """:meth:`Evict._protect` when no plugin asks or orders and no job at risk is in a gang (the usual case), in
    three passes over the jobs at risk, none of them through a dictionary of units; None when one is in a gang.

    The same rules in the same order: a queue whose cheapest job at risk takes it below its floor keeps every
    job at risk that costs it anything, one that stays at its floor losing them all loses them all, and the
    jobs of the queues between the two are weighed in victim order (lowest priority, largest, fewest at risk
    on their node, highest natural id first), each taken while its queue stays at its floor.
    """
    running, queues = session.running, session.queues
    weights = weight_vector(session.space.names, session.settings.share_weights)
    by_vector: dict[int, float] = {}
    risk = []                          # (job, its running record, its cost), in chosen order
    total: dict[str, float] = {}
    least: dict[str, float] = {}       # the least a job at risk costs its queue, when it costs anything
    inf = float("inf")
    for job in chosen.values():
        top = tops[job.queue]
        if top is None:
            continue
        where = running[job.id]
        if where.level > top:
            continue
        if job.gang is not None:
            return None
        vec = where.vec
        amount = by_vector.get(id(vec))
        if amount is None:
            amount = by_vector[id(vec)] = sum(w * a for w, a in zip(weights, vec))
        risk.append((job, where, amount))
        name = job.queue
        total[name] = total.get(name, 0.0) + amount
        if amount > 0 and amount < least.get(name, inf):
            least[name] = amount
    if not risk:
        return chosen
    pool_cost = sum(w * a for w, a in zip(weights, session.pool)) or 1.0
    left = {name: sum(w * a for w, a in zip(weights, queues[name].allocated)) for name in total}
    floors = _floors(session, total, pool_cost)
    bound = _bounds(left, least, total, floors)
    kept_back: set[str] = set()
    weighed = []
    on_node: dict[tuple[str, int], int] = {}
    for entry in risk:
        job, where, amount = entry
        verdict = bound[job.queue] if amount > 0 else False
        if verdict:
            kept_back.add(job.id)
        elif verdict is None:
            weighed.append(entry)
            spot = (job.queue, where.node)
            on_node[spot] = on_node.get(spot, 0) + 1
    if weighed:
        # Natural order of ids, highest first (see _victim_order), then the victim order's keys before it.
        weighed.sort(key=_natural_key, reverse=True)
        ranked = [(where.level, -amount, on_node[job.queue, where.node], position)
                  for position, (job, where, amount) in enumerate(weighed)]
        ranked.sort()
        for entry in ranked:
            job, _, amount = weighed[entry[3]]
            name = job.queue
            if left[name] - amount >= floors[name]:
                left[name] -= amount
            else:
                kept_back.add(job.id)
    if not kept_back:
        return chosen
    session.counters["protected"] += len(kept_back)
    if session.debug:
        log.debug("evict.protected", jobs=sorted(kept_back))
    return {job_id: job for job_id, job in chosen.items() if job_id not in kept_back}


def _floors(session, names, pool_cost: float) -> dict[str, float]:
    """Each queue's protected floor, as a cost: its protected fraction of its fair share of the pool (none below
    a fraction of 0). A hair of tolerance: a queue exactly at its floor in exact arithmetic counts as at it."""
    fractions = session.settings.queue_protected_fractions
    default = session.settings.evict_protected_fraction
    queues = session.queues
    floors = {}
    for name in names:
        fraction = fractions.get(name, default)
        floors[name] = (fraction * queues[name].fair_share * pool_cost - 1e-9 * pool_cost) if fraction > 0 \
            else -float("inf")
    return floors


def _bounds(left: dict, least: dict, total: dict, floors: dict) -> dict:
    """Per queue: True when the cheapest unit at risk (``least``) takes it below its floor, False when losing
    every unit at risk (``total``) leaves it at its floor, None between the two (its units weighed in order)."""
    return {name: True if left[name] - least[name] < floors[name] else
            False if left[name] - total[name] >= floors[name] else None for name in least}


def _natural_key(entry: tuple) -> tuple:
    """A job's place in natural id order (``a-9`` before ``a-10``), for entries (job, ...)."""
    key = entry[0].id
    return key.rstrip(_DIGIT_CHARS), len(key), key


def _victim_order(session, units: dict[str, list], costs: dict[str, float]) -> list[str]:
    """The units' keys in victim order (see the module docstring): plugins' ``reclaim_order`` keys, then the lowest
    priority class, then the largest (``costs``: each job at risk's cost by the share weights), then the one on the
    node where its queue has the fewest jobs at risk, then the highest id in natural order."""
    running = session.running
    # Natural order of ids ending in a number: ids that differ only in that number compare by its value (a-9
    # before a-10), others by their text. Ids of one workload share their prefix, so the trailing number is what
    # orders them: a string strip per id, where splitting every digit run would cost a regular expression per id.
    keys = [text for _, _, text in sorted([(key.rstrip(_DIGIT_CHARS), len(key), key) for key in units], reverse=True)]
    plugins = bool(session.reclaim_order_fns)
    # How many jobs at risk each queue has on each node: fewer first, so a queue's victims empty nodes.
    on_node: dict[tuple[str, int], int] = {}
    for members in units.values():
        for job in members:
            if job.id in costs:
                where = (job.queue, running[job.id].node)
                on_node[where] = on_node.get(where, 0) + 1
    if not plugins and all(len(members) == 1 for members in units.values()):
        # The usual units, one job each and no plugin keys: order() below, inlined; the position keeps the sort
        # stable (equal keys stay in natural id order) without comparing further.
        ranked = []
        for position, key in enumerate(keys):
            job = units[key][0]
            where = running[job.id]
            ranked.append((where.level, -costs.get(job.id, 0.0), on_node.get((job.queue, where.node), 0), position))
        ranked.sort()
        return [keys[entry[3]] for entry in ranked]

    def order(key: str) -> tuple:
        members = units[key]
        if len(members) == 1:
            (job,) = members
            return (session.reclaim_key(job) if plugins else (), running[job.id].level, -costs.get(job.id, 0.0),
                    on_node.get((job.queue, running[job.id].node), 0))
        return (min(session.reclaim_key(m) for m in members) if plugins else (),
                max(running[m.id].level for m in members), -sum(costs.get(m.id, 0.0) for m in members),
                min(on_node.get((m.queue, running[m.id].node), 0) for m in members))

    return sorted(keys, key=order)   # stable: equal keys stay in natural id order, highest first


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
