"""``AsyncClient``: the API over an asyncio httpx client; the same methods as ``Client``, awaited."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, AsyncIterator, Iterable, Mapping, Sequence

import httpx

from flotilla.client._requests import (Call, Calls, event_line, headers, log_params, queue_body,
                                       raise_for_error, read_job_file, resolve, watch_params)
from flotilla.client.errors import ConnectionFailed
from flotilla.client.models import Cancellation, Event, Job, Queue, QueueDeletion, QueuePending, Submission


class AsyncClient:
    """Flotilla's HTTP API, typed, for asyncio: every method is a coroutine and :meth:`watch` an async iterator.

    ``url`` and ``token`` default to ``$FLOTILLA_URL`` / ``$FLOTILLA_TOKEN``, then the client config file
    (``~/.config/flotilla/client.yaml``), then ``http://127.0.0.1:8080`` and no token. Every method raises a
    subclass of :class:`~flotilla.client.ApiError` for an error answer (:class:`~flotilla.client.NotFound`,
    :class:`~flotilla.client.Invalid`, ...) carrying the API's error body, and
    :class:`~flotilla.client.ConnectionFailed` when the server cannot be reached. Use it as a context manager,
    or call :meth:`close`.
    """

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 60.0,
                 transport: httpx.AsyncBaseTransport | None = None):
        self.url, self.token = resolve(url, token)
        self.http = httpx.AsyncClient(base_url=self.url, headers=headers(self.token), timeout=timeout,
                                 transport=transport)

    async def close(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _send(self, call: Call) -> Any:
        try:
            response = await self.http.request(call.method, call.path, **call.request_args())
        except httpx.HTTPError as exc:
            raise ConnectionFailed(f"cannot reach {self.url}: {exc}") from None
        raise_for_error(response)
        return call.parse(response.json())

    # -- jobs ----------------------------------------------------------------------------------------------------
    async def submit(self, job_file: Mapping[str, Any]) -> Submission:
        """Submit a job file (``{queue, jobSetId, jobs: [...]}``): all its jobs, or none (:class:`Invalid` lists
        every problem). Jobs with a ``clientId`` already stored are not stored twice (``existing``)."""
        return await self._send(Calls.submit(job_file))

    async def submit_file(self, path: str | os.PathLike) -> Submission:
        """Submit the job file at ``path`` (YAML or JSON)."""
        return await self.submit(read_job_file(path))

    async def status(self, job_id: str) -> Job:
        """A job's record (:class:`NotFound` for a job of a queue the user may not act in, too)."""
        return await self._send(Calls.status(job_id))

    async def service_status(self) -> dict:
        """The service's status: version, job counts, the last cycle, the plugins failing in it (``plugins``)."""
        return await self._send(Calls.service_status())

    async def jobs(self, queue: str, job_set: str, states: Iterable[str] | None = None) -> list[Job]:
        """The jobs of a job set, optionally only those in ``states``."""
        return await self._send(Calls.jobs(queue, job_set, states))

    async def cancel(self, queue: str, job_set: str | None = None, job_ids: Iterable[str] | None = None,
               states: Iterable[str] | None = None) -> Cancellation:
        """Cancel a job set, some jobs (``job_ids``), or a queue's jobs in ``states``."""
        return await self._send(Calls.cancel(queue, job_set, job_ids, states))

    async def reprioritize(self, queue: str, priority: int, job_set: str | None = None,
                     job_ids: Iterable[str] | None = None) -> list[str]:
        """Set the priority of a job set's or some jobs' queued jobs; returns the ids changed."""
        return await self._send(Calls.reprioritize(queue, priority, job_set, job_ids))

    async def logs(self, job_id: str, *, pod: int = 0, tail: int | None = None,
                   follow: bool = False, container: str | None = None) -> AsyncIterator[bytes]:
        """The job's container log (pod number ``pod`` of the job; container ``container``, init containers
        included, else the pod's first), in chunks as they come: the last ``tail`` lines only if given; with
        ``follow``, until the container ends. Who may see a job's status may read its log; an error answer raises
        as every method's does."""
        try:
            async with self.http.stream("GET", f"/v1/jobs/{job_id}/logs",
                                        params=log_params(pod, tail, follow, container),
                                        timeout=httpx.Timeout(10.0, read=None if follow else 60.0)) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise_for_error(response)
                async for chunk in response.aiter_bytes():
                    yield chunk
        except (httpx.TransportError, httpx.StreamError) as exc:
            raise ConnectionFailed(f"cannot read the log from {self.url}: {exc}") from None

    async def watch(self, queue: str, job_set: str, *, after: int = 0, follow: bool = True,
                    reconnect: float = 60.0) -> AsyncIterator[Event]:
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
                async with self.http.stream("GET", f"/v1/queues/{queue}/jobsets/{job_set}/events",
                                      params=watch_params(position, follow),
                                      timeout=httpx.Timeout(10.0, read=None)) as response:
                    if response.status_code >= 400:
                        await response.aread()
                        raise_for_error(response)
                    down_since = None
                    async for line in response.aiter_lines():
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
            await asyncio.sleep(0.5)

    # -- queues --------------------------------------------------------------------------------------------------
    async def queues(self) -> list[Queue]:
        """Every queue, with ``parent`` and ``cordoned``."""
        return await self._send(Calls.queues())

    async def queue(self, name: str) -> Queue:
        """One queue, with its job counts by state in ``jobs``."""
        return await self._send(Calls.queue(name))

    async def pending(self, name: str, limit: int | None = None) -> QueuePending:
        """Queue ``name``'s queued jobs from the head in scheduling order, with reasons and positions as of the last
        cycle (at most ``limit``, 1..1000; the server's default 100). The queue's owners and administrators only:
        to anyone else :class:`NotFound`, as for a missing queue."""
        return await self._send(Calls.pending(name, limit))

    async def create_queue(self, name: str, *, weight: float = 1.0, limits: Mapping[str, float] | None = None,
                           owners: Iterable[str] = (), group_owners: Iterable[str] = (),
                           retry_policy: Sequence[Mapping[str, Any]] = ()) -> Queue:
        """Create a queue (administrators; :class:`Conflict` when it exists)."""
        body = queue_body(name, weight, limits, owners, group_owners, retry_policy)
        return await self._send(Calls.create_queue(body))

    async def update_queue(self, name: str, *, weight: float = 1.0, limits: Mapping[str, float] | None = None,
                           owners: Iterable[str] = (), group_owners: Iterable[str] = (),
                           retry_policy: Sequence[Mapping[str, Any]] = ()) -> Queue:
        """Replace a queue's weight, limits, owners and retry policy (administrators)."""
        body = queue_body(name, weight, limits, owners, group_owners, retry_policy)
        return await self._send(Calls.update_queue(body))

    async def delete_queue(self, name: str, *, force: bool = False) -> QueueDeletion:
        """Delete a queue and its history (administrators); ``force`` cancels its jobs first, else a queue with
        unfinished jobs is a :class:`Conflict`."""
        return await self._send(Calls.delete_queue(name, force))

    async def cordon_queue(self, name: str) -> bool:
        """Stop scheduling the queue's jobs (it still accepts them); returns True (cordoned)."""
        return await self._send(Calls.cordon_queue(name, True))

    async def uncordon_queue(self, name: str) -> bool:
        """Schedule the queue's jobs again; returns False (not cordoned)."""
        return await self._send(Calls.cordon_queue(name, False))

    # -- nodes and the service -----------------------------------------------------------------------------------
    async def nodes(self) -> dict[str, str]:
        """Draining nodes (``cluster/node``): ``draining`` while jobs run there, ``drained`` once empty."""
        return await self._send(Calls.nodes())

    async def drain_node(self, cluster: str, node: str) -> bool:
        """No new jobs on the node; the running ones finish (administrators). Returns True (draining)."""
        return await self._send(Calls.drain_node(cluster, node, True))

    async def uncordon_node(self, cluster: str, node: str) -> bool:
        """Let the node take jobs again (administrators). Returns False (not draining)."""
        return await self._send(Calls.drain_node(cluster, node, False))

    async def health(self) -> dict:
        """``{"ok": ..., "version": ...}``; needs no token."""
        return await self._send(Calls.health())

    async def set_cluster_available(self, name: str, available: bool) -> bool:
        """Stop or start a simulated cluster (``serve --admin-endpoints``; administrators)."""
        return await self._send(Calls.set_cluster_available(name, available))
