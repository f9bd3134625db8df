"""A job's container log, read through its cluster's API server (``pods/log``), for ``GET /v1/jobs/{id}/logs``.

A cluster of another kind whose backend keeps its jobs' output (the
:class:`~flotilla.core.capabilities.JobLogs` capability) is read through its
backend instead, with the same bounds, where the scheduling loop runs.

The job's record says which cluster ran it last; the pod is found there by
its ``flotilla.io/job-id`` label (the newest attempt of the asked pod
number), and the log of the asked container (any of the pod's containers,
init and ephemeral ones included; by default its first container) is read.
The API server fetches it from the node's kubelet, so a pod the kubelet no
longer has (deleted after the job finished, see the cluster's
``finishedPodRetention``, an hour by default) has no log, and the 410 says
how long finished pods are kept.

Every answer is bounded: ``tail`` at most :data:`MAX_TAIL` lines; an answer
without ``follow`` holds at most the log's first :data:`MAX_BYTES` bytes
(header ``X-Flotilla-Log-Truncated: true`` when there was more); a followed
log ends when the container ends, when the client leaves, when the service
stops, when its token no longer authenticates, or after
``server.streams.followIdleTimeout`` without output, and at most
``server.streams.follows`` logs are followed at once, at most
``server.streams.followsPerUser`` by one user (each holds a thread
while it waits for output).

A preempted job's pod is deleted at once to free its room, and Kubernetes
keeps no log of a deleted pod: the Kubernetes backend reads the end of each
container's log just before the delete and keeps it for the cluster's
``finishedPodRetention`` (:class:`~flotilla.core.capabilities.KeptLogs`,
bounded in memory by the backend), which this module serves once the pod is
gone, by the process that runs the scheduling loop too (``serve --role all``;
an ``api`` replica has none to serve).

Refusals (``ApiError``): 409 when the job has no pod to read (not started
yet, on a simulated cluster) or its container has not started; 410 when the
pod is gone; 404 for a pod number the job does not have (as for a job it cannot see) and for a container
its pod does not have (naming the pod's containers); 502 when the API
server could not get the log from the kubelet; 503 when the cluster cannot
be reached; 429 past a cap on followed logs (:mod:`flotilla.service.streams`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from flotilla.core.capabilities import JobLogs
from flotilla.core.quantities import format_duration
from flotilla.service.errors import ApiError, ErrorResponse
from flotilla.service.streams import Slots, StreamLimits

#: A container's name, as the API server allows it (a DNS-1123 label).
CONTAINER_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
MAX_TAIL = 10_000
MAX_BYTES = 8 * 1024 * 1024
CHUNK = 64 * 1024

#: The logs endpoint's own answers, beside the API's common ones.
LOG_RESPONSES = {
    200: {"description": "The log as text (streamed with follow=true)", "content": {"text/plain": {}}},
    410: {"model": ErrorResponse, "description": "The job's pod is gone from its cluster"},
    429: {"model": ErrorResponse, "description": "Too many logs followed at once"},
    502: {"model": ErrorResponse, "description": "The API server could not get the log from the node"},
    503: {"model": ErrorResponse, "description": "The job's cluster cannot be reached"},
}


@dataclass(frozen=True)
class PodRef:
    cluster: str
    namespace: str
    name: str
    container: str | None


class PodLogs:
    """Log access to the configured Kubernetes clusters, one client each (the scheduling loop's when it runs here)."""

    def __init__(self, settings, loop=None):
        self._specs = {spec.name: spec for spec in settings.clusters}
        self._loop = loop
        self._clients: dict[str, object] = {}
        self._lock = threading.Lock()
        limits = getattr(settings, "streams", None) or StreamLimits()
        self.follow_idle_timeout = limits.follow_idle_timeout
        self._followers = Slots("followed logs", limits.follows_per_user, "server.streams.followsPerUser",
                                limits.follows, "server.streams.follows")

    def _capabilities(self, cluster: str):
        return self._loop.backends.capabilities.get(cluster) if self._loop is not None else None

    def _client(self, cluster: str):
        caps = self._capabilities(cluster)
        if caps is not None and caps.kubernetes_api is not None:
            return caps.kubernetes_api.client
        with self._lock:
            if cluster not in self._clients:
                from flotilla.kubernetes.public import KubeClient

                raw = self._specs[cluster].raw
                if getattr(raw, "in_cluster", False):
                    self._clients[cluster] = KubeClient.from_in_cluster(pool_size=8)
                else:
                    self._clients[cluster] = KubeClient.from_kubeconfig(
                        getattr(raw, "kubeconfig", None) or "~/.kube/config", getattr(raw, "context", None),
                        pool_size=8)
            return self._clients[cluster]

    def locate(self, job: dict, pod: int, container: str | None = None) -> tuple[object, PodRef]:
        """The client and pod for pod number ``pod`` of ``job`` (a record as :meth:`Store.get_job` gives it), and
        the container to read (``container``, else the pod's first)."""
        from flotilla.kubernetes.public import ATTEMPT, JOB_ID, KubeApiError, Unreachable, forbidden_message, label_value
        from flotilla.service.leases import pod_ids

        npods = max(1, len(job.get("pods") or ()))
        if pod >= npods:
            # 404, not 422: the number is one the schema allows, naming a pod this job does not have
            raise ApiError(404, f"job {job['id']!r} has {npods} pod{'s' if npods > 1 else ''}: "
                                f"pod must be 0..{npods - 1}, got {pod}", field="pod")
        cluster = job.get("cluster")
        if not cluster:
            raise ApiError(409, f"job {job['id']!r} has no pod: it has not started on a cluster "
                                f"(state {job['state']})")
        spec = self._specs.get(cluster)
        if spec is None:
            raise ApiError(409, f"job {job['id']!r} ran on cluster {cluster!r}, which the config no longer has")
        pod_id = pod_ids(job["id"], npods)[pod]
        if spec.kind != "kubernetes":
            caps = self._capabilities(cluster)
            if caps is not None and caps.logs is not None:
                if container is not None:
                    raise ApiError(404, f"job {job['id']!r} ran on {spec.kind} cluster {cluster!r}, which keeps one "
                                        f"output per pod: there is no container {container!r} to choose",
                                   field="container")
                return caps.logs, PodRef(cluster, "", pod_id, None)
            if spec.kind == "simulated" or self._loop is not None:
                raise ApiError(409, f"job {job['id']!r} ran on {spec.kind} cluster {cluster!r}: its jobs run no "
                                    f"containers, so there is no log")
            raise ApiError(409, f"job {job['id']!r} ran on {spec.kind} cluster {cluster!r}, whose log is read "
                                f"where the scheduling loop runs (serve --role all or scheduler), not here")
        client = self._client(cluster)
        try:
            items = client.get("/api/v1/pods", labelSelector=f"{JOB_ID}={label_value(pod_id)}")["items"]
        except Unreachable as exc:
            raise ApiError(503, f"cluster {cluster!r} cannot be reached: {exc}") from None
        except KubeApiError as exc:
            why = forbidden_message(exc) if exc.status == 403 else str(exc)
            raise ApiError(502, f"cluster {cluster!r} did not list the job's pods: {why}") from None
        ours = [p for p in items if (p["metadata"].get("annotations") or {}).get(JOB_ID) == pod_id]
        if not ours:
            caps = self._capabilities(cluster)
            kept = caps.kept_logs.kept_log(pod_id) if caps is not None and caps.kept_logs is not None else None
            if kept is None:
                raise ApiError(410, self._gone(job, pod if npods > 1 else None, cluster))
            name, logs, cut = kept
            if container is None:
                container = next(iter(logs))
            elif container not in logs:
                raise ApiError(404, f"pod {name} of job {job['id']!r} was preempted and deleted; the end of its log "
                                    f"is kept for container{'s' if len(logs) > 1 else ''} {', '.join(logs)}, not "
                                    f"{container!r}", field="container")
            return _Kept(logs[container], cut), PodRef(cluster, *name.split("/", 1), container)

        def attempt(p: dict) -> int:
            try:
                return int((p["metadata"].get("annotations") or {}).get(ATTEMPT, "0"))
            except ValueError:
                return 0

        newest = max(ours, key=attempt)
        spec = newest.get("spec") or {}
        names = [c.get("name") for group in ("initContainers", "containers", "ephemeralContainers")
                 for c in spec.get(group) or ()]
        if container is None:
            container = ((spec.get("containers") or [{}])[0]).get("name")
        elif container not in names:
            raise ApiError(404, f"pod {newest['metadata']['namespace']}/{newest['metadata']['name']} of job "
                                f"{job['id']!r} has no container {container!r}; its containers: "
                                f"{', '.join(names)}", field="container")
        return client, PodRef(cluster, newest["metadata"]["namespace"], newest["metadata"]["name"], container)

    def _gone(self, job: dict, pod: int | None, cluster: str) -> str:
        """Why the job's pod is not there: how long the cluster keeps finished pods, and when this one went."""
        retention = float(getattr(self._specs[cluster].raw, "finished_pod_retention", 0.0) or 0.0)
        setting = f"finishedPodRetention of cluster {cluster!r}"
        which = f"the pod of job {job['id']!r}" + (f" (pod {pod})" if pod is not None else "")
        finished = job.get("finished")
        if job.get("state") not in ("succeeded", "failed", "cancelled", "preempted"):
            return f"{which} is gone from cluster {cluster!r} while the job is {job.get('state')}"
        if job.get("state") == "preempted":
            return (f"{which} is gone from cluster {cluster!r}: a preempted job's pod is deleted to free its room, "
                    f"and the end of its log is kept for {format_duration(retention)} ({setting}) by a service that "
                    f"runs the scheduling loop (serve --role all), when it could read it then")
        if retention <= 0:
            return f"{which} is gone from cluster {cluster!r}: finished pods are deleted at once ({setting} is 0s)"
        if isinstance(finished, (int, float)) and finished + retention <= time.time():
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(finished + retention))
            return (f"{which} was deleted from cluster {cluster!r} at {when}: finished pods are kept for "
                    f"{format_duration(retention)} after they end ({setting})")
        return (f"{which} is gone from cluster {cluster!r} (finished pods are kept for {format_duration(retention)} "
                f"after they end, {setting}; this one was deleted before)")

    def read(self, job: dict, pod: int, tail: int | None, container: str | None = None) -> tuple[bytes, bool]:
        """The log (its first :data:`MAX_BYTES` bytes) and whether there was more (or, for a preempted pod's
        kept log, whether it was cut to what is kept)."""
        response = self.open(job, pod, follow=False, tail=tail, limit=MAX_BYTES + 1, container=container)
        try:
            content = response.read()
        finally:
            response.release_conn()
        return content[:MAX_BYTES], len(content) > MAX_BYTES or getattr(response, "cut", False)

    def take_slot(self, user: str):
        """A followed log's slot of ``user`` (429 past a cap), and the function that gives it back."""
        return self._followers.take(user)

    def follow(self, job: dict, pod: int, tail: int | None, user: str = "", container: str | None = None,
               slot=None):
        """An open followed log and the function that ends it (idempotent, from any thread); 429 past a cap.

        ``slot``: the give-back function of a slot taken already (:meth:`take_slot`), else one is taken here.
        """
        give_back = slot if slot is not None else self._followers.take(user)
        try:
            response = self.open(job, pod, follow=True, tail=tail, container=container)
        except BaseException:
            give_back()
            raise
        done = threading.Event()

        def release() -> None:
            if done.is_set():
                return
            done.set()
            try:
                try:   # a read blocked in its thread returns at once
                    response.shutdown()
                except (RuntimeError, ValueError, OSError):
                    pass   # the log had ended: urllib3 gave the connection back to its pool already
                response.release_conn()
            finally:
                give_back()

        return response, release

    @staticmethod
    def next_chunk(response) -> bytes:
        """What the followed log has next (blocks until output comes); b"" once it has ended."""
        from urllib3.exceptions import HTTPError

        try:
            return response.read1(CHUNK)
        except (HTTPError, OSError, ValueError, RuntimeError):   # ended by release() or the idle timeout
            return b""

    def open(self, job: dict, pod: int, *, follow: bool, tail: int | None, limit: int | None = None,
             container: str | None = None):
        """The log of the job's pod as an open response (``stream()`` it, then ``release_conn()``)."""
        from flotilla.kubernetes.public import KubeApiError, Unreachable, forbidden_message

        client, ref = self.locate(job, pod, container)
        if isinstance(client, (JobLogs, _Kept)):
            response = _BackendLog(client, ref, tail=tail, follow=follow, limit=limit)
            response.cut = isinstance(client, _Kept) and client.cut
            return response
        try:
            return client.pod_log(ref.namespace, ref.name, container=ref.container, tail_lines=tail,
                                  limit_bytes=limit, follow=follow,
                                  read_timeout=self.follow_idle_timeout if follow else 30.0)
        except Unreachable as exc:
            raise ApiError(503, f"cluster {ref.cluster!r} cannot be reached: {exc}") from None
        except KubeApiError as exc:
            detail = exc.body.get("message", "") if isinstance(exc.body, dict) else str(exc.body)[:300]
            where = f"pod {ref.namespace}/{ref.name} on cluster {ref.cluster!r}"
            if exc.status == 404:
                raise ApiError(410, f"{where} is gone") from None
            if exc.status == 400:   # the container has not started (or has no log yet): the kubelet's words
                raise ApiError(409, f"{where}: {detail}") from None
            if exc.status == 403:
                raise ApiError(502, f"{where}: {forbidden_message(exc)}") from None
            raise ApiError(502, f"{where}: the API server could not get the log: {exc.status} {detail}") from None

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()


