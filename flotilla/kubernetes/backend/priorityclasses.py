"""The priority classes of one cluster: the config's made sure of in the cluster, and the cluster's own as their watch
shows them.

Written rules: the config's classes that the cluster lacks are created
before the pod informer's first list, and again before each list until that
worked once, so a cluster unreachable at start still gets them; a class of
the cluster's own is never touched (:mod:`flotilla.kubernetes.priorityclasses`).
A pod names its job's class (``priorityClassName``) only when the class is
known to be there (:meth:`PriorityClasses.known`): a pod naming a missing
class would be refused by the API server. The cluster's own classes are
kept from their watch, with a version bumped at every change, for the
scheduler's view of them (called under the cluster's lock).
"""

from __future__ import annotations

from typing import Iterable

from flotilla.kubernetes.priorityclasses import PriorityClassTracker, setup_priority_classes


class PriorityClasses:
    """Cluster ``cluster``'s priority classes through ``client``; ``wanted``: the config's ``(name, priority,
    preemptible)`` tuples, created where missing."""

    def __init__(self, client, cluster: str, wanted: Iterable[tuple[str, int, bool]]) -> None:
        self.client = client
        self.cluster = cluster
        self.wanted = list(wanted)
        #: The names of the config's classes present in the cluster: the ones a pod may name.
        self.names: set[str] = set()
        self.made_sure = False
        #: The cluster's PriorityClass objects (flotilla.kubernetes.priorityclasses), from their own watch.
        self.tracker = PriorityClassTracker()

    def before_pods_list(self) -> None:
        """Create the config's classes the cluster lacks, until that worked once (module docstring)."""
        if not self.made_sure:
            self.made_sure = self.setup()

    def setup(self) -> bool:
        """Create the config's priority classes that the cluster lacks (never touching one of the cluster's own);
        False if the cluster could not be read."""
        names = setup_priority_classes(self.client, self.wanted, self.cluster)
        if names is None:
            return False
        self.names = names
        return True

    def known(self, name: str | None) -> bool:
        """Whether a pod may name class ``name``: it is one of the config's, present in the cluster."""
        return name in self.names

    def replace(self, items: list[dict]) -> None:
        self.tracker.replace(items)

    def on_event(self, event: str, obj: dict) -> None:
        self.tracker.on_event(event, obj)

    def view(self) -> tuple[int, list]:
        """(a version bumped at every change, the cluster's classes as
        :class:`~flotilla.kubernetes.priorityclasses.ClusterPriorityClass` objects)."""
        return self.tracker.version, list(self.tracker.classes.values())


__all__ = ["PriorityClasses"]
