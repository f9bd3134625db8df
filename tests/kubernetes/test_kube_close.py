"""Closing a Kubernetes backend ends every thread it started, and a second close does nothing.

The informers' watches are long requests (``watch_timeout``, here far longer
than any test); close() must shut them rather than wait for the server to end
them. A thread blocked in an ordinary request that close() cannot shorten is
named in a log line instead of being left behind silently.
"""

from __future__ import annotations

import re
import socket
import threading
import time

import pytest
import structlog
from kubernetes.client import Configuration

from flotilla.core.backend import ClusterDecisions
from flotilla.core.decisions import Placement
from flotilla.core.model import Job
from flotilla.kubernetes.backend import KubernetesCluster
from flotilla.kubernetes.client import KubeClient

KINDS = ("nodes", "pods", "namespaces", "podgroups", "priorityclasses", "jobs", "jobsets", "pvcs", "pvs",
         "storageclasses")


def threads_of(name: str) -> list[str]:
    """The live threads a backend called ``name`` started: its informers, its write pool and its report pool."""
    return sorted(thread.name for thread in threading.enumerate()
                  if thread.name == f"kube-{name}" or thread.name.startswith(f"kube-{name}-")
                  or re.fullmatch(rf"kube-{re.escape(name)}_\d+", thread.name))


@pytest.mark.kwok
def test_close_ends_the_informers_blocked_in_their_watches_and_the_pools(kwok):
    from flotilla.kubernetes.pods import PodSettings

    name = "closing"
    backend = KubernetesCluster(name, kubeconfig=kwok["a"].kubeconfig, context=kwok["a"].context,
                                settings=PodSettings(name_prefix="closing-"), watch_timeout=3600)
    try:
        assert backend.wait_synced(30)
        assert backend.wait_idle(30)
        job = Job("first", "A", job_set="a", priority_class="armada-preemptible", requests={"cpu": 1000})
        backend.apply(ClusterDecisions(start=[Placement(job, name, "node-1")]))
        kwok["a"].wait_pods(lambda pods: [p["metadata"]["name"] for p in pods] == ["closing-first-0"],
                            what="the job's pod")
        assert backend.wait_idle(30)
        informers = sorted(f"kube-{name}-{kind}" for kind in KINDS)
        before = threads_of(name)
        assert [n for n in before if n.startswith(f"kube-{name}-") and "-report_" not in n] == informers
        assert f"kube-{name}_0" in before              # the pod was written by the write pool
        assert f"kube-{name}-report_0" in before       # its Scheduled Event was posted by the report pool
        with structlog.testing.capture_logs() as logs:
            backend.close()
        assert threads_of(name) == []
        assert logs == []                               # nothing stuck, no error against the closed client
        with structlog.testing.capture_logs() as logs:
            backend.close()
        assert logs == [] and threads_of(name) == []
    finally:
        backend.close()


def test_close_names_the_informers_still_inside_a_request_it_cannot_shorten():
    """A server that accepts connections and never answers: every informer is inside its first list request."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    accepted: list[socket.socket] = []
    serving = threading.Event()
    serving.set()

    def accept() -> None:
        while serving.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    acceptor = threading.Thread(target=accept, daemon=True, name="silent-server")
    acceptor.start()

    def stop_serving() -> None:
        serving.clear()
        acceptor.join()
        listener.close()
        for connection in accepted:
            connection.close()
    name = "silent"
    configuration = Configuration(host=f"http://127.0.0.1:{listener.getsockname()[1]}")
    backend = KubernetesCluster(name, client=KubeClient(configuration, timeout=600), watch_timeout=3600)
    informers = [f"kube-{name}-{kind}" for kind in KINDS]
    try:
        deadline = time.monotonic() + 60
        while len(accepted) < len(KINDS) and time.monotonic() < deadline:   # each informer's first request
            time.sleep(0.01)
        assert len(accepted) == len(KINDS)
        with structlog.testing.capture_logs() as logs:
            backend.close(timeout=0.2)
        assert logs == [{"event": "kubernetes.informer_not_stopped", "cluster": name, "threads": informers,
                         "timeout": 0.2, "log_level": "warning"}]
        with structlog.testing.capture_logs() as logs:
            # The server goes: each request fails, and an informer that sees close() asked it to stop ends
            # without calling the failure an outage.
            stop_serving()
            for thread in backend._threads:
                thread.join(120)
        assert threads_of(name) == []
        assert logs == []
        backend.close()
        assert threads_of(name) == []
    finally:
        stop_serving()
