"""What the client's methods return: typed views of the API's JSON. Each keeps the JSON it was read from in
``raw`` (what ``--output json`` prints), so a field the server adds is never lost."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


def _raw() -> Any:
    return field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class SubmittedJob:
    """One job of a submission: its id, the clientId it was sent with, and whether that clientId existed."""

    id: str
    client_id: str | None = None
    existing: bool = False
    raw: Mapping[str, Any] = _raw()

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> SubmittedJob:
        return cls(data["id"], data.get("clientId"), bool(data.get("existing", False)), data)


@dataclass(frozen=True)
class Submission:
    """The answer to a submission: its jobs in file order."""

    jobs: tuple[SubmittedJob, ...]
    raw: Mapping[str, Any] = _raw()

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> Submission:
        return cls(tuple(SubmittedJob.parse(j) for j in data.get("jobs", [])), data)

    @property
    def ids(self) -> list[str]:
        return [job.id for job in self.jobs]


@dataclass(frozen=True)
class Job:
    """A job's record: state, placement, times (Unix seconds) and why it is where it is."""

    id: str
    queue: str
    job_set: str
    state: str
    owner: str | None = None
    client_id: str | None = None
    priority: int = 0
    priority_class: str | None = None
    cluster: str | None = None
    node: str | None = None
    reason: str | None = None
    retries: int = 0
    submitted: float | None = None
    started: float | None = None
    finished: float | None = None
    cancel_requested: bool = False
    #: A queued job's place in its queue's scheduling order as of the last cycle (1: next); None otherwise.
    position: int | None = None
    #: A queued job's reason code (``insufficient_resources``, ``taint``, ...): what a program reads, not ``reason``.
    reason_code: str | None = None
    raw: Mapping[str, Any] = _raw()

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> Job:
        return cls(id=data["id"], queue=data["queue"], job_set=data["jobSet"], state=data["state"],
                   owner=data.get("owner"), client_id=data.get("clientId"), priority=data.get("priority") or 0,
                   priority_class=data.get("priorityClass"), cluster=data.get("cluster"), node=data.get("node"),
                   reason=data.get("reason"), retries=data.get("retries") or 0, submitted=data.get("submitted"),
                   started=data.get("started"), finished=data.get("finished"),
                   cancel_requested=bool(data.get("cancelRequested", False)), position=data.get("position"),
                   reason_code=data.get("reasonCode"), raw=data)


@dataclass(frozen=True)
class PendingJob:
    """One job of a queue's pending list: its position (1: next), why it waits, and what orders it."""

    position: int
    id: str
    job_set: str
    reason: str
    priority: int = 0
    priority_class: str | None = None
    submitted: float | None = None
    #: The reason's code (``insufficient_resources``, ``taint``, ...): what a program reads, not ``reason``.
    reason_code: str | None = None
    raw: Mapping[str, Any] = _raw()

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> PendingJob:
        return cls(position=data["position"], id=data["id"], job_set=data.get("jobSet", ""),
                   reason=data.get("reason", ""), priority=data.get("priority") or 0,
                   priority_class=data.get("priorityClass"), submitted=data.get("submitted"),
                   reason_code=data.get("reasonCode"), raw=data)


@dataclass(frozen=True)
class QueuePending:
    """A queue's queued jobs from the head in scheduling order, as of cycle ``cycle``; ``queued``: how many now."""

    queue: str
    jobs: tuple[PendingJob, ...]
    queued: int = 0
    cycle: int | None = None
    time: float | None = None
    raw: Mapping[str, Any] = _raw()

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> QueuePending:
        return cls(queue=data["queue"], jobs=tuple(PendingJob.parse(j) for j in data.get("jobs", [])),
                   queued=data.get("queued") or 0, cycle=data.get("cycle"), time=data.get("time"), raw=data)


@dataclass(frozen=True)
class Cancellation:
    """Queued jobs cancelled at once, and active ones whose clusters were asked to stop them."""

    cancelled: tuple[str, ...]
    cancelling: tuple[str, ...]
    raw: Mapping[str, Any] = _raw()

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> Cancellation:
        return cls(tuple(data.get("cancelled", [])), tuple(data.get("cancelling", [])), data)


@dataclass(frozen=True)
class Event:
    """One event of a job set, in event-id order (``submitted``, ``queued``, ``leased``, ... ``succeeded``)."""

    id: int
    kind: str
    queue: str
    job_set: str
    job_id: str | None = None
    time: float | None = None
    cluster: str | None = None
    node: str | None = None
    reason: str | None = None
    pod_number: int | None = None
    raw: Mapping[str, Any] = _raw()

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> Event:
        return cls(id=data["id"], kind=data["kind"], queue=data.get("queue", ""), job_set=data.get("jobSet", ""),
                   job_id=data.get("jobId"), time=data.get("time"), cluster=data.get("cluster"),
                   node=data.get("node"), reason=data.get("reason"), pod_number=data.get("podNumber"), raw=data)


@dataclass(frozen=True)
class Queue:
    """A queue: weight, limits (fractions of the pool), owners, retry rules; ``jobs`` (counts by state) when
    described."""

    name: str
    weight: float = 1.0
    limits: Mapping[str, float] = field(default_factory=dict)
    owners: tuple[str, ...] = ()
    group_owners: tuple[str, ...] = ()
    parent: str | None = None
    cordoned: bool | None = None
    jobs: Mapping[str, int] | None = None
    #: Its retry policy's rules, as the API gives them (``{"exitCodes": [42], "action": "retry", "limit": 2}``).
    retry_policy: tuple[Mapping[str, Any], ...] = ()
    raw: Mapping[str, Any] = _raw()

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> Queue:
        return cls(name=data["name"], weight=data.get("weight", 1.0), limits=dict(data.get("limits") or {}),
                   owners=tuple(data.get("owners") or ()), group_owners=tuple(data.get("groupOwners") or ()),
                   parent=data.get("parent"), cordoned=data.get("cordoned"), jobs=data.get("jobs"),
                   retry_policy=tuple(data.get("retryPolicy") or ()), raw=data)


@dataclass(frozen=True)
class QueueDeletion:
    """A deleted queue: how many jobs its history held, and the jobs ``force`` cancelled."""

    deleted: str
    jobs: int
    cancelled: tuple[str, ...] = ()
    cancelling: tuple[str, ...] = ()
    raw: Mapping[str, Any] = _raw()

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> QueueDeletion:
        return cls(data["deleted"], data.get("jobs", 0), tuple(data.get("cancelled", [])),
                   tuple(data.get("cancelling", [])), data)


__all__ = ["Cancellation", "Event", "Job", "PendingJob", "Queue", "QueueDeletion", "QueuePending", "Submission",
           "SubmittedJob"]
