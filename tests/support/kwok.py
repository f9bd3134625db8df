"""Fake clusters for the tests marked ``kwok``: started once per session, reset before each test.

The toolchain comes from ``FLOTILLA_K8S_BIN`` (``scripts/test`` exports what
``scripts/k8s-tools`` prints), else from the cache or by running
``scripts/k8s-tools``. Without it the tests are skipped locally and fail
under CI (``CI`` set), where ``.ci/run`` is expected to have built it.

Both clusters run kube-controller-manager's Job controller, garbage
collector and pod GC (``JOB_CONTROLLERS``), so a test may create real
``batch/v1`` Jobs, and have Volcano's PodGroup CRD (``deploy/crds/``).

Cluster names carry the pytest process id, so engineers running the suite at
the same time on one machine never share a cluster; clusters left behind
by a killed run are removed at the next start.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from flotilla.kubernetes.client import KubeClient, KubeError, pod_path

NODES = 2
CRDS = Path(__file__).resolve().parents[2] / "deploy" / "crds"
NODE_TEMPLATE = """
namePrefix: node
resources: {cpu: 32, memory: 128Gi, pods: 110}
labels: {flotilla.io/test: kwok}
"""


@dataclass
class TestCluster:
    name: str          # kwok cluster name
    kubeconfig: str
    context: str
    client: KubeClient

    def pods(self) -> list[dict]:
        return self.client.get("/api/v1/pods")["items"]

    def reset(self, nodes: int = NODES) -> None:
        """Back to ``nodes`` empty 32-core nodes: every Job, PodGroup, pod and other node deleted at once."""
        from flotilla.kwok.cluster import create_nodes, load_node_template, wait_nodes_ready

        for group, resource in (("batch/v1", "jobs"), ("scheduling.volcano.sh/v1beta1", "podgroups")):
            try:
                items = self.client.get(f"/apis/{group}/{resource}")["items"]
            except KubeError:
                items = []  # a cluster without the CRD
            for item in items:
                meta = item["metadata"]
                try:
                    # Background: the garbage collector deletes a Job's pods, as `kubectl delete job` has it do.
                    self.client.delete(f"/apis/{group}/namespaces/{meta['namespace']}/{resource}/{meta['name']}",
                                       {"gracePeriodSeconds": 0, "propagationPolicy": "Background"})
                except KubeError:
                    pass
        self.delete_all_pods()
        wanted = {f"node-{i}" for i in range(1, nodes + 1)}
        for node in self.client.get("/api/v1/nodes")["items"]:
            if node["metadata"]["name"] not in wanted:
                self.client.delete(f"/api/v1/nodes/{node['metadata']['name']}")
        template_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"flotilla-kwok-node-{os.getpid()}.yaml"
        template_path.write_text(NODE_TEMPLATE)
        names = create_nodes(self.client, load_node_template(template_path), nodes)
        wait_nodes_ready(self.client, names, 60)
        deadline = time.monotonic() + 30
        while self.pods() and time.monotonic() < deadline:
            time.sleep(0.1)
            # A Job controller's sync under way as its Job went may still have made a pod; delete it too.
            self.delete_all_pods()
        assert not self.pods(), "pods left after reset"

    def delete_all_pods(self) -> None:
        """Delete every pod now, finalizers (a Job's tracking one) taken off first so that none lingers."""
        for pod in self.pods():
            meta = pod["metadata"]
            path = pod_path(meta["namespace"], meta["name"])
            try:
                if meta.get("finalizers"):
                    self.client.patch(path, {"metadata": {"finalizers": None}})
                self.client.delete(path, {"gracePeriodSeconds": 0})
            except KubeError:
                pass

    def create_namespace(self, name: str) -> None:
        """Make ``name`` exist (Flotilla creates no namespaces: a job's must be there already)."""
        try:
            self.client.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                    "metadata": {"name": name}})
        except KubeError as exc:
            if getattr(exc, "status", None) != 409:
                raise

    def create_foreign_pod(self, name: str, node: str, cpu: str, namespace: str = "default") -> None:
        """Someone else's pod (no Flotilla label), bound to ``node``."""
        self.client.post(pod_path(namespace), {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": "someone-else"}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                                       "resources": {"requests": {"cpu": cpu},
                                                                     "limits": {"cpu": cpu}}}]}})

    def wait_pods(self, predicate, timeout: float = 30.0, what: str = "pods") -> list[dict]:
        deadline = time.monotonic() + timeout
        while True:
            pods = self.pods()
            if predicate(pods):
                return pods
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; have "
                                     f"{sorted((p['metadata']['name'], p['status'].get('phase')) for p in pods)}")
            time.sleep(0.1)


