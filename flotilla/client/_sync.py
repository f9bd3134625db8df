"""``Client``: the API over a blocking httpx client."""

from __future__ import annotations

import os
import time
from typing import Any, Iterable, Iterator, Mapping, Sequence

import httpx

from flotilla.client._requests import (Call, Calls, event_line, headers, log_params, queue_body,
                                       raise_for_error, read_job_file, resolve, watch_params)
from flotilla.client.errors import ConnectionFailed
from flotilla.client.models import Cancellation, Event, Job, Queue, QueueDeletion, QueuePending, Submission


class Client:
    """Flotilla's HTTP API, typed.

    ``url`` and ``token`` default to ``$FLOTILLA_URL`` / ``$FLOTILLA_TOKEN``, then the client config file
    (``~/.config/flotilla/client.yaml``), then ``http://127.0.0.1:8080`` and no token. Every method raises a
    subclass of :class:`~flotilla.client.ApiError` for an error answer (:class:`~flotilla.client.NotFound`,
    :class:`~flotilla.client.Invalid`, ...) carrying the API's error body, and
    :class:`~flotilla.client.ConnectionFailed` when the server cannot be reached. Use it as a context manager,
    or call :meth:`close`.
    """

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 60.0,
                 transport: httpx.BaseTransport | None = None):
        self.url, self.token = resolve(url, token)
        self.http = httpx.Client(base_url=self.url, headers=headers(self.token), timeout=timeout,
                                 transport=transport)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _send(self, call: Call) -> Any:
        try:
            response = self.http.request(call.method, call.path, **call.request_args())
        except httpx.HTTPError as exc:
            raise ConnectionFailed(f"cannot reach {self.url}: {exc}") from None
        raise_for_error(response)
        return call.parse(response.json())

    # -- jobs ----------------------------------------------------------------------------------------------------
    def submit(self, job_file: Mapping[str, Any]) -> Submission:
        """Submit a job file (``{queue, jobSetId, jobs: [...]}``): all its jobs, or none (:class:`Invalid` lists
        every problem). Jobs with a ``clientId`` already stored are not stored twice (``existing``)."""
        return self._send(Calls.submit(job_file))

    def submit_file(self, path: str | os.PathLike) -> Submission:
        """Submit the job file at ``path`` (YAML or JSON)."""
        return self.submit(read_job_file(path))

    def status(self, job_id: str) -> Job:
        """A job's record (:class:`NotFound` for a job of a queue the user may not act in, too)."""
        return self._send(Calls.status(job_id))

    def service_status(self) -> dict:
        """The service's status: version, job counts, the last cycle, the plugins failing in it (``plugins``)."""
        return self._send(Calls.service_status())

    def jobs(self, queue: str, job_set: str, states: Iterable[str] | None = None) -> list[Job]:
        """The jobs of a job set, optionally only those in ``states``."""
        return self._send(Calls.jobs(queue, job_set, states))

    def cancel(self, queue: str, job_set: str | None = None, job_ids: Iterable[str] | None = None,
               states: Iterable[str] | None = None) -> Cancellation:
        """Cancel a job set, some jobs (``job_ids``), or a queue's jobs in ``states``."""
        return self._send(Calls.cancel(queue, job_set, job_ids, states))

    def reprioritize(self, queue: str, priority: int, job_set: str | None = None,
                     job_ids: Iterable[str] | None = None) -> list[str]:
        """Set the priority of a job set's or some jobs' queued jobs; returns the ids changed."""
        return self._send(Calls.reprioritize(queue, priority, job_set, job_ids))

    def logs(self, job_id: str, *, pod: int = 0, tail: int | None = None, follow: bool = False,
             container: str | None = None) -> Iterator[bytes]:
        """The job's container log (pod number ``pod`` of the job; container ``container``, init containers
        included, else the pod's first), in chunks as they come: the last ``tail`` lines only if given; with
        ``follow``, until the container ends. Who may see a job's status may read its log; an error answer raises
        as every method's does."""
        try:
            with self.http.stream("GET", f"/v1/jobs/{job_id}/logs", params=log_params(pod, tail, follow, container),
                                  timeout=httpx.Timeout(10.0, read=None if follow else 60.0)) as response:
                if response.status_code >= 400:
                    response.read()
                    raise_for_error(response)
                yield from response.iter_bytes()
        except (httpx.TransportError, httpx.StreamError) as exc:
            raise ConnectionFailed(f"cannot read the log from {self.url}: {exc}") from None

    def watch(self, queue: str, job_set: str, *, after: int = 0, follow: bool = True,
              reconnect: float = 60.0) -> Iterator[Event]:
        """The job set's events, oldest first, from the event after ``after``.

        With ``follow`` the iterator waits for new events; after a dropped connection it resumes after the last
        event it gave, and raises :class:`ConnectionFailed` when the server has been unreachable for ``reconnect``
        seconds. When the server ends the stream (the queue deleted, the token revoked or expired, access
        withdrawn) the iterator asks again, and the answer raises why (:class:`NotFound`, :class:`Unauthorized`,
        :class:`Forbidden`). Without ``follow`` it ends at the last event.
        """
        position = after
        down_since: float | None = None
        while True:
            try:
                with self.http.stream("GET", f"/v1/queues/{queue}/jobsets/{job_set}/events",
                                      params=watch_params(position, follow),
                                      timeout=httpx.Timeout(10.0, read=None)) as response:
                    if response.status_code >= 400:
                        response.read()
                        raise_for_error(response)
                    down_since = None
                    for line in response.iter_lines():
                        data = event_line(line)
                        if data is None:
                            continue
                        event = Event.parse(data)
                        if event.kind == "end":
                            break       # asked again below, the server says why (404, 401 or 403)
                        position = event.id
                        yield event
                if not follow:
                    return
            except (httpx.TransportError, httpx.StreamError) as exc:
                now = time.monotonic()
                down_since = down_since or now
                if now - down_since > reconnect:
                    raise ConnectionFailed(f"lost {self.url} and could not reconnect: {exc}") from None
            time.sleep(0.5)

    # -- queues --------------------------------------------------------------------------------------------------
    def queues(self) -> list[Queue]:
        """Every queue, with ``parent`` and ``cordoned``."""
        return self._send(Calls.queues())

    def queue(self, name: str) -> Queue:
        """One queue, with its job counts by state in ``jobs``."""
        return self._send(Calls.queue(name))

    def pending(self, name: str, limit: int | None = None) -> QueuePending:
        """Queue ``name``'s queued jobs from the head in scheduling order, with reasons and positions as of the last
        cycle (at most ``limit``, 1..1000; the server's default 100). The queue's owners and administrators only:
        to anyone else :class:`NotFound`, as for a missing queue."""
        return self._send(Calls.pending(name, limit))

    def create_queue(self, name: str, *, weight: float = 1.0, limits: Mapping[str, float] | None = None,
                     owners: Iterable[str] = (), group_owners: Iterable[str] = (),
                     retry_policy: Sequence[Mapping[str, Any]] = ()) -> Queue:
        """Create a queue (administrators; :class:`Conflict` when it exists)."""
        return self._send(Calls.create_queue(queue_body(name, weight, limits, owners, group_owners, retry_policy)))

    def update_queue(self, name: str, *, weight: float = 1.0, limits: Mapping[str, float] | None = None,
                     owners: Iterable[str] = (), group_owners: Iterable[str] = (),
                     retry_policy: Sequence[Mapping[str, Any]] = ()) -> Queue:
        """Replace a queue's weight, limits, owners and retry policy (administrators)."""
        return self._send(Calls.update_queue(queue_body(name, weight, limits, owners, group_owners, retry_policy)))

    def delete_queue(self, name: str, *, force: bool = False) -> QueueDeletion:
        """Delete a queue and its history (administrators); ``force`` cancels its jobs first, else a queue with
        unfinished jobs is a :class:`Conflict`."""
        return self._send(Calls.delete_queue(name, force))

    def cordon_queue(self, name: str) -> bool:
        """Stop scheduling the queue's jobs (it still accepts them); returns True (cordoned)."""
        return self._send(Calls.cordon_queue(name, True))

    def uncordon_queue(self, name: str) -> bool:
        """Schedule the queue's jobs again; returns False (not cordoned)."""
        return self._send(Calls.cordon_queue(name, False))

    # -- nodes and the service -----------------------------------------------------------------------------------
    def nodes(self) -> dict[str, str]:
        """Draining nodes (``cluster/node``): ``draining`` while jobs run there, ``drained`` once empty."""
        return self._send(Calls.nodes())

    def drain_node(self, cluster: str, node: str) -> bool:
        """No new jobs on the node; the running ones finish (administrators). Returns True (draining)."""
        return self._send(Calls.drain_node(cluster, node, True))

    def uncordon_node(self, cluster: str, node: str) -> bool:
        """Let the node take jobs again (administrators). Returns False (not draining)."""
        return self._send(Calls.drain_node(cluster, node, False))

    def health(self) -> dict:
        """``{"ok": ..., "version": ...}``; needs no token."""
        return self._send(Calls.health())

    def set_cluster_available(self, name: str, available: bool) -> bool:
        """Stop or start a simulated cluster (``serve --admin-endpoints``; administrators)."""
        return self._send(Calls.set_cluster_available(name, available))
