"""What the store's parts share besides the database: job states, refusals, and the records they take and give.

Jobs move through these states; every move appends an event to the job
set's log, in the same transaction::

    queued -> leased -> pending -> running -> succeeded | failed
       ^        |          |          |
       +--------+----------+----------+  lease-expired (retries left) / lost, run-failed (a retry policy)
    any active state -> cancelled | preempted | failed
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from flotilla.service.schema import jobs

QUEUED, LEASED, PENDING, RUNNING = "queued", "leased", "pending", "running"
SUCCEEDED, FAILED, PREEMPTED, CANCELLED = "succeeded", "failed", "preempted", "cancelled"
STATES = (QUEUED, LEASED, PENDING, RUNNING, SUCCEEDED, FAILED, PREEMPTED, CANCELLED)
ACTIVE = (LEASED, PENDING, RUNNING)
TERMINAL = (SUCCEEDED, FAILED, PREEMPTED, CANCELLED)
NONTERMINAL = (QUEUED, *ACTIVE)

#: ``jobs.stop_requested``: nothing asked, a cancel, the active deadline passed.
STOP_NONE, STOP_CANCEL, STOP_DEADLINE = 0, 1, 2


class StoreError(Exception):
    """Base of the store's refusals; ``status`` is the HTTP status the API answers with."""

    status = 400


class NotFound(StoreError):
    status = 404


class Conflict(StoreError):
    status = 409


class Fenced(StoreError):
    """A scheduler wrote after losing the lead (its term is over): nothing of that transaction was stored."""

    status = 409


@dataclass(frozen=True, slots=True)
class Rejection:
    """One reason a submission is refused, naming the job (index, clientId) and the field."""

    index: int | None
    client_id: str | None
    field: str
    message: str

    def text(self) -> str:
        if self.index is None:
            who = "submission"
        else:
            who = f"job {self.index}" + (f" (clientId {self.client_id!r})" if self.client_id is not None else "")
        return f"{who}: {self.field}: {self.message}" if self.field else f"{who}: {self.message}"

    def to_dict(self) -> dict:
        return {"index": self.index, "clientId": self.client_id, "field": self.field, "message": self.message,
                "text": self.text()}


class SubmissionRejected(StoreError):
    """The submission is refused as a whole; nothing was stored."""

    status = 422

    def __init__(self, rejections: Sequence[Rejection]):
        self.rejections = list(rejections)
        super().__init__("; ".join(r.text() for r in self.rejections[:20])
                         + (f"; and {len(self.rejections) - 20} more" if len(self.rejections) > 20 else ""))


@dataclass(slots=True)
class Pod:
    requests: dict[str, int]
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict] = field(default_factory=list)
    #: ``[protocol, port]`` pairs the pod binds on its node (no two pods on one node share one).
    host_ports: list[list] = field(default_factory=list)
    #: The podSpec's ``affinity.nodeAffinity`` (API field names), checked at submission; None: none.
    node_affinity: dict | None = None
    #: The pod's labels (the job's), which other pods' affinity and spread select by.
    labels: dict[str, str] = field(default_factory=dict)
    #: The podSpec's pod affinity, anti-affinity and spread constraints (``{affinity: {podAffinity,
    #: podAntiAffinity}, topologySpreadConstraints}``, API field names), checked at submission; None: none.
    pod_rules: dict | None = None
    #: The PersistentVolumeClaims the pod mounts (``namespace/name``, or ``name`` for the cluster's namespace).
    claims: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"requests": self.requests}
        if self.node_selector:
            out["nodeSelector"] = self.node_selector
        if self.tolerations:
            out["tolerations"] = self.tolerations
        if self.host_ports:
            out["hostPorts"] = self.host_ports
        if self.node_affinity:
            out["nodeAffinity"] = self.node_affinity
        if self.labels:
            out["labels"] = self.labels
        if self.pod_rules:
            out["podRules"] = self.pod_rules
        if self.claims:
            out["claims"] = self.claims
        return out


@dataclass(slots=True)
class NewJob:
    """A validated job, ready to store (see :mod:`flotilla.service.jobspec`)."""

    index: int
    client_id: str | None
    priority: int
    priority_class: str
    pods: list[Pod]
    grace_period: float
    deadline: float
    annotations: dict[str, str] = field(default_factory=dict)
    spec: dict = field(default_factory=dict)
    gang_id: str | None = None
    gang_cardinality: int | None = None
    gang_pods: int | None = None
    #: The job's own retry rules (dicts as the job spec gives them), tried before its queue's.
    retry_policy: list[dict] = field(default_factory=list)


@dataclass(slots=True)
class Submitted:
    index: int
    id: str
    client_id: str | None
    existing: bool


@dataclass(slots=True)
class QueuedJob:
    """A job as the scheduling loop reads it: what scheduling needs of the row (no spec, no history)."""

    id: str
    queue: str
    job_set: str
    priority: int
    priority_class: str
    submitted: float
    pods: list[dict]
    npods: int
    gang_id: str | None
    gang_pods: int | None
    annotations: dict
    grace_period: float
    deadline: float


#: The columns of a :class:`QueuedJob`, in its fields' order (an active job's read starts with them).
QUEUED_COLUMNS = (jobs.c.id, jobs.c.queue, jobs.c.job_set, jobs.c.priority, jobs.c.priority_class,
                  jobs.c.submitted, jobs.c.pods, jobs.c.npods, jobs.c.gang_id, jobs.c.gang_pods,
                  jobs.c.annotations, jobs.c.grace_period, jobs.c.deadline)


def queued_jobs(rows, loads: Callable[[str], Any]) -> list[QueuedJob]:
    """Rows of :data:`QUEUED_COLUMNS` as records, their JSON parsed by ``loads``."""
    return [QueuedJob(r[0], r[1], r[2], r[3], r[4], r[5], loads(r[6]), r[7], r[8], r[9], loads(r[10]), r[11], r[12])
            for r in rows]


def retiring_reason(name: str) -> str:
    """Why a retiring queue refuses a new job (the submission's and the pod's reason)."""
    return (f"queue {name!r} was removed from the configuration: it takes no new jobs, and is removed "
            f"once its unfinished jobs finish")
