"""The leader's last cycle, published in the store for every replica.

API replicas run no loop, yet their ``/metrics`` and dashboard show fair
shares, allocations, clusters and why jobs wait. After each cycle the
leader writes one row (``scheduler_status``, fenced like its other
writes); any replica reads it, cached for a second.

Reasons: every queued job's reason is counted per queue by its words
(``reasons``, for the queue's owners), each distinct one with its code
(``reasonCodes``: ``{queue: {words: code}}``, what ``/metrics`` and the
dashboard's categories read; words a status gives no code for count as
``other``), for the first :data:`REASON_LIMIT` pods of the cycle's queue; the
pods past that are counted per queue under :data:`NOT_COUNTED` (one pass at C
speed: a cycle with a million queued jobs does not build a million reasons). The first
:data:`JOB_REASON_LIMIT` jobs keep their own reason for the dashboard's job
page. Each queue's head in scheduling order, with reasons, is published too
(``pending``; :mod:`flotilla.service.pending`): the API's positions.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from itertools import islice
from operator import attrgetter
from typing import Any

import sqlalchemy as sa

from flotilla.core.quantities import parse_quantity
from flotilla.core.reasons import OTHER, code_of, make
from flotilla.service.leases import job_of
from flotilla.service.pending import published_heads
from flotilla.service.schema import scheduler_status
from flotilla.service.store import Store

REASON_LIMIT = 100_000
JOB_REASON_LIMIT = 10_000
NOT_COUNTED_REASON = make("not_counted")
NOT_COUNTED = str(NOT_COUNTED_REASON)


def allocated_numbers(allocated: dict[str, str]) -> dict[str, float]:
    """``{"cpu": "1500m", "memory": "4Gi"}`` -> cores and base units, as Prometheus expects."""
    out = {}
    for name, text in allocated.items():
        value = parse_quantity(text, name)
        out[name] = value / 1000 if name == "cpu" else float(value)
    return out


def plugins_failing(errors: dict | None, failed_cycles: int = 0) -> dict[str, Any]:
    """The ``plugins`` entry of the status: each distinct plugin failure of the last cycle (plugin, point, error,
    how many times), and how many cycles in a row failed closed."""
    failing = [{"plugin": plugin, "point": point, "error": error, "failures": count}
               for (plugin, point, error), count in sorted((errors or {}).items())]
    return {"failing": failing, "failedCycles": failed_cycles}


def status_body(report, decisions, leader: str, term: int | None, wishlist: dict | None = None,
                nodes: dict | None = None) -> dict[str, Any]:
    """What the leader publishes about one cycle (``report``: the loop's CycleReport; ``wishlist``, ``nodes``:
    the loop's node wishlist and draining nodes)."""
    queues: dict[str, dict] = {}
    reasons: dict[str, dict[str, int]] = {}
    codes: dict[str, dict[str, str]] = {}
    job_reasons: dict[str, str] = {}
    if decisions is not None:
        for name, q in sorted(decisions.queues.items()):
            queues[name] = {"weight": q.weight, "fairShare": q.fair_share, "share": q.share,
                            "allocated": allocated_numbers(q.allocated), "parent": getattr(q, "parent", None)}
        seen: set[str] = set()
        queued = decisions.queued
        why = getattr(decisions, "why", None) or decisions.explain
        for pod in islice(queued, REASON_LIMIT):
            job_id = job_of(pod.id)
            if job_id in seen:            # a gang's other pods: the job counts once
                continue
            seen.add(job_id)
            reason = why(pod)
            text = str(reason)
            per_queue = reasons.setdefault(pod.queue, {})
            count = per_queue.get(text)
            if count is None:
                codes.setdefault(pod.queue, {})[text] = code_of(reason)
                count = 0
            per_queue[text] = count + 1
            if len(job_reasons) < JOB_REASON_LIMIT:
                job_reasons[job_id] = text
        if len(queued) > REASON_LIMIT:    # the rest, counted per pod and queue in one pass at C speed
            for queue, count in Counter(map(attrgetter("queue"), islice(queued, REASON_LIMIT, None))).items():
                reasons.setdefault(queue, {})[NOT_COUNTED] = count
                codes.setdefault(queue, {})[NOT_COUNTED] = NOT_COUNTED_REASON.code
    clusters = {name: True for name in report.clusters} | {name: False for name in report.unavailable}
    return {"cycle": report.number, "time": report.started, "seconds": report.seconds, "leader": leader,
            "term": term, "queues": queues, "reasons": reasons, "reasonCodes": codes, "jobReasons": job_reasons,
            "pending": published_heads(decisions) if decisions is not None else {},
            "clusters": dict(sorted(clusters.items())), **({"wishlist": wishlist} if wishlist is not None else {}),
            "nodes": dict(nodes or {}),
            "plugins": plugins_failing(getattr(decisions, "plugin_errors", None) if decisions is not None else None)}


def reason_codes(body: dict, queue: str) -> dict[str, int]:
    """The queued jobs of ``queue`` per reason code in the published status ``body`` (codes without jobs left out)."""
    codes = body.get("reasonCodes", {}).get(queue, {})
    out: dict[str, int] = {}
    for text, count in body.get("reasons", {}).get(queue, {}).items():
        code = codes.get(text, OTHER)
        out[code] = out.get(code, 0) + count
    return out


def reason_code(body: dict, queue: str, text: str) -> str:
    """The code of a reason ``text`` published for ``queue`` (``other`` when the status gives none)."""
    return body.get("reasonCodes", {}).get(queue, {}).get(text, OTHER)


def publish(store: Store, body: dict, term: int | None) -> None:
    """Replace the status row (inside the caller's fence, when it has one)."""
    row = {"term": term or 0, "cycle": body["cycle"], "time": body["time"],
           "body": json.dumps(body, separators=(",", ":"))}
    with store.write() as conn:
        if conn.execute(scheduler_status.update().where(scheduler_status.c.id == 1).values(**row)).rowcount == 0:
            conn.execute(scheduler_status.insert().values(id=1, **row))


class StatusReader:
    """The published status, read at most once per ``ttl`` seconds (scrapes and pages share it)."""

    def __init__(self, store: Store, ttl: float = 1.0):
        self.store = store
        self.ttl = ttl
        self._lock = threading.Lock()
        self._read_at = -1e9
        self._body: dict = {}

    def get(self) -> dict:
        with self._lock:
            if time.monotonic() - self._read_at >= self.ttl:
                with self.store.read() as conn:
                    text = conn.execute(sa.select(scheduler_status.c.body)
                                        .where(scheduler_status.c.id == 1)).scalar_one_or_none()
                self._body = json.loads(text) if text else {}
                self._read_at = time.monotonic()
            return self._body