def install_crds(client: KubeClient, timeout: float = 30.0) -> None:
    """Create deploy/crds/'s CustomResourceDefinitions and wait until the API server serves them."""
    import yaml

    crds = [doc for path in sorted(CRDS.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]
    base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    for crd in crds:
        try:
            client.post(base, crd)
        except KubeError as exc:
            if getattr(exc, "status", None) != 409:
                raise
    deadline = time.monotonic() + timeout
    for crd in crds:
        while True:
            status = client.get(f"{base}/{crd['metadata']['name']}").get("status") or {}
            if any(c["type"] == "Established" and c["status"] == "True" for c in status.get("conditions") or ()):
                break
            assert time.monotonic() < deadline, f"CRD {crd['metadata']['name']} not established"
            time.sleep(0.1)


def flotilla_pods_by_node(pods: list[dict]) -> dict[str, list[str]]:
    """Job ids of live Flotilla pods per node, read from pod objects (not from any Flotilla cache)."""
    out: dict[str, list[str]] = {}
    for pod in pods:
        meta = pod["metadata"]
        job_id = (meta.get("annotations") or {}).get("flotilla.io/job-id")
        if job_id and not meta.get("deletionTimestamp") and pod["status"].get("phase") in ("Pending", "Running"):
            out.setdefault(pod["spec"].get("nodeName"), []).append(job_id)
    return {node: sorted(ids, key=natural) for node, ids in out.items()}


def natural(text: str):
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))


def _toolchain():
    from flotilla.kwok.cluster import KwokError, find_bin_dir

    try:
        return find_bin_dir(build=bool(os.environ.get("CI")))
    except KwokError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"kwok toolchain missing under CI: {exc}")
        pytest.skip(f"kwok toolchain not built: {exc}")


def _cleanup_stale(bin_dir) -> None:
    """Remove fake clusters of earlier test sessions whose pytest process is gone."""
    from flotilla.kwok.cluster import down, workdir

    root = workdir("x").parent
    if not root.exists():
        return
    for path in root.iterdir():
        match = re.fullmatch(r"fltest-(\d+)-\w+", path.name)
        if not match:
            continue
        pid = int(match.group(1))
        try:
            os.kill(pid, 0)
            continue  # still running: someone else's session
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        try:
            down(path.name, kubeconfig=str(path / "kubeconfig.yaml"), bin_dir=bin_dir)
        except Exception:  # noqa: BLE001 - best effort
            pass


@pytest.fixture(scope="session")
def kwok_clusters(tmp_path_factory):
    """Two fake clusters (``a`` and ``b``), each with two 32-core nodes, for the whole session."""
    from concurrent.futures import ThreadPoolExecutor

    from flotilla.kwok.cluster import JOB_CONTROLLERS, down, up

    bin_dir = _toolchain()
    _cleanup_stale(bin_dir)
    kubeconfig = str(tmp_path_factory.mktemp("kwok") / "kubeconfig")
    template = tmp_path_factory.mktemp("kwok-node") / "node.yaml"
    template.write_text(NODE_TEMPLATE)
    names = {key: f"fltest-{os.getpid()}-{key}" for key in ("a", "b")}
    started = time.monotonic()
    try:
        # One at a time: kwokctl edits the shared kubeconfig file.
        fakes = {key: up(name, NODES, template, kubeconfig=kubeconfig, bin_dir=bin_dir, timeout=120,
                         controllers=JOB_CONTROLLERS)
                 for key, name in names.items()}
        clusters = {key: TestCluster(f.name, f.kubeconfig, f.context, f.client()) for key, f in fakes.items()}
        for cluster in clusters.values():
            install_crds(cluster.client)
        print(f"\nkwok: clusters {', '.join(names.values())} up in {time.monotonic() - started:.1f}s")
        yield clusters
    finally:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda name: down(name, kubeconfig=kubeconfig, bin_dir=bin_dir), names.values()))


@pytest.fixture
def kwok(kwok_clusters):
    """The session's two fake clusters, reset to two empty nodes each."""
    for cluster in kwok_clusters.values():
        cluster.reset()
    return kwok_clusters
