"""Bounded label values: every label of ``/metrics`` takes values from a fixed or configured set.

A label value that a request or a job spec chooses would let anyone grow the
exposition without bound (one series per distinct value) and would publish
what tenants wrote. So:

* the HTTP ``method`` label is one of :data:`METHODS` or ``other``;
* the ``route`` label is the matched route's template (``/v1/jobs/{job_id}``),
  or ``unmatched``; the ``code`` label is the status (100..599);
* why jobs wait is counted by the reason's code, one of
  :data:`REASON_CATEGORIES` (:mod:`flotilla.core.reasons`): a reason's text
  can quote job-spec values (a job's id in a gang's reason, a plugin's
  refusal) and node taints, and stays behind authorization (the queue's
  owners and administrators see it on the dashboard, the job pages and the
  pending API).

The code is made with the reason, where the rule that refused it is
(``flotilla/core``, ``flotilla/actions``, ``flotilla/plugins``); its words are
never read to count it, so a wording may change without moving a job to
another category. A reason a plugin outside this package words itself (a
string) counts as ``other``.
"""

from __future__ import annotations

from flotilla.core.reasons import CODES, OTHER, code_of

#: The methods counted under their own name (RFC 9110 and PATCH); any other is ``other``.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT"})

#: Every value the ``reason`` label takes, in the order the dashboard lists them.
REASON_CATEGORIES = CODES


def method_label(method: str) -> str:
    """The ``method`` label of a request: its method if a known one, else ``other``."""
    return method if method in METHODS else OTHER


def reason_category(reason) -> str:
    """The category of a queued job's reason (a :class:`~flotilla.core.reasons.Reason`): its code, one of
    :data:`REASON_CATEGORIES`; a plugin's words are ``other``. Never the text itself."""
    return code_of(reason)


__all__ = ["METHODS", "OTHER", "REASON_CATEGORIES", "method_label", "reason_category"]
