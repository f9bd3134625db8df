"""The informers: list once, then watch from the list's version, one thread per kind; and whether they are in sync.

Written rule (client-go's reflector): a watch that ends is watched again
from the last resource version seen (bookmarks included); the kind is listed
again only when the server says that version is gone (410), or when the
connection broke (after three abrupt ends of a flowing stream in a row),
with a backoff from 0.1 s doubling to 2 s. A failure seen while stopping is
no outage to report.

Nodes and pods decide whether the cluster can be read at all
(:class:`InformerHealth`): while either is not in sync with a reachable API
server, a snapshot raises ``ClusterUnavailable`` and the scheduler leaves the
cluster out of that cycle. Every other kind is optional: scheduling goes on
without it, its last error is kept (said once per distinct error), and a kind
the cluster lacks or Flotilla may not read (403, 404: the PodGroup CRD,
JobSets, the controllers behind default spread selectors) is looked for again
each minute, the waiting pods told what that costs them.

What a listing or an event means is the cluster's: :func:`watch_kind` hands
them over under the cluster's lock and keeps nothing of them.
"""

from __future__ import annotations

import threading
from typing import Callable, Mapping

import structlog

from flotilla.kubernetes.client import ApiError, Gone, KubeError, WatchBroken, forbidden_message
from flotilla.kubernetes.intake import PODGROUPS_PATH, SELECTOR_INFORMERS

log = structlog.get_logger("flotilla.kubernetes")

#: The informers the cluster cannot be read without.
REQUIRED = ("nodes", "pods")
#: Seconds before a kind the cluster lacks, or Flotilla may not read, is looked for again.
ABSENT_RETRY = 60.0


def watch_kind(kind: str, path: str, params: Mapping[str, str], *, cluster: str, client, stop: threading.Event,
               watch_timeout: int, lock, counters: dict, before_list: Callable[[str], None],
               on_list: Callable[[str, list], None], on_event: Callable[[str, str, dict], None],
               absent: Callable[[str, ApiError], bool], failed: Callable[[str, Exception], None]) -> None:
    """List, then watch ``kind`` at ``path`` from the list's version, until ``stop`` (module docstring).

    ``before_list(kind)`` runs before each listing; ``on_list(kind, items)`` and ``on_event(kind, type, object)``
    run under ``lock`` (``counters`` counts relists and watch events there); ``absent(kind, error)`` says whether
    an API error means a kind to look for again in a minute (True), else ``failed(kind, error)`` is told and the
    kind is listed again after the backoff.
    """
    backoff = 0.1
    broken = 0
    resource_version = None
    while not stop.is_set():
        try:
            if resource_version is None:
                before_list(kind)
                listing = client.request("GET", path, params=params or None, timeout=60)
                resource_version = listing["metadata"]["resourceVersion"]
                with lock:
                    counters["relists"] += 1
                    on_list(kind, listing.get("items", []))
                backoff = 0.1
            for event in client.watch(path, resource_version, watch_timeout, stop, **params):
                broken = 0
                obj = event.get("object") or {}
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if event["type"] != "BOOKMARK":
                    with lock:
                        counters["watch_events"] += 1
                        on_event(kind, event["type"], obj)
                if rv:
                    resource_version = rv
        except Gone:
            resource_version = None
        except ApiError as exc:
            if stop.is_set():
                return
            if absent(kind, exc):
                resource_version = None
                stop.wait(ABSENT_RETRY)
                continue
            failed(kind, exc)
            resource_version = None
            stop.wait(backoff)
            backoff = min(backoff * 2, 2.0)
        except WatchBroken as exc:
            if stop.is_set():
                return
            # A stream that was flowing ended abruptly: watch again from the last version seen. If the
            # server is really gone, connecting fails next and the cluster is marked unavailable then.
            broken += 1
            if broken <= 3:
                log.info("kubernetes.watch_broken", cluster=cluster, kind=kind, error=str(exc))
                stop.wait(0.05)
                continue
            failed(kind, exc)
            resource_version = None
            stop.wait(backoff)
            backoff = min(backoff * 2, 2.0)
        except (KubeError, ValueError, KeyError) as exc:
            if stop.is_set():
                return
            failed(kind, exc)
            resource_version = None
            stop.wait(backoff)
            backoff = min(backoff * 2, 2.0)


