"""A Kubernetes backend over a recording fake client: binds, events and watch events without a cluster."""

from flotilla.core.backend import ClusterDecisions
from flotilla.core.decisions import Placement
from flotilla.core.model import Job
from flotilla.kubernetes.backend import KubernetesCluster


class Recorder:
    """A KubeClient that accepts every write and records the pods created."""

    def __init__(self):
        self.created: list[tuple[str, dict]] = []
        self.posts: list[tuple[str, dict]] = []
        self.deleted: list[tuple[str, dict]] = []

    def get(self, path, **_):
        return {}

    def create_pod(self, namespace, body):
        self.created.append((namespace, body))

    def post(self, path, body=None, parse=True, **_):
        self.posts.append((path, body))
        return body

    def delete(self, path, body=None, **_):
        self.deleted.append((path, body))

    def patch(self, path, body, **_):
        self.posts.append((path, body))


def node(name: str, cpu: str, pods: int | None = None) -> dict:
    allocatable = {"cpu": cpu, "memory": "64Gi"}
    if pods is not None:
        allocatable["pods"] = str(pods)
    return {"metadata": {"name": name, "labels": {}}, "spec": {},
            "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]}}


def foreign(name: str, node_name: str, cpu: str, phase: str = "Running") -> dict:
    return {"metadata": {"namespace": "default", "name": name, "uid": f"uid-{name}", "labels": {}},
            "spec": {"nodeName": node_name, "schedulerName": "default-scheduler",
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": phase}}


def backend_with(*nodes: dict, client=None, workers: int = 1) -> tuple[KubernetesCluster, Recorder]:
    """A backend of cluster ``c`` with ``nodes``, its informers taken as synced, on ``client`` (a new Recorder
    by default); nothing started."""
    client = Recorder() if client is None else client
    backend = KubernetesCluster("c", client=client, start=False, workers=workers, duration_of=None)
    backend.health.synced = {"nodes": True, "pods": True}
    for obj in nodes:
        backend.dispatch.on_node("ADDED", obj)
    return backend, client


def start(backend: KubernetesCluster, *placements: tuple[str, str, int], meanwhile=None) -> None:
    """Apply starts of (job id, node, millicores) and run their binds one after the other, as the pool would;
    ``meanwhile``: called between the decision and the binds (what the watch brings in between)."""
    work: list[tuple] = []
    decisions = ClusterDecisions(start=[Placement(Job(job_id, "q", requests={"cpu": cpu, "memory": 2**30}), "c", name)
                                        for job_id, name, cpu in placements])
    with backend._lock:
        backend._apply(decisions, work)
    if meanwhile is not None:
        meanwhile()
    for task in work:
        task[0](*task[1:])


def events(backend: KubernetesCluster) -> list[tuple[str, str, str, str]]:
    return [(ev.job_id, ev.kind, ev.reason, ev.cause) for ev in backend.poll_events()]
