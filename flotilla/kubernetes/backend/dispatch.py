"""Which kinds a cluster watches, and what each listing and watch event of each kind changes, in which part
(called under the cluster's lock, from the informer threads of :mod:`~flotilla.kubernetes.backend.informers`).

Written rules. Nodes and pods are the cluster's own copy (nodes here, pods in
the pod cache): a node listing replaces every node, and a node gone from it
is deleted; a pod listing is taken in as events (each pod ``MODIFIED``, each
cached pod it lacks ``DELETED``), every job's newest attempt learnt first, so
that an earlier attempt's kept pod listed before it is old news. A node
changed (resized, Ready again) and a pod gone or finished may free room: the
starts held for that node are looked at at once, not a cycle later. Every
other kind is optional (its listing clears its last error): namespaces,
PodGroups, PriorityClasses, Jobs, JobSets, claims and volumes, and the
default spread selectors' objects (watched only when the config sets default
spread constraints). A claim's event looks only at the starts waiting for
that claim.

This part keeps nothing but the nodes; what an event means for a part is that
part's (each is handed its events here and decides).
"""

from __future__ import annotations

from typing import Callable, Mapping

import structlog

from flotilla.core.model import Node
from flotilla.kubernetes.backend.ledger import Ledger
from flotilla.kubernetes.backend.podcache import ENDED, PodCache
from flotilla.kubernetes.client import ApiError
from flotilla.kubernetes.intake import JOBS_PATH, JOBSETS_PATH, PODGROUPS_PATH, SELECTOR_INFORMERS
from flotilla.kubernetes.pods import ATTEMPT, JOB_ID, is_ours, node_from_object, node_ready, pod_phase
from flotilla.kubernetes.priorityclasses import PRIORITY_CLASSES_PATH
from flotilla.kubernetes.volumes import INFORMERS as VOLUME_INFORMERS

log = structlog.get_logger("flotilla.kubernetes")


def watched(node_selector: str | None, default_spread: bool) -> list[tuple[str, str, Mapping[str, str]]]:
    """The kinds a cluster watches, one informer each: ``(kind, path, list and watch parameters)``.

    ``node_selector`` limits the nodes; the default spread selectors' objects (services and controllers) are
    watched only when ``default_spread`` (the config sets default spread constraints).
    """
    node_params = {"labelSelector": node_selector} if node_selector else {}
    return [("nodes", "/api/v1/nodes", node_params), ("pods", "/api/v1/pods", {}),
            ("namespaces", "/api/v1/namespaces", {}), ("podgroups", PODGROUPS_PATH, {}),
            ("priorityclasses", PRIORITY_CLASSES_PATH, {}), ("jobs", JOBS_PATH, {}), ("jobsets", JOBSETS_PATH, {}),
            *((kind, path, {}) for kind, path in VOLUME_INFORMERS.items()),
            *((kind, path, {}) for kind, path in SELECTOR_INFORMERS.items() if default_spread)]