class InformerHealth:
    """Whether each required informer is in sync (``synced``), the cluster's read error (``error``), and the last
    error of each optional informer (``side_errors``, kind -> text; the claims' reasons name the volume ones)."""

    def __init__(self, cluster: str, lock) -> None:
        self.cluster = cluster
        self._lock = lock
        self.synced = {kind: False for kind in REQUIRED}
        self.error = "not synced yet"
        self.side_errors: dict[str, str] = {}
        #: Each required informer's last error said: the nodes' and the pods' retries alternate, and each kind's
        #: error is said once, not once per retry of the other.
        self._said: dict[str, str] = {}

    @property
    def available(self) -> bool:
        return all(self.synced.values())

    def failed(self, kind: str, exc: Exception) -> None:
        """An informer failed: an optional one's error is kept, a required one makes the cluster unreadable; each
        said once per distinct error, not once per retry."""
        text = forbidden_message(exc) if isinstance(exc, ApiError) and exc.status == 403 else str(exc)
        if kind not in self.synced:   # namespaces, PodGroups, PriorityClasses, Jobs: scheduling goes on
            if self.side_errors.get(kind) != text:   # once per distinct error, not once per retry
                self.side_errors[kind] = text
                log.warning("kubernetes.watch_failed", cluster=self.cluster, kind=kind, error=text)
            return
        with self._lock:
            was = self.synced[kind]
            changed = self._said.get(kind) != text
            self._said[kind] = text
            self.synced[kind] = False
            self.error = f"{kind}: {text}"
        if was or changed:   # once per distinct error of each kind, not once per retry
            log.warning("kubernetes.unavailable", cluster=self.cluster, error=text)

    def absent(self, kind: str, exc: ApiError, intake) -> bool:
        """Whether ``exc`` (listing or watching ``kind``) means a kind the cluster lacks or Flotilla may not read,
        to look for again in a minute; ``intake`` (the in-cluster pods' tracker) is told what goes without it."""
        if exc.status not in (403, 404):
            return False
        if kind in SELECTOR_INFORMERS:
            # Pods get default spread constraints without these objects' selectors; said once, looked for
            # again each minute.
            with self._lock:
                intake.selectors_synced.add(kind)
            if self.side_errors.get(kind) != str(exc):
                self.side_errors[kind] = str(exc)
                log.warning(f"kubernetes.{kind}_unreadable", cluster=self.cluster, error=forbidden_message(exc),
                            reason=f"default spread constraints do not read the selectors of {kind}")
            return True
        if kind in ("jobs", "jobsets"):
            # Pods are taken in without their Jobs' (JobSets') queue labels; said once (a cluster without
            # JobSets, quietly), looked for again each minute.
            with self._lock:
                setattr(intake, f"{kind}_synced", True)
            if self.side_errors.get(kind) != str(exc):
                self.side_errors[kind] = str(exc)
                if exc.status == 403 or kind == "jobs":
                    log.warning(f"kubernetes.{kind}_unreadable", cluster=self.cluster,
                                error=forbidden_message(exc), reason=f"the queue labels of {kind} are not read")
            return True
        if kind != "podgroups":
            return False
        # No PodGroup CRD (or no right to read it): pods naming a PodGroup are refused, saying so; looked
        # for again every minute, so installing the CRD later works without a restart.
        problem = (f"the PodGroup CRD ({PODGROUPS_PATH}) is not installed on cluster {self.cluster}"
                   if exc.status == 404 else f"cannot read PodGroups on cluster {self.cluster}: "
                                             f"{forbidden_message(exc)}")
        with self._lock:
            first = intake.podgroups_problem != problem
            intake.set_podgroups_problem(problem)
            intake.podgroups_synced = True
        if first:
            log.warning("kubernetes.podgroups_unavailable", cluster=self.cluster, reason=problem)
        return True
