"""A job's pod waiting on its node: its reason is the job's, a permanent image pull failure fails the job at once,
ImagePullBackOff after IMAGE_PULL_BACKOFFS back-offs. Watch events as a kubelet's status updates bring them."""

from __future__ import annotations

from flotilla.kubernetes.backend import IMAGE_PULL_BACKOFFS
from flotilla.kubernetes.pods import JOB_ID, permanent_pull_failure, waiting_reason
from tests.support.kube_fakes import backend_with, events, node, start


def pod(job_id: str, waiting: tuple[str, str] | None, phase: str = "Pending") -> dict:
    status: dict = {"phase": phase}
    if waiting is not None:
        status["containerStatuses"] = [{"name": "main", "state": {"waiting": {"reason": waiting[0],
                                                                              "message": waiting[1]}}}]
    return {"metadata": {"namespace": "default", "name": f"flotilla-{job_id}-0", "uid": f"uid-{job_id}",
                         "labels": {JOB_ID: job_id}, "annotations": {JOB_ID: job_id}},
            "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 30,
                     "containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}]},
            "status": status}


MISSING = ('failed to pull and unpack image "docker.io/library/nosuch:1": failed to resolve reference '
           '"docker.io/library/nosuch:1": docker.io/library/nosuch:1: not found')


def test_the_waiting_reason_becomes_the_jobs_and_a_missing_image_fails_it_at_once():
    backend, client = backend_with(node("n1", "4"))
    try:
        start(backend, ("j1", "n1", 1000))
        backend.dispatch.on_pod("ADDED", pod("j1", None))
        backend.dispatch.on_pod("MODIFIED", pod("j1", ("ContainerCreating", "")))
        backend.dispatch.on_pod("MODIFIED", pod("j1", ("ErrImagePull", MISSING)))
        assert events(backend) == [
            ("j1", "waiting", "container main: ContainerCreating", ""),
            ("j1", "failed", f"image not pulled: container main: ErrImagePull: {MISSING}", "")]
        backend._pool.shutdown(wait=True)
        assert client.deleted == [("/api/v1/namespaces/default/pods/flotilla-j1-0",
                                   {"apiVersion": "v1", "kind": "DeleteOptions"})]   # its own grace period
    finally:
        backend._pool.shutdown(wait=False)


def test_image_pull_back_off_fails_the_job_after_its_back_offs():
    backend, _ = backend_with(node("n1", "4"))
    try:
        start(backend, ("j1", "n1", 1000))
        unreachable = "failed to pull image: dial tcp 10.0.0.1:443: i/o timeout"
        backend.dispatch.on_pod("ADDED", pod("j1", ("ErrImagePull", unreachable)))
        for _ in range(IMAGE_PULL_BACKOFFS - 1):
            backend.dispatch.on_pod("MODIFIED", pod("j1", ("ImagePullBackOff", 'Back-off pulling image "x"')))
            backend.dispatch.on_pod("MODIFIED", pod("j1", ("ErrImagePull", unreachable)))
        got = events(backend)
        assert {kind for _, kind, _, _ in got} == {"waiting"}
        backend.dispatch.on_pod("MODIFIED", pod("j1", ("ImagePullBackOff", 'Back-off pulling image "x"')))
        assert events(backend) == [("j1", "failed", 'image not pulled: container main: ImagePullBackOff: Back-off '
                                    f'pulling image "x" (the kubelet backed off pulling {IMAGE_PULL_BACKOFFS} times)',
                                    "")]
    finally:
        backend._pool.shutdown(wait=False)


def test_permanent_pull_failures_and_waiting_words():
    assert [permanent_pull_failure(r, m) for r, m in (
        ("ErrImageNeverPull", 'Container image "x" is not present with pull policy of Never'),
        ("InvalidImageName", 'Failed to apply default image tag "X Y"'),
        ("ErrImagePull", MISSING), ("ErrImagePull", "rpc error: manifest unknown"),
        ("ErrImagePull", "dial tcp: i/o timeout"), ("ImagePullBackOff", "Back-off pulling image"),
        ("CreateContainerConfigError", 'secret "s" not found'))] == [True, True, True, True, False, False, False]
    assert waiting_reason(pod("j", ("ContainerCreating", ""))) == "container main: ContainerCreating"
    both = pod("j", ("ContainerCreating", ""))
    both["status"]["initContainerStatuses"] = [{"name": "init", "state": {"waiting": {"reason": "PodInitializing"}}}]
    both["status"]["containerStatuses"].append({"name": "side", "state": {"waiting": {"reason": "ErrImagePull",
                                                                                      "message": "m"}}})
    assert waiting_reason(both) == "container side: ErrImagePull: m"


def test_a_pod_given_up_on_a_lost_node_that_reports_success_when_it_returns_is_a_success():
    from flotilla.core.backend import NODE_RETURNED
    from tests.support.kube_fakes import Recorder
    from flotilla.kubernetes.backend import KubernetesCluster

    now = [1000.0]
    backend = KubernetesCluster("c", client=Recorder(), start=False, workers=1, duration_of=None,
                                node_lost_timeout=300, clock=lambda: now[0])
    backend.health.synced = {"nodes": True, "pods": True}
    try:
        backend.dispatch.on_node("ADDED", node("n1", "4"))
        backend.dispatch.on_pod("ADDED", pod("j1", None, "Running"))
        down = node("n1", "4")
        down["status"]["conditions"][0]["status"] = "Unknown"
        backend.dispatch.on_node("MODIFIED", down)
        now[0] += 301
        assert events(backend) == [("j1", "running", "", ""),
                                   ("j1", "lost", "node n1 lost: NotReady for 301s (nodeLostTimeout 300s)",
                                    "NodeLost")]
        done = pod("j1", None, "Succeeded")
        done["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        backend.dispatch.on_node("MODIFIED", node("n1", "4"))   # the kubelet is back, and says how the pod ended
        backend.dispatch.on_pod("MODIFIED", done)
        backend.dispatch.on_pod("MODIFIED", done)
        assert events(backend) == [("j1", "succeeded", "succeeded on node n1, reported once the node returned",
                                    NODE_RETURNED)]
    finally:
        backend._pool.shutdown(wait=False)