class _Kept:
    """A preempted pod's kept log tail (:class:`~flotilla.core.capabilities.KeptLogs`) as a backend's log reads:
    the kept text (its last ``tail`` lines), then the end, followed or not (its container has gone)."""

    def __init__(self, text: bytes, cut: bool):
        self.text, self.cut = text, cut

    def job_log(self, pod_id: str, tail: int | None, follow: bool):
        text = self.text
        if tail is not None:
            lines = text.splitlines(keepends=True)
            text = b"".join(lines[len(lines) - tail:]) if tail else b""
        return iter([text] if text else [])


class _BackendLog:
    """A backend's log of one pod (:class:`~flotilla.core.capabilities.JobLogs`) as the API server's response
    reads: ``read``, ``read1``, ``shutdown``, ``release_conn``."""

    def __init__(self, source, ref: PodRef, *, tail: int | None, follow: bool, limit: int | None):
        self._limit = limit
        try:
            self._chunks = iter(source.job_log(ref.name, tail, follow))
        except LookupError as exc:
            raise ApiError(410, f"pod {ref.name} on cluster {ref.cluster!r}: {exc.args[0] if exc.args else exc}"
                           ) from None
        self._stopped = threading.Event()
        self._pending = b""

    def read1(self, size: int) -> bytes:
        """The next output (at most ``size`` bytes), waiting for it while following; b"" at the end."""
        while not self._pending:
            if self._stopped.is_set():
                return b""
            chunk = next(self._chunks, None)
            if chunk is None:
                return b""
            self._pending = chunk
        out, self._pending = self._pending[:size], self._pending[size:]
        return out

    def read(self) -> bytes:
        """The output up to the first ``limit`` bytes."""
        out = bytearray()
        while self._limit is None or len(out) < self._limit:
            chunk = self.read1(CHUNK)
            if not chunk:
                break
            out += chunk
        return bytes(out if self._limit is None else out[:self._limit])

    def shutdown(self) -> None:
        self._stopped.set()

    def release_conn(self) -> None:
        pass


__all__ = ["CONTAINER_PATTERN", "LOG_RESPONSES", "MAX_BYTES", "MAX_TAIL", "PodLogs", "PodRef"]
