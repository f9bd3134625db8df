"""``predicates``: may this job go on this node type (Kubernetes semantics).

* ``unschedulable`` nodes take no new jobs;
* every ``nodeSelector`` entry must equal the node's label;
* every ``NoSchedule`` and ``NoExecute`` taint must be tolerated
  (``PreferNoSchedule`` is only a preference and never refuses).

Resource fit is not a predicate: the node index answers it per node.
"""

from __future__ import annotations

from typing import Mapping

from flotilla.plugin import hookimpl, take_args

REFUSING_EFFECTS = ("NoSchedule", "NoExecute")


def check(job, node_type) -> str | None:
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


class Predicates:
    def __init__(self, args: Mapping | None = None):
        take_args(args)

    @hookimpl
    def flotilla_session_open(self, session):
        session.add_predicate(check)
