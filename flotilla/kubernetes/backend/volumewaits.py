"""Claims bound before the pod: a start whose claims need binding first writes its volume choices, then waits,
holding no thread, until the claims' watch events show them bound (the writes on pool threads of their own, the
waits under the cluster's lock).

Written rules (kube-scheduler's volume binding, as
:mod:`flotilla.kubernetes.volumes` states it):

* a PV chosen for a claim is written its ``claimRef``; a PV changed since
  the informer saw it (409) is read again and written with its version
  while it is still free for the claim, three tries in all; one bound to
  another claim meanwhile voids the choice, and the job is ``lost``
  (retried), as is a write refused (403 said naming the verb and resource)
  or not made;
* each claim's event looks only at the starts waiting for that claim
  (``on_claim``); a start whose claims are all bound goes on to its pod
  (:mod:`flotilla.kubernetes.backend.starts`);
* a start waits at most ``timeout`` (``volumeBindTimeout``,
  kube-scheduler's ``bindTimeoutSeconds``), looked at by the periodic pass
  only once its time is up; then, or once a claim's provisioning failed
  (its ``selected-node`` removed), its job is ``returned`` to its queue
  with the cause ``VolumeBinding``, no retry used (kube-scheduler puts a
  pod whose PreBind timed out back in its queue, with no limit: the job
  did nothing wrong), and its choices are forgotten; the PVs already
  written stay its claims' (:mod:`flotilla.kubernetes.volumes`), so the
  next start waits for the same binding;
* a start stopped or started again meanwhile waits no more, saying
  nothing.
"""

from __future__ import annotations

from typing import Callable

from flotilla.core.model import Job
from flotilla.kubernetes.backend.ledger import Ledger
from flotilla.kubernetes.client import ApiError, Unreachable, forbidden_message
from flotilla.kubernetes.volumes import SELECTED_NODE


