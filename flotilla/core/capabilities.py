"""What a cluster backend can do beyond the three methods of :class:`~flotilla.core.backend.ClusterBackend`.

Every capability is one small :class:`typing.Protocol`. A backend has a
capability when it implements that protocol; nothing has to be declared
or inherited. Which ones each backend has is read once, when the backends
are made (:func:`capabilities_of`, kept by :class:`Backends`), and callers
ask the record (``backends.capabilities["east"].drain``), never the backend
object: a call site holds a typed reference or ``None``, so what a backend
must offer for a feature is written here, in one place, and a backend that
offers half of a protocol has none of it.

The capabilities and who uses them:

* :class:`PodIntake`: pods made in the cluster by others (``schedulerName``
  pods) become jobs; the service's intake step (``flotilla.service.intake``).
* :class:`ClusterPriorityClasses`: the cluster's own PriorityClass objects
  rank beside Flotilla's.
* :class:`PodTemplates`: starts come with the user's podSpecs
  (``ClusterDecisions.templates``), read from the store for this backend only.
* :class:`DeadlineEnforcement`: the cluster fails a job past its active
  deadline by itself; the service's own deadline is then a backstop.
* :class:`NodeDrain`: ``flotilla drain`` marks a node unschedulable on the
  cluster too.
* :class:`Availability` and :class:`Switchable`: whether the cluster can be
  read now (``GET /v1/status``), and an admin's stop and start of it (the
  simulated clusters' test and demo aid).
* :class:`Syncing`: the backend reads its cluster in the background; a run
  waits until it has (``simulate --real-time``).
* :class:`JobLogs`: the output of a job's pod, for ``flotilla logs``.
* :class:`KeptLogs`: the last output of pods the backend deleted (a
  preempted job's), kept for ``flotilla logs`` once the pod is gone.
* :class:`KubernetesApi`: the cluster is read through a Kubernetes API
  server (pod logs are read there).
* :class:`DefaultNamespace`: the namespace of jobs that name none.
* :class:`Closable`: something to release when the service stops.

Resolution runs :func:`isinstance` on ``runtime_checkable`` protocols: once
per backend, never per cycle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Protocol, runtime_checkable


@runtime_checkable
class PodIntake(Protocol):
    """Pods created in the cluster for Flotilla to schedule, and the notes it writes back on them."""

    def take_intake(self) -> tuple[list, dict[str, str]]:
        """Pods that arrived since the last call (``Arrival``s) and job id -> why, for pods that went."""

    def intake_resync(self) -> set[str]:
        """After a change of leader: the job ids of every pod waiting now (the next ``take_intake`` has all)."""

    def waiting_pods(self) -> list:
        """The pods waiting now, as ``take_intake`` gave them."""

    def report_waiting(self, notes) -> bool:
        """Tell waiting pods why they wait: ``(namespace, name, uid, reason)`` notes, ``reason`` a
        :class:`~flotilla.core.reasons.Reason` or words (``str(reason)`` words it; equal values read the same)."""

    def report_podgroups(self, reasons: Mapping[tuple[str, str], tuple[str, bool]]) -> int:
        """Tell PodGroups why their pods wait: ``(namespace, name) -> (message, stored)``."""

    def take_bound(self) -> dict[str, tuple[str, bool]]:
        """Pods Flotilla bound while their jobs were still queued (found since the last call)."""

    def bound_in_cluster(self) -> dict[str, tuple[str, bool]]:
        """Every such pod the cluster shows now (after a change of leader)."""

    def delete_cancelled(self, pods) -> int:
        """Delete waiting pods whose jobs were cancelled: ``(namespace, name, uid, message)``."""


@runtime_checkable
class ClusterPriorityClasses(Protocol):
    def cluster_priority_classes(self) -> tuple[int, list]:
        """``(version, classes)``: the cluster's PriorityClass objects; the version changes when they do."""


@runtime_checkable
class PodTemplates(Protocol):
    #: True: starts must come with the user's podSpecs. A backend whose ``needs_templates`` is false has no
    #: such capability.
    needs_templates: bool


@runtime_checkable
class DeadlineEnforcement(Protocol):
    #: True: the cluster fails a job past its active deadline by itself (false: no such capability).
    enforces_deadlines: bool


@runtime_checkable
class NodeDrain(Protocol):
    def set_unschedulable(self, node: str, flag: bool) -> None:
        """Drain (``True``) or uncordon a node; raise if the cluster cannot be written (tried again next cycle)."""


@runtime_checkable
class Availability(Protocol):
    #: Whether the cluster can be read now.
    available: bool


@runtime_checkable
class Switchable(Protocol):
    def set_available(self, available: bool) -> None:
        """Stop (``False``) or start the cluster: a stopped cluster cannot be read or written."""