class Dispatch:
    """The rules of the module docstring for cluster ``cluster``.

    Kept here: ``nodes`` (name -> :class:`Node`, as the node watch shows them; changed in place, never replaced,
    so the parts handed it read the current nodes). Shared: ``cache`` (the pods), ``book`` (the jobs' attempts).
    The parts it hands events to: ``health`` (the informers' sync and errors), ``intake`` (the in-cluster pods
    and what they name), ``namespaces``, ``priority_classes``, ``volumes`` and ``volume_waits`` (the starts
    waiting for their claims), ``held`` (the held starts, read: which nodes have some), ``pod_events`` (what a
    pod's change means). Callables: ``node_changed(name, deleted=, ready=)`` (lost nodes,
    :mod:`~flotilla.kubernetes.backend.lostpods`), ``release_held(node)`` (the held starts that fit go).
    """

    def __init__(self, cluster: str, nodes: dict[str, Node], cache: PodCache, book: Ledger, *, health, intake,
                 namespaces, priority_classes, volumes, volume_waits, held, pod_events,
                 node_changed: Callable[..., None], release_held: Callable[[str], None]) -> None:
        self.cluster = cluster
        self.nodes = nodes
        self.cache = cache
        self.book = book
        self.health = health
        self.intake = intake
        self.namespaces = namespaces
        self.priority_classes = priority_classes
        self.volumes = volumes
        self.volume_waits = volume_waits
        self.held = held
        self.pod_events = pod_events
        self.node_changed = node_changed
        self.release_held = release_held

    # -- what the informer loop calls (flotilla.kubernetes.backend.informers.watch_kind) --------------------------
    def before_list(self, kind: str) -> None:
        if kind == "pods":
            self.priority_classes.before_pods_list()

    def absent(self, kind: str, exc: ApiError) -> bool:
        return self.health.absent(kind, exc, self.intake)

    def replace(self, kind: str, items: list[dict]) -> None:
        """Every object of ``kind``, as a listing shows them."""
        if kind == "priorityclasses":
            self.health.side_errors.pop(kind, None)
            self.priority_classes.replace(items)
            return
        if kind in ("jobs", "jobsets"):
            self.health.side_errors.pop(kind, None)
            self.intake.replace_jobs(items, jobsets=kind == "jobsets")
            return
        if kind == "nodes":
            self.replace_nodes(items)
        elif kind == "pods":
            self.replace_pods(items)
        elif kind in VOLUME_INFORMERS:
            self.health.side_errors.pop(kind, None)
            self.volumes.replace(kind, items)
            if self.volume_waits.waits:
                self.volume_waits.check()
            return
        elif kind in SELECTOR_INFORMERS:
            self.health.side_errors.pop(kind, None)
            self.intake.replace_selector_objects(kind, items)
            return
        elif kind == "namespaces":
            self.health.side_errors.pop(kind, None)
            self.namespaces.replace(items)
            live = {(obj.get("metadata") or {}).get("name") for obj in items}
            for name in [name for name in self.intake.namespaces if name not in live]:
                self.intake.on_namespace("DELETED", {"metadata": {"name": name}})
            for obj in items:
                self.intake.on_namespace("MODIFIED", obj)
            self.intake.namespaces_synced = True
            return
        else:
            live = {((obj.get("metadata") or {}).get("namespace"), (obj.get("metadata") or {}).get("name"))
                    for obj in items}
            for key in [key for key in self.intake.podgroups if key not in live]:
                self.intake.on_podgroup("DELETED", {"metadata": {"namespace": key[0], "name": key[1]}})
            self.health.side_errors.pop(kind, None)
            self.intake.set_podgroups_problem(None)
            for obj in items:
                self.intake.on_podgroup("MODIFIED", obj)
            self.intake.podgroups_synced = True
            return
        self.health.synced[kind] = True

    def on_event(self, kind: str, event: str, obj: dict) -> None:
        """One object of ``kind`` added, changed or deleted (``event``)."""
        if kind == "nodes":
            self.on_node(event, obj)
        elif kind == "pods":
            self.on_pod(event, obj)
        elif kind in VOLUME_INFORMERS:
            self.volumes.on_event(kind, event, obj)
            if self.volume_waits.waits and kind == "pvcs":
                self.volume_waits.claim_changed(obj)
        elif kind == "namespaces":
            self.namespaces.on_event(event, obj)
            self.intake.on_namespace(event, obj)
        elif kind in SELECTOR_INFORMERS:
            self.intake.on_selector_object(kind, event, obj)
        elif kind == "priorityclasses":
            self.priority_classes.on_event(event, obj)
        elif kind == "jobs":
            self.intake.on_job(event, obj)
        elif kind == "jobsets":
            self.intake.on_jobset(event, obj)
        else:
            self.intake.on_podgroup(event, obj)

    def failed(self, kind: str, exc: Exception) -> None:
        if kind in VOLUME_INFORMERS:
            self.volumes.changed()   # the claims' reason names the error
        self.health.failed(kind, exc)

    # -- nodes ---------------------------------------------------------------------------------------------------
    def replace_nodes(self, items: list[dict]) -> None:
        before = set(self.nodes)
        self.nodes.clear()
        for obj in items:
            self.on_node("ADDED", obj)
        for name in before - set(self.nodes):
            self.on_node("DELETED", {"metadata": {"name": name}})

    def on_node(self, kind: str, obj: dict) -> None:
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self.nodes.pop(name, None)
            self.node_changed(name, deleted=True, ready=False)
        else:
            self.node_changed(name, deleted=False, ready=node_ready(obj))
            try:
                self.nodes[name] = node_from_object(obj, self.cluster)
            except (KeyError, ValueError) as exc:
                log.warning("kubernetes.bad_node", cluster=self.cluster, node=name, error=str(exc))
        if name in self.held.by_node:   # resized: a held start may fit now
            self.release_held(name)

    # -- pods ----------------------------------------------------------------------------------------------------
    def replace_pods(self, items: list[dict]) -> None:
        live = set()
        # Every job's newest attempt first: an earlier attempt's kept pod listed before it is old news.
        for obj in items:
            if is_ours(obj):
                annotations = obj["metadata"].get("annotations") or {}
                try:
                    attempt = int(annotations.get(ATTEMPT, "0"))
                except ValueError:
                    continue
                job_id = annotations.get(JOB_ID) or obj["metadata"]["labels"][JOB_ID]
                if attempt > self.book.attempts.get(job_id, -1):
                    self.book.attempts[job_id] = attempt
        for obj in items:
            meta = obj["metadata"]
            live.add((meta.get("namespace", ""), meta["name"]))
            self.on_pod("MODIFIED", obj)
        self.intake.replace_pods({obj["metadata"].get("uid") for obj in items})
        for key in [key for key in self.cache.pods if key not in live]:
            old = self.cache.pods[key]
            self.on_pod("DELETED", {"metadata": {"namespace": key[0], "name": key[1]}, "_cached": old})

    def on_pod(self, kind: str, obj: dict) -> None:
        self.pod_events.on_pod_change(kind, obj)
        meta = obj["metadata"]
        self.volumes.on_pod((meta.get("namespace", ""), meta["name"]), None if kind == "DELETED" else obj,
                            pod_phase(obj) not in ENDED if kind != "DELETED" else False)
        if self.held.by_node:
            # A pod gone or finished frees room: the starts held for its node may go now, not a cycle later.
            old = obj.get("_cached")
            node = (obj.get("spec") or {}).get("nodeName") or (old.node if old is not None else None)
            for name in [node] if node is not None else list(self.held.by_node):
                if name in self.held.by_node:
                    self.release_held(name)


__all__ = ["Dispatch", "watched"]
