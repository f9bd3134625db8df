"""Bounded label values: every label of ``/metrics`` takes values from a fixed or configured set.

A label value that a request or a job spec chooses would let anyone grow the
exposition without bound (one series per distinct value) and would publish
what tenants wrote. So:

* the HTTP ``method`` label is one of :data:`METHODS` or ``other``;
* the ``route`` label is the matched route's template (``/v1/jobs/{job_id}``),
  or ``unmatched``; the ``code`` label is the status (100..599);
* why jobs wait is counted by :func:`reason_category`, one of
  :data:`REASON_CATEGORIES`: a reason's text can quote job-spec values
  (a job's id in a gang's reason, a plugin's refusal) and node taints, and
  stays behind authorization (the queue's owners and administrators see it
  on the dashboard, the job pages and the pending API).

:data:`REASON_PREFIXES` is the one mapping from reason text to category. Its
entries follow where the texts are made: ``flotilla/core/whynot.py`` (node
shortfalls in kube-scheduler's words, not reached), ``flotilla/core/nodesearch.py``
(predicate refusals, no nodes), ``flotilla/core/feasibility.py`` (the causes'
words: node affinity/selector, taints, unschedulable, host ports, Insufficient), ``flotilla/core/podplacements.py``
(pod affinity, anti-affinity, topology spread), ``flotilla/core/limits.py`` (queue limits),
``flotilla/core/units.py`` (cordoned queues), ``flotilla/plugins`` (gang,
priorityclass), ``flotilla/actions`` (enqueue, reserve, allocate's gangs and
lookahead) and ``flotilla/service/roles/status.py`` (past the per-cycle
count). A reason from a plugin outside this package counts as ``other``.
"""

from __future__ import annotations

import re

#: The methods counted under their own name (RFC 9110 and PATCH); any other is ``other``.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT"})
OTHER = "other"

#: Every value :func:`reason_category` returns, in the order the dashboard lists them.
REASON_CATEGORIES = (
    "insufficient_resources",  # nodes match but none has room now, or none is ever large enough
    "node_selector",           # the nodeSelector matches no node (or node affinity, from a plugin)
    "taint",                   # the nodes that match have taints the job does not tolerate
    "unschedulable",           # the nodes that match are cordoned in Kubernetes (spec.unschedulable)
    "host_ports",              # the nodes with room hold a host port the job binds
    "pod_affinity",            # inter-pod affinity or anti-affinity (the job's, or running pods') refuses the nodes
    "topology_spread",         # the job's topology spread constraints refuse the nodes
    "no_nodes",                # there are no nodes at all
    "queue_limit",             # the queue (or a parent) is at one of its resource limits
    "queue_cordoned",          # the queue is cordoned: it schedules nothing new
    "gang",                    # the job's gang is incomplete or does not fit as a whole
    "priority_class",          # the job names a priority class the config does not have
    "reserved_nodes",          # the job waits for nodes reserved for it to drain
    "not_reached",             # the cycle stopped before this job (lookahead, or it was not examined)
    "not_counted",             # past the per-cycle count of reasons
    OTHER,                     # any other reason (a third-party plugin's)
)

#: The head of a node reason (``flotilla/core/whynot.py``): its causes follow, the most common first.
_AVAILABLE = r"\d+/\d+ nodes are available: "

#: (pattern, category), first match wins; matched against the start of a reason.
REASON_PREFIXES: tuple[tuple[re.Pattern, str], ...] = tuple((re.compile(pattern), category) for pattern, category in (
    (r"gang ", "gang"),
    (_AVAILABLE + r"\d+ Insufficient ", "insufficient_resources"),
    (_AVAILABLE + r"room taken by other jobs this cycle$", "insufficient_resources"),
    (r"fits no node: ", "insufficient_resources"),
    (_AVAILABLE + r"\d+ node\(s\) didn't match Pod's node affinity/selector", "node_selector"),
    (_AVAILABLE + r"\d+ node\(s\) had untolerated taint ", "taint"),
    (_AVAILABLE + r"\d+ node\(s\) were unschedulable", "unschedulable"),
    (_AVAILABLE + r"\d+ node\(s\) didn't have free ports ", "host_ports"),
    (_AVAILABLE + r"\d+ node\(s\) didn't (match pod (anti-)?affinity rules|satisfy existing pods anti-affinity)",
     "pod_affinity"),
    (_AVAILABLE + r"\d+ node\(s\) didn't match pod topology spread constraints", "topology_spread"),
    (r"no nodes$", "no_nodes"),
    (r"queue \S+ at its \S+ limit ", "queue_limit"),
    (r"queue \S+ is cordoned", "queue_cordoned"),
    (r"unknown priority class ", "priority_class"),
    (r"waiting for \d+ reserved node", "reserved_nodes"),
    (r"lookahead \d+ reached in queue ", "not_reached"),
    (r"not reached this cycle$", "not_reached"),
    (r"not examined in the last cycle$", "not_reached"),
    (r"not counted \(past the per-cycle limit\)$", "not_counted"),
))


def method_label(method: str) -> str:
    """The ``method`` label of a request: its method if a known one, else ``other``."""
    return method if method in METHODS else OTHER


def reason_category(reason: str) -> str:
    """The category of a queued job's reason (one of :data:`REASON_CATEGORIES`); never the text itself.

    A node reason (``0/N nodes are available: ...``) takes the category of its most common cause, the
    first one listed; a cause only a plugin words (its predicate's refusal, a node filter) is ``other``.
    """
    for pattern, category in REASON_PREFIXES:
        if pattern.match(reason):
            return category
    return OTHER


def reason_categories(per_reason: dict[str, int]) -> dict[str, int]:
    """``{reason text: jobs}`` summed per category (categories without jobs left out)."""
    out: dict[str, int] = {}
    for reason, count in per_reason.items():
        category = reason_category(reason)
        out[category] = out.get(category, 0) + count
    return out


__all__ = ["METHODS", "OTHER", "REASON_CATEGORIES", "REASON_PREFIXES", "method_label", "reason_category",
           "reason_categories"]