@runtime_checkable
class Syncing(Protocol):
    def wait_synced(self, timeout: float) -> bool:
        """Wait until the cluster has been read; False after ``timeout`` seconds without."""

    @property
    def sync_error(self) -> str:
        """Why it cannot be read yet, for the error a run gives up with."""


@runtime_checkable
class JobLogs(Protocol):
    def job_log(self, pod_id: str, tail: int | None, follow: bool) -> Iterator[bytes]:
        """The output of the pod ``pod_id`` (a job id, or ``JOB#N`` for pod N of a job of several pods).

        Chunks of bytes; ``tail``: only its last lines; ``follow``: keep
        yielding output until the pod ends. Raise ``LookupError`` (its text
        is the answer) when this cluster has no output of that pod.
        """


@runtime_checkable
class KeptLogs(Protocol):
    def kept_log(self, pod_id: str) -> tuple[str, Mapping[str, bytes], bool] | None:
        """What was kept of the pod ``pod_id``'s log when the backend deleted it (a preempted job's pod): its
        ``namespace/name``, each container's last output by container name, and whether any was cut to its bound;
        None when nothing is kept (never deleted by the backend, or kept past its time)."""


@runtime_checkable
class KubernetesApi(Protocol):
    #: A :class:`flotilla.kubernetes.client.KubeClient` of the cluster's API server.
    client: Any


@runtime_checkable
class DefaultNamespace(Protocol):
    #: Where jobs that name no namespace go on this cluster.
    namespace: str


@runtime_checkable
class Closable(Protocol):
    def close(self) -> None:
        """Release threads, connections and processes; called once when the service stops."""


@dataclass(frozen=True, slots=True)
class Capabilities:
    """One backend's capabilities: the backend itself under each it has, ``None`` (or False) for the others."""

    intake: PodIntake | None = None
    priority_classes: ClusterPriorityClasses | None = None
    templates: bool = False
    enforces_deadlines: bool = False
    drain: NodeDrain | None = None
    availability: Availability | None = None
    switch: Switchable | None = None
    sync: Syncing | None = None
    logs: JobLogs | None = None
    kept_logs: KeptLogs | None = None
    kubernetes_api: KubernetesApi | None = None
    namespace: str | None = None
    close: Closable | None = None

    def names(self) -> list[str]:
        """The capabilities held, by field name (for messages and docs)."""
        return [name for name in self.__slots__ if getattr(self, name) not in (None, False)]


def capabilities_of(backend: object) -> Capabilities:
    """The capabilities ``backend`` has, read from what it implements."""

    def have(protocol: type) -> Any:
        return backend if isinstance(backend, protocol) else None

    return Capabilities(
        intake=have(PodIntake),
        priority_classes=have(ClusterPriorityClasses),
        templates=bool(isinstance(backend, PodTemplates) and backend.needs_templates),
        enforces_deadlines=bool(isinstance(backend, DeadlineEnforcement) and backend.enforces_deadlines),
        drain=have(NodeDrain),
        availability=have(Availability),
        switch=have(Switchable),
        sync=have(Syncing),
        logs=have(JobLogs),
        kept_logs=have(KeptLogs),
        kubernetes_api=have(KubernetesApi),
        namespace=backend.namespace if isinstance(backend, DefaultNamespace) else None,
        close=have(Closable),
    )


class Backends(dict):
    """The cluster backends by name, with each one's :class:`Capabilities` read once (``capabilities``).

    A plain ``dict`` of backends is accepted wherever this is, and read
    into one (:meth:`of`). The mapping itself is not changed after it is
    made: a new set of backends is a new ``Backends``.
    """

    def __init__(self, backends: Mapping[str, Any] = ()):
        super().__init__(backends)
        self.capabilities: dict[str, Capabilities] = {name: capabilities_of(b) for name, b in self.items()}

    @classmethod
    def of(cls, backends: Mapping[str, Any] | None) -> "Backends":
        """``backends`` itself when it is a :class:`Backends` already, else one made from it."""
        return backends if isinstance(backends, Backends) else cls(backends or {})

    def having(self, capability: str) -> dict[str, Any]:
        """Name -> the backend, for the backends that have ``capability`` (a :class:`Capabilities` field), in name
        order."""
        return {name: getattr(self.capabilities[name], capability) for name in sorted(self)
                if getattr(self.capabilities[name], capability) not in (None, False)}


__all__ = ["Availability", "Backends", "Capabilities", "Closable", "ClusterPriorityClasses", "DeadlineEnforcement",
           "DefaultNamespace", "JobLogs", "KeptLogs", "KubernetesApi", "NodeDrain", "PodIntake", "PodTemplates",
           "Switchable", "Syncing", "capabilities_of"]
