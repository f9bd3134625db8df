"""Flotilla's word on the cluster's objects: Events and conditions on in-cluster pods, PodGroup statuses.

Written rule: these writes go through a small pool of their own (four
threads, made on first use), never the pool that creates and binds pods, so
a bind never queues behind them. The waiting pods' reasons come as one batch
per cycle; while the last batch is still being written a new one is dropped:
the loop hands over every reason again each cycle, so nothing is lost but a
repeat. What is written, and how often, is
:mod:`flotilla.kubernetes.conditions`' and
:mod:`flotilla.kubernetes.podgroupstatus`'.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Mapping

import structlog

from flotilla.kubernetes.client import KubeError
from flotilla.kubernetes.intake import PODGROUPS_PATH
from flotilla.kubernetes.podgroupstatus import PodGroupReporter, podgroup_status

log = structlog.get_logger("flotilla.kubernetes")


class Reporting:
    """The reporting pool (``pool``), the pod reporter and the PodGroup status writer of cluster ``cluster``.

    ``lock`` and ``stop`` are the cluster's: nothing is handed to the pool once the cluster is closing.
    ``writable(namespace)``: whether Events may be written in a namespace.
    """

    def __init__(self, client, cluster: str, component: str, lock, stop: threading.Event,
                 writable: Callable[[str], bool]) -> None:
        self.client = client
        self.cluster = cluster
        self.component = component
        self._lock = lock
        self._stop = stop
        self._writable = writable
        self.pool: ThreadPoolExecutor | None = None
        self._batch: list = []                          # the futures of the waiting pods' batch being written
        self._reporter = None
        self._groups: PodGroupReporter | None = None    # PodGroup statuses (flotilla.kubernetes.podgroupstatus)

    @property
    def reporter(self):
        """The :class:`~flotilla.kubernetes.conditions.PodReporter` writing Flotilla's word onto in-cluster pods."""
        if self._reporter is None:
            from flotilla.kubernetes.conditions import PodReporter
            self._reporter = PodReporter(self.client, component=self.component, writable=self._writable)
        return self._reporter

    def forget(self, uid: str) -> None:
        """Pod ``uid`` is gone: nothing more is said of it."""
        if self._reporter is not None:
            self._reporter.forget(uid)

    def _pool(self) -> ThreadPoolExecutor:
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix=f"kube-{self.cluster}-report")
        return self.pool

    def submit(self, write: Callable, *args) -> None:
        """Hand a write of Flotilla's word on a pod (an Event, a nomination) to the reporting pool, never the binds'."""
        with self._lock:
            if self._stop.is_set():
                return
            self._pool().submit(write, *args)

    def waiting(self, notes) -> bool:
        """Tell waiting in-cluster pods why they wait: ``(namespace, name, uid, reason)`` each, in four parts; False
        when the last batch is still being written (this one is dropped, module docstring)."""
        if not notes:
            return True
        with self._lock:
            if any(not future.done() for future in self._batch):
                return False
            pool = self._pool()
            batch = list(notes)
            size = -(-len(batch) // 4)
            self._batch = [pool.submit(self._write_waiting, batch[i:i + size]) for i in range(0, len(batch), size)]
        return True

    def _write_waiting(self, notes) -> None:
        reporter = self.reporter
        for namespace, name, uid, reason in notes:
            try:
                reporter.unschedulable(namespace, name, uid, reason)
            except Exception:  # the reporter logs its own failures; nothing here may stop the pool
                log.exception("kubernetes.report_failed", cluster=self.cluster, pod=f"{namespace}/{name}")

    def podgroups(self, intake, reasons: Mapping[tuple[str, str], tuple[str, bool]]) -> int:
        """Write the status of the PodGroups of ``intake`` (the in-cluster pods' tracker) whose pods changed, or
        whose waiting pods' reason is in ``reasons`` ((namespace, group) -> (reason, stored in its queue)), where
        it changed; returns how many writes were started."""
        with self._lock:
            if intake.podgroups_problem is not None or self._stop.is_set():
                return 0
            if self._groups is None:
                self._groups = PodGroupReporter(self.client, PODGROUPS_PATH.rsplit("/", 1)[0])
            keys = intake.groups_changed | set(reasons)
            intake.groups_changed = set()
            writes = []
            for key in sorted(keys):
                group, members = intake.podgroups.get(key), intake.group_members.get(key)
                if group is None or not members:
                    continue
                reason, stored = reasons.get(key, (None, True))
                status = podgroup_status(group.min_member, members, reason, stored)
                if self._groups.claim(key, status):
                    writes.append((key, status))
        for key, status in writes:   # the reporting pool's: never queued before a bind
            self.submit(self._write_podgroup, key, status)
        return len(writes)

    def _write_podgroup(self, key, status) -> None:
        try:
            self._groups.write(key, status)
        except KubeError as exc:
            if getattr(exc, "status", None) != 404:
                log.warning("kubernetes.podgroup_status_failed", cluster=self.cluster, podgroup="/".join(key),
                            error=str(exc))

    def close(self) -> None:
        """Finish nothing more: the writes not started yet are dropped."""
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
