"""Retry policies: whether a failed run of a job runs again, by its exit code or the cause of its failure.

A policy is a list of rules (:class:`~flotilla.config.models.RetryRuleConfig`);
a queue may have one (config ``queues[].retryPolicy`` or the queue API) and
a job may have its own (the job spec's ``retryPolicy``). A failure is tried
against the job's rules, then the queue's, in order; the first rule that
matches decides: ``retry`` while the job has had fewer retries than the
rule's ``limit``, else ``fail``. When none matches, the service's defaults
decide: a failure of the platform (``lost``: evicted, node lost, stuck;
a lease that expired) is retried up to ``lease.maxRetries`` times, a
failure of the job's own (a container's exit, a deadline) fails it.

The decision is read once per failure, never per cycle: policies are stored
as JSON text (the queue's row, the job's row) and compiled when a failure
asks, through a small cache keyed by that text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

from flotilla.core.leases import Decision, Failure, decide

#: Compiled policies kept, by their JSON text (a cycle's failures mostly share a few policies).
_CACHE_SIZE = 256


@dataclass(frozen=True, slots=True)
class Rule:
    """A compiled rule: ``ranges`` of exit codes (inclusive) or ``causes``, and what it decides."""

    ranges: tuple[tuple[int, int], ...]
    causes: frozenset[str]
    retry: bool
    limit: int
    text: str

    def matches(self, failure: Failure) -> bool:
        if self.causes:
            return failure.cause in self.causes
        code = failure.exit_code
        return code is not None and any(low <= code <= high for low, high in self.ranges)


def _range(entry: int | str) -> tuple[int, int]:
    if isinstance(entry, int):
        return entry, entry
    low, _, high = entry.partition("-")
    return int(low), int(high)


def _describe(rule: Mapping) -> str:
    codes = rule.get("exitCodes")
    what = f"exit {','.join(map(str, codes))}" if codes is not None else ", ".join(rule.get("reasons") or ())
    return f"{what}: retry, limit {rule.get('limit')}" if rule["action"] == "retry" else f"{what}: fail"


def compile_policy(rules: Iterable[Mapping], source: str) -> tuple[Rule, ...]:
    """Rules as stored (the config model's JSON, by alias), already validated; ``source`` prefixes their names."""
    out = []
    for number, rule in enumerate(rules, 1):
        out.append(Rule(tuple(_range(e) for e in rule.get("exitCodes") or ()), frozenset(rule.get("reasons") or ()),
                        rule["action"] == "retry", int(rule.get("limit") or 0),
                        f"{source} retryPolicy rule {number} ({_describe(rule)})"))
    return tuple(out)


def dump_policy(rules: Sequence) -> str | None:
    """A policy (config models or their dicts) as the JSON text the store keeps; None for no rules."""
    if not rules:
        return None
    items = [r.model_dump(by_alias=True, exclude_none=True) if hasattr(r, "model_dump") else dict(r) for r in rules]
    return json.dumps(items, separators=(",", ":"))


class Policies:
    """The retry rules of jobs and queues, read on demand (``read_job``, ``read_queue``: id or name -> JSON text).

    One object per ingest transaction: a job's and a queue's text are read
    at most once each; compiled rules are shared across objects by text.
    """

    _compiled: dict[tuple[str, str], tuple[Rule, ...]] = {}

    def __init__(self, read_job: Callable[[str], str | None], read_queue: Callable[[str], str | None]):
        self._read_job = read_job
        self._read_queue = read_queue
        self._jobs: dict[str, tuple[Rule, ...]] = {}
        self._queues: dict[str, tuple[Rule, ...]] = {}

    @classmethod
    def _compile(cls, text: str | None, source: str) -> tuple[Rule, ...]:
        if not text:
            return ()
        key = (text, source)
        rules = cls._compiled.get(key)
        if rules is None:
            if len(cls._compiled) >= _CACHE_SIZE:
                cls._compiled.clear()
            rules = cls._compiled[key] = compile_policy(json.loads(text), source)
        return rules

    def rules(self, job_id: str, queue: str) -> tuple[Rule, ...]:
        """The job's rules, then its queue's: the order in which they are tried."""
        job = self._jobs.get(job_id)
        if job is None:
            job = self._jobs[job_id] = self._compile(self._read_job(job_id), "job")
        mine = self._queues.get(queue)
        if mine is None:
            mine = self._queues[queue] = self._compile(self._read_queue(queue), "queue")
        return job + mine


__all__ = ["Decision", "Failure", "Policies", "Rule", "compile_policy", "decide", "dump_policy"]
