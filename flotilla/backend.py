"""The public API for cluster backends: what a package needs to serve a cluster ``kind`` of its own.

A backend is an object with the three methods of :class:`ClusterBackend`
(``snapshot``, ``apply``, ``poll_events``) and a ``name``; whatever more it
can do it says by implementing the capability protocols below (each a
small :class:`typing.Protocol`: nothing to inherit or declare). A package
makes it known under its kind in the ``flotilla.backends`` entry-point group::

    [project.entry-points."flotilla.backends"]
    localprocess = "flotilla_localprocess:LocalProcessCluster"

The object named there is called once per cluster of that kind when a run
starts, as ``factory(name, args, options)``: ``name`` the cluster's name,
``args`` the cluster's ``args:`` as the factory's ``Args`` attribute (a
pydantic model class) read them (``None`` when it has no ``Args``, and then
the cluster may give none), ``options`` what the run offers every backend
(``clock``: the time to act on). The config is checked before: a kind no
package provides, or ``args`` its model refuses, is one error with the file,
line and field. docs/backends.md walks through writing one.

Stability promise
-----------------
Every name in ``__all__`` here is **stable across minor versions**, as the
plugin API's (:mod:`flotilla.plugin`): a name keeps its meaning, a protocol
its methods and their contracts, a type its fields; a minor version may add
(new capabilities, new optional fields, new options), never remove or
change. Everything else (``flotilla.core``, ``flotilla.service``,
``flotilla.kubernetes``, ...) is internal.
"""

from __future__ import annotations

from flotilla.core.backend import (FAILURE_CAUSES, ClusterBackend, ClusterDecisions, ClusterUnavailable, JobEvent,
                                   PodTemplate)
from flotilla.core.capabilities import (Availability, Capabilities, Closable, ClusterPriorityClasses,
                                        DeadlineEnforcement, DefaultNamespace, JobLogs, KeptLogs, NodeDrain,
                                        PodIntake, PodTemplates, Switchable, Syncing, capabilities_of)
from flotilla.core.decisions import Placement
from flotilla.core.model import HOSTNAME_LABEL, ClusterSnapshot, Job, JobState, Node, Taint
from flotilla.core.quantities import QuantityError, parse_duration, parse_quantity


def pod_number(pod_id: str) -> int:
    """The place of pod ``pod_id`` among its job's pods: ``JOB#N`` is pod N of a job of several, ``JOB`` the only."""
    _, _, number = pod_id.partition("#")
    return int(number) if number else 0


def job_of(pod_id: str) -> str:
    """The job a pod belongs to (its id without ``#N``)."""
    return pod_id.split("#", 1)[0]


__all__ = [
    "Availability", "Capabilities", "Closable", "ClusterBackend", "ClusterDecisions", "ClusterPriorityClasses",
    "ClusterSnapshot", "ClusterUnavailable", "DeadlineEnforcement", "DefaultNamespace", "FAILURE_CAUSES",
    "HOSTNAME_LABEL", "Job", "JobEvent", "JobLogs", "JobState", "KeptLogs", "Node", "NodeDrain", "Placement",
    "PodIntake", "PodTemplate", "PodTemplates", "QuantityError", "Switchable", "Syncing", "Taint", "capabilities_of",
    "job_of", "parse_duration", "parse_quantity", "pod_number",
]
