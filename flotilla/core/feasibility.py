"""Kubernetes feasibility: may a job go on nodes of this type at all.

The session registers :func:`node_type_refusal` as its first predicate,
before any plugin's, so these rules hold whatever the config's plugin list:

* ``unschedulable`` nodes take no new jobs;
* every ``NoSchedule`` and ``NoExecute`` taint must be tolerated
  (``PreferNoSchedule`` is only a preference and never refuses);
* every ``nodeSelector`` entry must equal the node's label;
* required node affinity: one of its terms must match the node
  (:mod:`flotilla.core.nodeaffinity`; the label keys it reads are indexed,
  so node types tell them apart, and the node's name when it uses
  ``matchFields``).

The checks run in kube-scheduler's filter order (NodeUnschedulable,
TaintToleration, NodeAffinity) and a refusal is the cause its filter names
(a :class:`~flotilla.core.reasons.Reason`, worded as the filter words it), so
that a reason counts each node under the same cause kube-scheduler would
(``1 node(s) had untolerated taint {gpu: yes}``).

Plugins may add predicates of their own (all must agree); none can lift
these. Resource fit is not decided here: the node index answers it per node;
:func:`never_fits` says when no node could ever hold a job, even empty.
"""

from __future__ import annotations

from flotilla.core.quantities import format_quantity
from flotilla.core.reasons import TOO_MANY_PODS, Reason, insufficient, make, untolerated_taint

REFUSING_EFFECTS = ("NoSchedule", "NoExecute")

#: kube-scheduler's causes, worded as they follow a count of nodes (``3 node(s) were unschedulable``).
UNSCHEDULABLE = make("unschedulable")
NOT_SELECTED = make("node_selector")
PORTS_TAKEN = make("host_ports")
#: A node a plugin's node filter refused (the reserve action keeps reserved nodes for the jobs they wait for).
FILTERED = make("node_filter")


def node_type_refusal(job, node_type) -> Reason | None:
    """Why ``job`` may not go on nodes of ``node_type`` (the cause Kubernetes' filter names), or None if it may."""
    if node_type.unschedulable:
        return UNSCHEDULABLE
    for taint in node_type.taints:
        if taint.effect in REFUSING_EFFECTS and not any(t.tolerates(taint) for t in job.tolerations):
            return untolerated_taint(taint.key, taint.value)
    for key, value in job.node_selector.items():
        if node_type.labels.get(key) != value:
            return NOT_SELECTED
    affinity = job.affinity
    if affinity is not None and not affinity.allows(node_type.labels):
        return NOT_SELECTED
    return None


def never_fits(session, job) -> Reason | str | None:
    """Why no node of any cluster could run ``job`` even empty, or None if one could."""
    types, why = session.allowed_types(job)
    if not types:
        return why
    index = session.index
    return fits_no_node(session, session.vector(job), (i for t in types for i in index.types[t].nodes))


def fits_no_node(session, vec, positions) -> Reason | None:
    """Why ``vec`` fits none of the nodes at ``positions`` even empty (what it asks past the largest), or None."""
    index = session.index
    largest = [0] * len(vec)
    for i in positions:
        alloc = index.allocatable[i]
        if all(a <= f for a, f in zip(vec, alloc)):
            return None
        largest = [max(m, f) for m, f in zip(largest, alloc)]
    names = session.space.names
    short = [f"{names[r]} {format_quantity(a, names[r])} > largest {format_quantity(largest[r], names[r])}"
             for r, a in enumerate(vec) if a > largest[r]]
    return make("fits_no_node", ", ".join(short) or "no single node has all of " +
                ", ".join(f"{n} {format_quantity(a, n)}" for n, a in zip(names, vec) if a))


__all__ = ["FILTERED", "NOT_SELECTED", "PORTS_TAKEN", "REFUSING_EFFECTS", "TOO_MANY_PODS", "UNSCHEDULABLE",
           "fits_no_node", "insufficient", "never_fits", "node_type_refusal", "untolerated_taint"]
