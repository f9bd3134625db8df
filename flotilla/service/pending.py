"""Why is my job pending: a queued job's reason and its position in its queue, as of the last cycle.

The scheduler's cycle reads each queue in the order it offers jobs (evicted
jobs first, then priority, submission time, or a plugin's job order), so it
knows the order; writing a position for every queued job each cycle would
cost a million rows. Instead the leader publishes, with the cycle's status
(:mod:`flotilla.service.roles.status`, one row every replica reads), each
queue's *head*: the first :func:`head_size` jobs left queued, in that order,
with their reasons (each distinct reason once per queue). Positions count
jobs, not pods, from 1: the job the queue would offer next.

* A job in its queue's head: its position and reason as of the last cycle.
  Jobs that left the queue since (leased, cancelled) keep their place in
  the published order, so positions may skip numbers.
* A queued job beyond the head (or submitted since the last cycle): its
  position is counted on demand from the store's order, ``priority``, then
  ``submitted``, then id: the head's length, plus the queued jobs outside the
  head that sort before it, plus one (with a plugin's job order, such as
  ``ownerfairshare``'s, an estimate). Its reason is the cycle's when the
  published per-job reasons hold it, else :data:`NOT_EXAMINED`.

The head of a queue is read from the cycle's queue order after the actions
ran, as far as it reaches (no other job is walked); its reasons are worded
once per distinct failure (:mod:`flotilla.core.whynot`). Beside each reason's
words goes its code (``reasonCode``, :mod:`flotilla.core.reasons`): what a
program reads to tell reasons apart; the words are for people.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import sqlalchemy as sa

from flotilla.core.reasons import OTHER, code_of, make
from flotilla.service.leases import QUEUED, job_of
from flotilla.service.schema import jobs
from flotilla.service.store import Store, chunks

#: The most jobs a queue's head holds, and the largest ``limit`` of ``GET /v1/queues/{name}/pending``.
HEAD_MAX = 1000
#: The fewest jobs a queue's head holds, however many queues there are.
HEAD_MIN = 100
#: How many jobs the heads hold together at most (while each queue gets at least :data:`HEAD_MIN`).
HEAD_TOTAL = 20_000
#: ``limit`` of ``GET /v1/queues/{name}/pending`` when not given.
DEFAULT_LIMIT = 100
#: The reason of a queued job the last cycle gave none for (submitted since, or past what was published).
NOT_EXAMINED_REASON = make("not_examined")
NOT_EXAMINED = str(NOT_EXAMINED_REASON)


def head_size(queues: int) -> int:
    """How many jobs each queue's head holds when there are ``queues`` queues."""
    return max(HEAD_MIN, min(HEAD_MAX, HEAD_TOTAL // max(1, queues)))


def published_heads(decisions) -> dict[str, dict[str, Any]]:
    """The heads of ``decisions`` (``Decisions.heads``) as the status publishes them.

    ``{queue: {"jobs": [[job id, reason index], ...], "reasons": [text, ...], "codes": [code, ...],
    "more": bool}}``: jobs in order, one entry per job (a job of several pods reads as its first pod), each
    reason's code beside its words, ``more`` when jobs follow.
    """
    out: dict[str, dict[str, Any]] = {}
    why = getattr(decisions, "why", None) or decisions.explain
    for name, (pods, more) in sorted(getattr(decisions, "heads", {}).items()):
        texts: dict[str, int] = {}
        codes: list[str] = []
        rows: list[list] = []
        seen: set[str] = set()
        for pod in pods:
            job_id = job_of(pod.id)
            if job_id in seen:
                continue
            seen.add(job_id)
            reason = why(pod)
            text = str(reason)
            index = texts.get(text)
            if index is None:
                index = texts[text] = len(texts)
                codes.append(code_of(reason))
            rows.append([job_id, index])
        out[name] = {"jobs": rows, "reasons": list(texts), "codes": codes, "more": bool(more)}
    return out


_ROW = (jobs.c.id, jobs.c.job_set, jobs.c.state, jobs.c.priority, jobs.c.priority_class, jobs.c.submitted)


def _order(row) -> tuple:
    return row.priority, row.submitted, row.id


class PendingView:
    """Reasons and positions of queued jobs, from the published status (``status()``) and the store."""

    def __init__(self, store: Store, status: Callable[[], dict]):
        self.store = store
        self.status = status

    def _head(self, body: dict, queue: str) -> tuple[list[str], list[tuple[str, str]], dict[str, int]]:
        """The published head of ``queue``: its job ids in order, each one's reason (words, code), and each id's
        position."""
        head = body.get("pending", {}).get(queue) or {}
        texts = head.get("reasons", [])
        codes = head.get("codes") or [OTHER] * len(texts)
        ids = [row[0] for row in head.get("jobs", [])]
        reasons = [(texts[row[1]], codes[row[1]]) for row in head.get("jobs", [])]
        return ids, reasons, {job_id: k + 1 for k, job_id in enumerate(ids)}

    def _rows(self, ids: Iterable[str]) -> dict[str, Any]:
        out = {}
        with self.store.read() as conn:
            for part in chunks(list(ids)):
                for row in conn.execute(sa.select(*_ROW).where(jobs.c.id.in_(part))):
                    out[row.id] = row
        return out

    def _other_reason(self, body: dict, queue: str, job_id: str) -> tuple[str, str]:
        """A queued job's reason outside its queue's head: (words, code)."""
        text = body.get("jobReasons", {}).get(job_id)
        if not text:
            return NOT_EXAMINED, NOT_EXAMINED_REASON.code
        return text, body.get("reasonCodes", {}).get(queue, {}).get(text, OTHER)

    def job(self, record: dict) -> dict:
        """``record`` (a job's, as the store gives it) with ``position``, and ``reason`` and ``reasonCode`` when it
        is queued."""
        if record.get("state") != QUEUED:
            return {**record, "position": None}
        body = self.status()
        ids, reasons, positions = self._head(body, record["queue"])
        position = positions.get(record["id"])
        if position is not None:
            text, code = reasons[position - 1]
            return {**record, "reason": text, "reasonCode": code, "position": position}
        # Beyond the head: the head's length, then the queued jobs outside it that sort before this one.
        mine = (record["priority"], record["submitted"], record["id"])
        before = (jobs.c.priority < mine[0]) | ((jobs.c.priority == mine[0]) & (
            (jobs.c.submitted < mine[1]) | ((jobs.c.submitted == mine[1]) & (jobs.c.id < mine[2]))))
        with self.store.read() as conn:
            ahead = conn.execute(sa.select(sa.func.count()).select_from(jobs).where(
                jobs.c.queue == record["queue"], jobs.c.state == QUEUED, before)).scalar_one()
        in_head = sum(1 for row in self._rows(ids).values() if row.state == QUEUED and _order(row) < mine)
        text, code = self._other_reason(body, record["queue"], record["id"])
        return {**record, "reason": text, "reasonCode": code, "position": len(ids) + ahead - in_head + 1}

    def queue(self, name: str, limit: int) -> dict:
        """The first ``limit`` queued jobs of queue ``name`` in scheduling order, with positions and reasons."""
        body = self.status()
        ids, reasons, _ = self._head(body, name)
        rows = self._rows(ids)
        listed: list[dict] = []
        for k, (job_id, reason) in enumerate(zip(ids, reasons)):
            row = rows.get(job_id)
            if row is not None and row.state == QUEUED:
                listed.append(self._entry(row, k + 1, reason))
                if len(listed) == limit:
                    break
        if len(listed) < limit:
            # After the head: the queued jobs outside it (submitted since the cycle, or past the head), store order.
            skip = {job_id for job_id, row in rows.items() if row.state == QUEUED}
            with self.store.read() as conn:
                after = conn.execute(sa.select(*_ROW).where(jobs.c.queue == name, jobs.c.state == QUEUED)
                                     .order_by(jobs.c.priority, jobs.c.submitted, jobs.c.id)
                                     .limit(limit - len(listed) + len(skip))).all()
            rank = len(ids)
            for row in after:
                if row.id in skip:
                    continue
                rank += 1
                listed.append(self._entry(row, rank, self._other_reason(body, name, row.id)))
                if len(listed) == limit:
                    break
        with self.store.read() as conn:
            queued = conn.execute(sa.select(sa.func.count()).select_from(jobs).where(
                jobs.c.state == QUEUED, jobs.c.queue == name)).scalar_one()
        return {"queue": name, "cycle": body.get("cycle"), "time": body.get("time"), "queued": queued,
                "jobs": listed}

    @staticmethod
    def _entry(row, position: int, reason: tuple[str, str]) -> dict:
        return {"position": position, "id": row.id, "jobSet": row.job_set, "priority": row.priority,
                "priorityClass": row.priority_class, "submitted": row.submitted, "reason": reason[0],
                "reasonCode": reason[1]}


__all__ = ["DEFAULT_LIMIT", "HEAD_MAX", "NOT_EXAMINED", "PendingView", "head_size", "published_heads"]
