"""The log tails of preempted pods, read just before their delete and kept for ``finishedPodRetention``.

Kubernetes keeps no log of a deleted pod, so the end of each container's log
of a preempted pod of Flotilla's is read just before the pod is deleted
(:func:`read_tails`, outside the cluster's lock: the delete, and the room it
frees, waits for it at most ``VICTIM_LOG_TIMEOUT`` per container) and kept
here (:class:`VictimLogs`, under the cluster's lock) until its retention is
over. Written rule: all kept tails together stay within
``VICTIM_LOGS_TOTAL`` bytes; past it the oldest go first.
"""

from __future__ import annotations

from typing import Mapping

import structlog

log = structlog.get_logger("flotilla.kubernetes")

#: A preempted job's pod: what is kept of each container's log, read just before the pod is deleted (its last
#: VICTIM_LOG_BYTES, from its last VICTIM_LOG_LINES lines; at most VICTIM_LOG_CONTAINERS containers, each read
#: within VICTIM_LOG_TIMEOUT seconds), and the most the cluster keeps of all of them (the oldest go first).
VICTIM_LOG_BYTES = 64 * 1024
VICTIM_LOG_LINES = 2000
VICTIM_LOG_CONTAINERS = 4
VICTIM_LOG_TIMEOUT = 2.0
VICTIM_LOGS_TOTAL = 32 * 1024 * 1024


def read_tails(client, cluster: str, key: tuple[str, str],
               containers: tuple[str, ...]) -> tuple[dict[str, bytes], bool]:
    """The end of each container's log of pod ``key`` (container -> its last bytes), and whether any was cut; a
    container whose log cannot be read has none."""
    logs: dict[str, bytes] = {}
    cut = False
    for container in containers[:VICTIM_LOG_CONTAINERS]:
        try:
            response = client.pod_log(key[0], key[1], container=container,
                                       tail_lines=VICTIM_LOG_LINES, limit_bytes=4 * VICTIM_LOG_BYTES,
                                       read_timeout=VICTIM_LOG_TIMEOUT)
            try:
                text = response.read()
            finally:
                response.release_conn()
        except Exception as exc:   # no log to keep (KWOK's fake kubelet has none; a node gone): delete anyway
            log.info("kubernetes.victim_log_unread", cluster=cluster, pod=f"{key[0]}/{key[1]}",
                     container=container, error=str(exc)[:200])
            continue
        cut = cut or len(text) > VICTIM_LOG_BYTES
        logs[container] = text[-VICTIM_LOG_BYTES:]
    cut = cut or len(containers) > VICTIM_LOG_CONTAINERS
    return logs, cut


class VictimLogs:
    """Preempted pods' log tails, oldest first: pod id -> (until, "namespace/name", container -> bytes, cut); at most
    ``VICTIM_LOGS_TOTAL`` bytes in all (``size``)."""

    def __init__(self) -> None:
        self.kept: dict[str, tuple[float, str, dict[str, bytes], bool]] = {}
        self.size = 0

    def keep(self, pod_id: str, until: float, where: str, logs: dict[str, bytes], cut: bool) -> None:
        """Keep ``logs`` of pod ``pod_id`` (``where``: its ``namespace/name``) until ``until``, in place of any kept
        of it before; the oldest go while all of them pass ``VICTIM_LOGS_TOTAL``."""
        self.forget(pod_id)
        self.kept[pod_id] = (until, where, logs, cut)
        self.size += sum(map(len, logs.values()))
        while self.size > VICTIM_LOGS_TOTAL and self.kept:
            self.forget(next(iter(self.kept)))

    def forget(self, pod_id: str) -> None:
        kept = self.kept.pop(pod_id, None)
        if kept is not None:
            self.size -= sum(map(len, kept[2].values()))

    def expire(self, now: float) -> None:
        """Forget the tails whose retention is over."""
        if self.kept:
            for pod_id in [pod_id for pod_id, kept in self.kept.items() if kept[0] <= now]:
                self.forget(pod_id)

    def get(self, pod_id: str, now: float) -> tuple[str, Mapping[str, bytes], bool] | None:
        """Pod ``pod_id``'s kept tails (``namespace/name``, container -> last output, whether any was cut), or None
        when none are kept or their retention is over."""
        kept = self.kept.get(pod_id)
        if kept is None or kept[0] <= now:
            return None
        return kept[1], dict(kept[2]), kept[3]
