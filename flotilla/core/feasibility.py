"""Kubernetes feasibility: may a job go on nodes of this type at all.

The session registers :func:`node_type_refusal` as its first predicate,
before any plugin's, so these rules hold whatever the config's plugin list:

* ``unschedulable`` nodes take no new jobs;
* every ``nodeSelector`` entry must equal the node's label;
* every ``NoSchedule`` and ``NoExecute`` taint must be tolerated
  (``PreferNoSchedule`` is only a preference and never refuses).

Plugins may add predicates of their own (all must agree); none can lift
these. Resource fit is not decided here: the node index answers it per node.
"""

from __future__ import annotations

REFUSING_EFFECTS = ("NoSchedule", "NoExecute")


def node_type_refusal(job, node_type) -> str | None:
    """Why ``job`` may not go on nodes of ``node_type`` (Kubernetes' wording), or None if it may."""
    if node_type.unschedulable:
        return "unschedulable"
    for key, value in job.node_selector.items():
        if node_type.labels.get(key) != value:
            return f"didn't match nodeSelector {key}={value}"
    for taint in node_type.taints:
        if taint.effect in REFUSING_EFFECTS and not any(t.tolerates(taint) for t in job.tolerations):
            shown = f"{taint.key}={taint.value}" if taint.value else taint.key
            return f"had untolerated taint {shown}:{taint.effect}"
    return None