def volume_writers(workers: int) -> int:
    """How many threads write the volume choices of starts, beside the ``workers`` that write pods (the cluster's
    pool for them, and its client's connections)."""
    return max(2, workers // 4)

#: The cause of a start returned because its claims were not bound in time (the label of
#: ``flotilla_binds_returned_total``).
VOLUME_BINDING = "VolumeBinding"


class VolumeWaits:
    """The starts of cluster ``cluster`` waiting for their claims (module docstring).

    ``lock``: the cluster's lock; ``book``: its ledger; ``volumes``: its
    :class:`~flotilla.kubernetes.volumes.VolumeState`; ``client`` writes the choices. Callables: ``start_pod(job,
    node, attempt, template, submit)`` a start whose claims are bound; ``create_failed(job, node, kind, reason)``
    a start whose volume writes were refused; ``submit(fn, *args)`` a pod write for the pool.
    """

    def __init__(self, lock, book: Ledger, volumes, client, clock: Callable[[], float], timeout: float, *,
                 start_pod: Callable, create_failed: Callable, submit: Callable) -> None:
        self._lock = lock
        self.book = book
        self.volumes = volumes
        self.client = client
        self.clock = clock
        #: How long a start waits for its claims to be bound before its job returns to its queue (kube-scheduler's
        #: bindTimeoutSeconds, 600 s by default).
        self.timeout = timeout
        self.start_pod = start_pod
        self.create_failed = create_failed
        self.submit = submit
        #: The starts waiting for their claims to be bound: job id -> (job, node, attempt, template, choices, start
        #: count, deadline).
        self.waits: dict[str, tuple] = {}
        #: claim key -> the jobs of ``waits`` waiting for it: a claim's event looks at its own jobs only
        self.on_claim: dict[str, set[str]] = {}

    def start(self, job: Job, node: str, attempt: int, template, choices, started: int, work: list[tuple]) -> None:
        """A start whose claims are bound first (under the lock; its choices assumed): its volume writes go to
        ``work`` (``(bind, *args)``, for the volume writers), or, written already (a start given back and placed
        again while the PV controller binds), it waits for its claims at once, not behind other starts' writes."""
        if self._nothing_to_write(choices, node):
            self.await_claims(job, node, attempt, template, choices, started)
            return
        work.append((self.bind, job, node, attempt, template, choices, started))

    def bind(self, job: Job, node: str, attempt: int, template, choices, started: int) -> None:
        """Write the placement's volume choices (pool thread), then wait for the job's claims to be bound."""
        try:
            with self._lock:
                writes = self.volumes.bind_requests(choices, node)
            for path, patch in writes:
                ref = patch.get("spec", {}).get("claimRef")
                for tries in range(3):
                    try:
                        self.client.patch(path, patch)
                        break
                    except ApiError as exc:
                        # A PV changed since the informer saw it (its phase set, say): read it again and write with
                        # its version while it is still free for the claim; taken meanwhile, the choice is void.
                        if exc.status != 409 or ref is None or tries == 2:
                            raise
                        version = self.volumes.still_free(self.client.get(path), f"{ref['namespace']}/{ref['name']}")
                        if version is None:
                            raise LookupError(f"{path.rsplit('/', 1)[-1]} was bound to another claim meanwhile") \
                                from None
                        patch["metadata"]["resourceVersion"] = version
                if ref is not None:   # taken until the PV informer shows it (VolumeState.written)
                    with self._lock:
                        self.volumes.wrote(path.rsplit("/", 1)[-1], f"{ref['namespace']}/{ref['name']}")
        except (LookupError, ApiError, Unreachable) as exc:
            why = forbidden_message(exc) if isinstance(exc, ApiError) and exc.status == 403 else str(exc)
            with self._lock:
                self.volumes.forget(choices)
            self.create_failed(job, node, "lost", f"binding volumes: {why}")
            return
        with self._lock:
            self.await_claims(job, node, attempt, template, choices, started)

    def _nothing_to_write(self, choices, node: str) -> bool:
        """Whether binding ``choices`` on ``node`` needs no API write (under the lock)."""
        try:
            return not self.volumes.bind_requests(choices, node)
        except LookupError:
            return False   # the writer says why

    def await_claims(self, job: Job, node: str, attempt: int, template, choices, started: int) -> None:
        """Wait for the job's claims to be bound, then start its pod (under the lock; the writes are done)."""
        if self.book.starts.get(job.id) != started or job.id not in self.book.inflight:
            self.volumes.forget(choices)
            return
        self.waits[job.id] = (job, node, attempt, template, choices, started, self.clock() + self.timeout)
        for claim in job.claims:
            self.on_claim.setdefault(self.volumes.qualified(claim), set()).add(job.id)
        self.check((job.id,))

    def check(self, job_ids=None, expired_only: bool = False) -> None:
        """Start the waiting jobs whose claims are all bound; return to its queue one whose binding failed or timed
        out (under the lock). ``job_ids``: only these (the jobs waiting for a claim that changed); None: all.
        ``expired_only``: the claims of a job are looked at only once its time is up (the periodic pass: a claim's
        binding is seen through its own event)."""
        now = self.clock()
        waits = self.waits
        for job_id in list(waits if job_ids is None else job_ids):
            wait = waits.get(job_id)
            if wait is None:
                continue
            job, node, attempt, template, choices, started, deadline = wait
            if self.book.starts.get(job_id) != started or job_id not in self.book.inflight:
                self._end(job_id)   # stopped or started again since
                self.volumes.forget(choices)
                continue
            if expired_only and now < deadline:
                continue
            failed = [claim for claim, pv in choices if not pv and self.volumes.provisioning_failed(claim, node)]
            unbound = self.volumes.unbound(job.claims)
            if not unbound:
                self._end(job_id)
                self.start_pod(job, node, attempt, template, lambda task: self.submit(*task))
                continue
            if failed:
                why = f"provisioning failed for PVC {', '.join(failed)} (its {SELECTED_NODE} was removed)"
            elif now >= deadline:
                why = (f"claims not bound within volumeBindTimeout {self.timeout:g}s: "
                       f"{', '.join(unbound)}")
            else:
                continue
            self._end(job_id)
            self.volumes.forget(choices)
            self.book.inflight.pop(job_id, None)
            self.book.kill_on_create.pop(job_id, None)
            if self.book.stopping.pop(job_id, None) is None:
                self.book.emit(job_id, "returned", node, f"binding volumes: {why}", run=started,
                               cause=VOLUME_BINDING)

    def _end(self, job_id: str) -> None:
        """Take ``job_id``'s wait out of ``waits`` and of its claims' ``on_claim``."""
        job = self.waits.pop(job_id)[0]
        for claim in job.claims:
            key = self.volumes.qualified(claim)
            jobs = self.on_claim.get(key)
            if jobs is not None:
                jobs.discard(job_id)
                if not jobs:
                    del self.on_claim[key]

    def claim_changed(self, obj: dict) -> None:
        """A claim's watch event: look at the starts waiting for that claim (under the lock)."""
        meta = obj.get("metadata") or {}
        waiting = self.on_claim.get(f"{meta.get('namespace', '')}/{meta.get('name', '')}")
        if waiting:
            self.check(waiting)


__all__ = ["VolumeWaits", "volume_writers"]
