"""The cluster's namespaces as the namespace informer shows them: their labels, and which are being deleted.

Written rules: a namespace's labels are what pod rules match namespace
selectors against, and include the ``kubernetes.io/metadata.name`` label the
API server gives every namespace; the labels mapping is replaced, never
changed in place, so a snapshot may hand it out as it is. No Event is written
in a namespace being deleted (the API server refuses it, and nobody would
read it). Called under the cluster's lock.
"""

from __future__ import annotations

from typing import Mapping

from flotilla.core.podrules import NAMESPACE_NAME_LABEL


def namespace_labels(namespace: Mapping) -> dict[str, str]:
    """A Namespace object's labels (the API server gives each ``kubernetes.io/metadata.name``)."""
    meta = namespace.get("metadata") or {}
    labels = meta.get("labels") or {}
    return {NAMESPACE_NAME_LABEL: meta.get("name"), **{k: v for k, v in labels.items() if isinstance(v, str)}}


def terminating(namespace: Mapping) -> bool:
    """Whether a namespace object is being deleted."""
    return bool((namespace.get("metadata") or {}).get("deletionTimestamp")) \
        or (namespace.get("status") or {}).get("phase") == "Terminating"


class NamespaceView:
    """``labels`` (namespace -> its labels, a new mapping on every change) and ``terminating`` (the names of the
    namespaces being deleted)."""

    def __init__(self) -> None:
        self.terminating: set[str] = set()
        self.labels: dict[str, dict] = {}

    def replace(self, items: list[dict]) -> None:
        """Every namespace, as a listing shows them."""
        self.terminating = {obj["metadata"]["name"] for obj in items if terminating(obj)}
        labels = {(obj.get("metadata") or {}).get("name"): namespace_labels(obj) for obj in items}
        if labels != self.labels:
            self.labels = labels

    def on_event(self, event: str, obj: dict) -> None:
        """One namespace added, changed or deleted."""
        name = (obj.get("metadata") or {}).get("name")
        if event != "DELETED" and terminating(obj):
            self.terminating.add(name)
        else:
            self.terminating.discard(name)
        known = self.labels
        if event == "DELETED":
            if name in known:
                self.labels = {k: v for k, v in known.items() if k != name}
        elif known.get(name) != (labels := namespace_labels(obj)):
            self.labels = {**known, name: labels}

    def writable(self, namespace: str) -> bool:
        """False for a namespace being deleted (its watch says so): no Event is written there."""
        return namespace not in self.terminating
