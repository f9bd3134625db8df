"""The workload file of ``flotilla simulate`` (spec section 4), as pydantic models.

.. code-block:: yaml

    submissions:
      - at: 0s
        queue: A
        count: 40                       # this many identical jobs
        jobSet: s1
        priorityClass: armada-preemptible
        requests: {cpu: 1}
        duration: 10m                   # runtime once started
        gang: {cardinality: 4}          # optional: groups of 4 from this batch
                                        # (nodeUniformityLabel: rack keeps each group in one rack)

Extra fields (all optional): ``priority`` (lower runs first within a queue),
``nodeSelector``, ``tolerations`` (Kubernetes form), and ``every`` + ``times``
to repeat a submission (``times`` submissions, ``every`` apart, starting at
``at``) so that a week of traffic fits in a few hundred lines. A top-level
``queues`` list (as in the config) adds queues or overrides their weight.

Every problem is reported as ``file:line: field.path: what was expected``.
Jobs are not built here: :class:`Workload` expands submissions lazily, in
time order, so a workload of a million jobs costs memory only for the jobs
submitted so far.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterator

from pydantic import Field, ValidationError, field_validator, model_validator

from flotilla.config.models import (Duration, FlotillaConfig, Model, QueueConfig, Requests,
                                    TolerationConfig, inner_queues, queue_tree_problems)
from flotilla.config.resourcenames import config_provided_names, names_in, queue_limit_names, unknown_resource_problems
from flotilla.config.source import SourceMap, load_yaml, read_yaml_file
from flotilla.core.model import Gang, Job, Queue, Toleration
from flotilla.core.topology import uniformity_label_problem


class GangSpec(Model):
    cardinality: int = Field(ge=1)
    #: Every member on nodes sharing one value of this label (Armada's gangNodeUniformityLabel).
    node_uniformity_label: str = Field("", alias="nodeUniformityLabel")

    @field_validator("node_uniformity_label")
    @classmethod
    def _label(cls, value: str) -> str:
        if value and (why := uniformity_label_problem(value)):
            raise ValueError(why)
        return value


class Submission(Model):
    at: Duration = 0.0
    queue: str
    count: int = Field(1, ge=1)
    job_set: str = Field("", alias="jobSet")
    priority: int = 0
    priority_class: str | None = Field(None, alias="priorityClass")
    requests: Requests = Field(default_factory=dict)
    duration: Duration
    gang: GangSpec | None = None
    node_selector: dict[str, str] = Field(default_factory=dict, alias="nodeSelector")
    tolerations: list[TolerationConfig] = Field(default_factory=list)
    every: Duration | None = None
    times: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _consistent(self) -> "Submission":
        if self.duration <= 0:
            raise ValueError("duration must be positive, e.g. 10m")
        if self.times > 1 and not self.every:
            raise ValueError("times > 1 needs every (a positive duration between repeats)")
        return self


class WorkloadFile(Model):
    submissions: list[Submission] = Field(default_factory=list)
    queues: list[QueueConfig] = Field(default_factory=list)


@dataclass(slots=True)
class _Prepared:
    """One submission entry, checked and with its shared (interned) parts built once."""

    index: int
    spec: Submission
    priority_class: str
    requests: dict[str, int]
    node_selector: dict[str, str]
    tolerations: tuple[Toleration, ...]


@dataclass
class Workload:
    """A checked workload: its submissions, the queues it uses, and a lazy job stream."""

    file: str | None
    entries: list[_Prepared]
    queues: list[Queue]
    total_jobs: int
    per_queue: dict[str, int]

    def occurrences(self) -> list[tuple[float, int, int]]:
        """Every ``(time, entry, repeat)`` in submission order (time, then file order)."""
        out = []
        for entry in self.entries:
            spec = entry.spec
            for k in range(spec.times):
                out.append((spec.at + k * (spec.every or 0.0), entry.index, k))
        out.sort()
        return out

    @property
    def last_submission(self) -> float:
        return max((e.spec.at + (e.spec.times - 1) * (e.spec.every or 0.0) for e in self.entries), default=0.0)

    @property
    def longest_duration(self) -> float:
        return max((e.spec.duration for e in self.entries), default=0.0)

    def jobs(self) -> Iterator[tuple[float, list[Job], float]]:
        """Yield ``(time, jobs, duration)`` per occurrence, in submission order.

        Job ids are ``<queue>-<n>``, numbered per queue in submission order
        and zero-padded so that they also sort in that order; gang ids are
        ``<queue>-g<n>``.
        """
        width = {queue: len(str(n)) for queue, n in self.per_queue.items()}
        seq: dict[str, int] = {}
        gang_seq: dict[str, int] = {}
        for at, index, _ in self.occurrences():
            entry = self.entries[index]
            spec = entry.spec
            queue = spec.queue
            jobs = []
            gang = None
            for i in range(spec.count):
                if spec.gang is not None and i % spec.gang.cardinality == 0:
                    gang_seq[queue] = gang_seq.get(queue, 0) + 1
                    gang = Gang(f"{queue}-g{gang_seq[queue]:0{width[queue]}d}", spec.gang.cardinality,
                                uniformity_label=spec.gang.node_uniformity_label)
                seq[queue] = seq.get(queue, 0) + 1
                jobs.append(Job(f"{queue}-{seq[queue]:0{width[queue]}d}", queue, spec.job_set, spec.priority,
                                entry.priority_class, at, entry.requests, entry.node_selector, entry.tolerations,
                                gang))
            yield at, jobs, spec.duration


def parse_workload(text: str, file: str | None, config: FlotillaConfig) -> Workload:
    """Validate workload text against ``config``; the first problem becomes a :class:`ConfigError`."""
    return _validate(*load_yaml(text, file), config)


def load_workload(path: str | os.PathLike, config: FlotillaConfig) -> Workload:
    """:func:`parse_workload` on a file; an unreadable file is a ConfigError naming it (as for configs)."""
    return _validate(*read_yaml_file(path), config)


def _validate(data, source: SourceMap, config: FlotillaConfig) -> Workload:
    try:
        parsed = WorkloadFile.model_validate(data)
    except ValidationError as exc:
        raise source.from_validation(exc) from None
    return _check(parsed, config, source)


def _check(parsed: WorkloadFile, config: FlotillaConfig, source: SourceMap) -> Workload:
    queues: dict[str, Queue] = {q.name: q.to_core() for q in config.queues}
    seen: dict[str, int] = {}
    for i, q in enumerate(parsed.queues):
        if q.name in seen:
            raise source.error(("queues", i, "name"), f"duplicate queue {q.name!r} (first at queues[{seen[q.name]}])")
        seen[q.name] = i
        queues[q.name] = q.to_core()
    problem = next(iter(queue_tree_problems("queues", parsed.queues, others=config.queues)), None)
    if problem is not None:
        raise source.error(*problem)
    parents = inner_queues(queues.values())
    classes = [pc.name for pc in config.priority_classes]
    interned: dict[tuple, dict[str, int]] = {}
    entries: list[_Prepared] = []
    per_queue: dict[str, int] = {}
    for i, spec in enumerate(parsed.submissions):
        if spec.queue not in queues:
            raise source.error(("submissions", i, "queue"),
                               f"unknown queue {spec.queue!r}: expected one of the config's queues "
                               f"({', '.join(sorted(queues)) or 'none'}) or one added under queues:")
        if spec.queue in parents:
            raise source.error(("submissions", i, "queue"),
                               f"queue {spec.queue!r} has child queues; only leaf queues hold jobs")
        pc = spec.priority_class or config.default_priority_class
        if pc not in classes:
            raise source.error(("submissions", i, "priorityClass"),
                               f"unknown priority class {pc!r} (known: {', '.join(classes)})")
        if spec.gang is not None and spec.count % spec.gang.cardinality:
            raise source.error(("submissions", i, "gang", "cardinality"),
                               f"count {spec.count} is not a multiple of the gang cardinality {spec.gang.cardinality}")
        requests = interned.setdefault(tuple(sorted(spec.requests.items())), dict(spec.requests))
        entries.append(_Prepared(i, spec, pc, requests, dict(spec.node_selector),
                                 tuple(t.to_core() for t in spec.tolerations)))
        per_queue[spec.queue] = per_queue.get(spec.queue, 0) + spec.count * spec.times
    known = config_provided_names(config) | names_in(spec.requests for spec in parsed.submissions)
    error = source.first(unknown_resource_problems(queue_limit_names("queues", parsed.queues), known,
                                                   "no cluster has it and no job asks for it"))
    if error is not None:
        raise error
    total = sum(per_queue.values())
    return Workload(source.file, entries, list(queues.values()), total, per_queue)


__all__ = ["Submission", "Workload", "WorkloadFile", "load_workload", "parse_workload"]
