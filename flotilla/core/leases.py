"""The lease rules, over ids and times: one model for every job source.

A job placed on a cluster holds a lease there. The rules, after Armada's
(a cluster renews the lease of every job it runs at every heartbeat):

* **Renewal**: a cluster's report (a cycle in which it answered) renews the
  leases of the jobs it runs.
* **Expiry**: a lease not renewed within ``lease.timeout`` seconds expires
  (:func:`lease_expired`, strictly past the timeout); the run is given up
  with the reason :func:`expiry_reason`.
* **Retries**: a run the platform lost (an expired lease, a pod lost) is a
  platform failure: the job is queued again while it has had fewer than
  ``lease.maxRetries`` retries, and fails after (:func:`decide`, with the
  job's and its queue's retry rules first where there are any).
* **Node lost**: a run whose node went away (cause ``NodeLost``) returns to
  its queue without using a retry (:func:`returns_without_retry`), unless
  a retry rule names that cause.
* **No job runs twice**: a pod a cluster reports for a job that holds no
  lease there any more (its lease expired, it runs elsewhere) is cancelled.

The service applies them through its store (:mod:`flotilla.service.leases`),
the in-memory runner (:mod:`flotilla.kubernetes.runner`) to its records.
Nothing here reads a store or a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

#: The cause of a pod lost with its node (a node deleted or gone): the platform's doing, no retry used.
NODE_LOST = "NodeLost"


@dataclass(frozen=True, slots=True)
class Failure:
    """What ended a run: ``platform`` for the platform's doing (lost, lease expired), with what the cluster said."""

    platform: bool
    exit_code: int | None = None
    cause: str = ""


#: An expired lease: a platform failure.
LEASE_EXPIRED = Failure(True, cause="LeaseExpired")


class RetryRule(Protocol):
    """A retry rule (flotilla.service.retry.Rule): whether it matches a failure, and what it decides."""

    retry: bool
    limit: int
    text: str

    def matches(self, failure: Failure) -> bool: ...


@dataclass(frozen=True, slots=True)
class Decision:
    """``retry`` or not; ``rule`` names the rule that decided (``""``: the defaults did), ``limit`` its retries."""

    retry: bool
    limit: int
    rule: str = ""

    def retries_left(self, retries: int) -> bool:
        """Whether a job that has had ``retries`` retries runs again."""
        return self.retry and retries < self.limit

    def retry_text(self, retries: int) -> str:
        """The ``queued`` event's reason: ``retry 1 of 3``, after the rule when one decided."""
        return f"{self.rule}: retry {retries} of {self.limit}" if self.rule else f"retry {retries} of {self.limit}"

    def fail_text(self, reason: str) -> str:
        """The ``failed`` event's reason: what happened, then why it is final."""
        if not self.retry:
            return f"{reason}; {self.rule}" if self.rule else reason
        gave_up = f"gave up after {self.limit} retries"
        return f"{reason}; {self.rule}: {gave_up}" if self.rule else f"{reason}; {gave_up}"


def decide(rules: Sequence[RetryRule], failure: Failure, max_retries: int) -> Decision:
    """The first rule of ``rules`` that matches ``failure``, else the defaults: platform failures retried up to
    ``max_retries`` times, the job's own failures not."""
    for rule in rules:
        if rule.matches(failure):
            return Decision(rule.retry, rule.limit, rule.text)
    return Decision(failure.platform, max_retries)


def lease_expired(renewed_at: float, now: float, timeout: float) -> bool:
    """Whether a lease last renewed at ``renewed_at`` has expired at ``now``: strictly more than ``timeout`` ago."""
    return renewed_at < now - timeout


def expiry_reason(cluster: str, renewed_at: float, now: float, timeout: float) -> str:
    """Why an expired lease's run was given up."""
    return f"lease on cluster {cluster} not renewed for {now - renewed_at:.0f}s (timeout {timeout:g}s)"


def lost_reason(cluster: str, reason: str) -> str:
    """Why a lost pod's run was given up (``reason``: the cluster's word)."""
    return f"lost on cluster {cluster}: {reason or 'no reason given'}"


def returns_without_retry(failure: Failure, rules: Sequence[RetryRule] = ()) -> bool:
    """Whether a lost run returns to its queue without using a retry: its node went away, and no retry rule
    names that cause."""
    return failure.cause == NODE_LOST and not any(rule.matches(failure) for rule in rules)


__all__ = ["Decision", "Failure", "LEASE_EXPIRED", "NODE_LOST", "RetryRule", "decide", "expiry_reason",
           "lease_expired", "lost_reason", "returns_without_retry"]
