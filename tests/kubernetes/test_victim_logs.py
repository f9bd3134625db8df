"""A preempted job's log after its pod is gone: the Kubernetes backend reads the end of each container's log just
before it deletes the pod (Kubernetes keeps no log of a deleted pod), keeps it for finishedPodRetention within
its bounds, and ``GET /v1/jobs/{id}/logs`` serves it once the pod is gone.

A fake API client stands in for the API server here (KWOK's fake kubelet has no log to keep); the real node's
test (test_realnode.py) reads a real preempted container's output.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from flotilla.core.capabilities import Backends
from flotilla.core.model import Job
from flotilla.kubernetes.backend import victimlogs
from flotilla.kubernetes.backend import KubernetesCluster
from flotilla.kubernetes.client import ApiError
from flotilla.service.errors import ApiError as RefusedError
from flotilla.service.logs import PodLogs
from flotilla.service.settings import ClusterSpec, ServiceSettings


class Response:
    def __init__(self, body: bytes):
        self.body = body

    def read(self) -> bytes:
        return self.body

    def release_conn(self) -> None:
        pass


class Client:
    """The API server as far as a preemption and a log read go: pod logs by (pod, container), deletes noted."""

    def __init__(self, logs: dict[tuple[str, str], bytes]):
        self.logs, self.asked, self.deleted = logs, [], []

    def pod_log(self, namespace, name, *, container=None, tail_lines=None, limit_bytes=None, follow=False,
                read_timeout=None):
        self.asked.append((name, container, tail_lines, limit_bytes, read_timeout))
        if (name, container) not in self.logs:
            raise ApiError(400, "Bad Request", {"message": f"container {container!r} is waiting to start"})
        return Response(self.logs[(name, container)][:limit_bytes])

    def delete(self, path, body=None):
        self.deleted.append((path, [name for name, *_ in self.asked]))

    def get(self, path, **params):   # the pods of a job: gone
        assert path == "/api/v1/pods"
        return {"items": []}

    def end_watches(self, stop):
        pass

    def close(self):
        pass


def running_pod(name: str, job_id: str, containers=("main", "sidecar")) -> dict:
    return {"metadata": {"namespace": "batch", "name": name, "uid": f"uid-{name}",
                         "labels": {"flotilla.io/job-id": job_id, "flotilla.io/queue": "A"},
                         "annotations": {"flotilla.io/job-id": job_id, "flotilla.io/queue": "A",
                                         "flotilla.io/job-set": "s", "flotilla.io/attempt": "0"}},
            "spec": {"nodeName": "node-1", "schedulerName": "flotilla",
                     "containers": [{"name": c, "image": "busybox"} for c in containers]},
            "status": {"phase": "Running"}}


def cluster(logs: dict, retention: float = 3600.0, now: list | None = None) -> KubernetesCluster:
    now = now if now is not None else [1000.0]
    return KubernetesCluster("k", client=Client(logs), start=False, finished_pod_retention=retention,
                             clock=lambda: now[0])


def preempt(backend: KubernetesCluster, name: str, job_id: str, **pod) -> None:
    backend.dispatch.on_pod("ADDED", running_pod(name, job_id, **pod))
    backend.stops.delete(Job(job_id, "A", job_set="s"), ("batch", name), "preempted")


def test_a_preempted_pods_log_tail_is_read_before_its_delete_and_kept_for_the_retention():
    now = [1000.0]
    long = b"".join(b"line %d\n" % k for k in range(20_000))     # 208,890 bytes: more than is kept
    backend = cluster({("victim-0", "main"): b"started\nworking\n", ("victim-0", "sidecar"): long}, now=now)
    try:
        preempt(backend, "victim-0", "victim")
        # Each container's last lines, read before the delete (which waited for them).
        assert backend.client.asked == [("victim-0", "main", 2000, 262144, 2.0),
                                        ("victim-0", "sidecar", 2000, 262144, 2.0)]
        assert backend.client.deleted == [("/api/v1/namespaces/batch/pods/victim-0", ["victim-0", "victim-0"])]
        name, logs, cut = backend.kept_log("victim")
        assert (name, logs["main"], len(logs["sidecar"]), cut) == ("batch/victim-0", b"started\nworking\n", 65536,
                                                                   True)
        assert logs["sidecar"] == long[:262144][-65536:]
        assert backend.kept_log("other") is None
        now[0] += 3599
        backend.poll_events()
        assert backend.kept_log("victim") is not None
        now[0] += 1
        assert backend.kept_log("victim") is None            # its time is over
        backend.poll_events()
        assert (backend.victim_logs.kept, backend.victim_logs.size) == ({}, 0)
    finally:
        backend.close()


def test_nothing_is_kept_without_a_retention_or_a_log_and_the_oldest_go_past_the_bound(monkeypatch):
    backend = cluster({("v-0", "main"): b"x\n"}, retention=0)
    try:
        preempt(backend, "v-0", "v")
        assert (backend.client.asked, backend.kept_log("v")) == ([], None)   # finishedPodRetention 0s: none
    finally:
        backend.close()
    backend = cluster({})
    try:
        preempt(backend, "w-0", "w")                          # the kubelet had no log: the pod is deleted anyway
        assert backend.kept_log("w") is None and len(backend.client.deleted) == 1
    finally:
        backend.close()
    monkeypatch.setattr(victimlogs, "VICTIM_LOGS_TOTAL", 3 * 65536)
    backend = cluster({(f"p{k}-0", "main"): bytes([65 + k]) * 70_000 for k in range(4)})
    try:
        for k in range(4):
            preempt(backend, f"p{k}-0", f"p{k}", containers=("main",))
        assert [pod_id for pod_id in ("p0", "p1", "p2", "p3") if backend.kept_log(pod_id)] == ["p1", "p2", "p3"]
        assert backend.victim_logs.size == 3 * 65536
    finally:
        backend.close()


def test_the_logs_endpoint_serves_the_kept_tail_once_the_pod_is_gone():
    backend = cluster({("victim-0", "main"): b"one\ntwo\nthree\n", ("victim-0", "sidecar"): b"side\n"})
    try:
        preempt(backend, "victim-0", "victim")
        settings = ServiceSettings(clusters=(ClusterSpec("k", "kubernetes", raw=SimpleNamespace(
            finished_pod_retention=3600.0)),))
        loop = SimpleNamespace(backends=Backends.of({"k": backend}))
        logs = PodLogs(settings, loop)
        job = {"id": "victim", "cluster": "k", "state": "preempted", "pods": [], "finished": 1000.0}
        assert logs.read(job, 0, None) == (b"one\ntwo\nthree\n", False)
        assert logs.read(job, 0, 2) == (b"two\nthree\n", False)
        assert logs.read(job, 0, None, "sidecar") == (b"side\n", False)
        response, release = logs.follow(job, 0, 1)              # the container has gone: the follow ends
        assert [logs.next_chunk(response), logs.next_chunk(response)] == [b"three\n", b""]
        release()
        with pytest.raises(RefusedError) as refused:
            logs.read(job, 0, None, "init")
        assert (refused.value.status, refused.value.field, refused.value.message) == (
            404, "container", "pod batch/victim-0 of job 'victim' was preempted and deleted; the end of its log is "
                              "kept for containers main, sidecar, not 'init'")
        # Another preempted job, nothing kept of it: the 410 says why.
        with pytest.raises(RefusedError) as refused:
            logs.read({**job, "id": "other"}, 0, None)
        assert (refused.value.status, refused.value.message) == (
            410, "the pod of job 'other' is gone from cluster 'k': a preempted job's pod is deleted to free its room, "
                 "and the end of its log is kept for 1h (finishedPodRetention of cluster 'k') by a service that runs "
                 "the scheduling loop (serve --role all), when it could read it then")
    finally:
        backend.close()
