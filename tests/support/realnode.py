"""The real node for the tests marked ``realnode``: ``real-1``, a real kubelet, started once through the script.

The session fixture runs ``scripts/real-node start``, which reuses a node
that is already running (another session's, or one started by hand) and
starts whatever part of it is down. Each test gets its own namespace on
that node, emptied of pods afterwards (the namespace itself stays, for the
next test of the session to take a new name beside it).

Sessions that use the node sign in under ``<state dir>.sessions/<pid>``;
the last one to leave stops the node if a test session started it, and
leaves alone a node someone started by hand.

Without root or without the toolchain (kubelet, kube-controller-manager, kube-scheduler)
the tests are skipped locally and fail under CI (``CI`` set).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from flotilla.kubernetes.client import ApiError, KubeClient, KubeError, pod_path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "real-node"
_namespaces = itertools.count(1)


def _unavailable(why: str):
    if os.environ.get("CI"):
        pytest.fail(f"real node unavailable under CI: {why}")
    pytest.skip(f"real node unavailable: {why}")


def _toolchain() -> Path:
    from flotilla.kwok.cluster import KwokError, find_bin_dir
    from flotilla.kwok.realnode import TOOLS

    try:
        bin_dir = find_bin_dir(build=bool(os.environ.get("CI")))
    except KwokError as exc:
        _unavailable(f"toolchain not built: {exc}")
    missing = [t for t in TOOLS if not (bin_dir / t).exists()]
    if missing:
        _unavailable(f"{bin_dir} lacks {', '.join(missing)} (run scripts/k8s-tools)")
    return bin_dir


def script(*args: str, bin_dir: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``scripts/real-node ARGS`` (the toolchain passed on in ``FLOTILLA_K8S_BIN``)."""
    env = dict(os.environ)
    if bin_dir is not None:
        env["FLOTILLA_K8S_BIN"] = str(bin_dir)
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)


def _exports(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, value = line[len("export "):].partition("=")
            out[key] = value
    return out


@dataclass
class RealNodeCluster:
    """The node's cluster as a test sees it; ``namespace`` is the test's own."""

    kubeconfig: str
    context: str
    image: str
    client: KubeClient
    bin_dir: Path
    node: str = "real-1"
    namespace: str = "default"
    started: float = field(default_factory=time.monotonic)

    def pods(self, namespace: str | None = None) -> list[dict]:
        return self.client.get(pod_path(namespace or self.namespace))["items"]

    def create_namespace(self, name: str, timeout: float = 60.0) -> None:
        """Create the namespace and wait for what its pods need: the ``default`` ServiceAccount (ServiceAccount
        admission refuses a pod whose account is missing) and the ``kube-root-ca.crt`` ConfigMap (the token
        volume's CA), both made by kube-controller-manager, as Kubernetes' e2e framework waits for them."""
        try:
            self.client.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                    "metadata": {"name": name}})
        except ApiError as exc:
            if exc.status != 409:
                raise

        def exists(path: str) -> bool:
            try:
                self.client.get(path)
                return True
            except ApiError as exc:
                if exc.status != 404:
                    raise
                return False

        self.wait(lambda: exists(f"/api/v1/namespaces/{name}/serviceaccounts/default")
                  and exists(f"/api/v1/namespaces/{name}/configmaps/kube-root-ca.crt"),
                  timeout, f"namespace {name}'s default ServiceAccount and kube-root-ca.crt ConfigMap")

    def delete_pods(self, namespace: str | None = None, timeout: float = 60.0) -> None:
        """Delete the namespace's pods (grace 1 s, the kubelet tears them down) and wait until they are gone."""
        namespace = namespace or self.namespace
        for pod in self.pods(namespace):
            try:
                self.client.delete(pod_path(namespace, pod["metadata"]["name"]), {"gracePeriodSeconds": 1})
            except ApiError:
                pass
        deadline = time.monotonic() + timeout
        while self.pods(namespace) and time.monotonic() < deadline:
            time.sleep(0.2)

    def node_ready(self) -> str | None:
        from flotilla.kwok.realnode import node_condition, node
        return node_condition(node(), self.client)

    def stop_kubelet(self) -> None:
        result = script("kubelet-stop", bin_dir=self.bin_dir)
        assert result.returncode == 0, result.stderr

    def start_kubelet(self) -> None:
        """Start the kubelet again (if stopped) and wait until the node is Ready."""
        result = script("kubelet-start", bin_dir=self.bin_dir)
        assert result.returncode == 0, result.stderr

    def restart_kubelet(self, max_pods: int | None = None) -> None:
        """Restart the kubelet with ``maxPods: max_pods`` (the node's usual 110 when None) and wait until the node
        is Ready with that many pod slots."""
        args = ("kubelet-restart",) + (("--max-pods", str(max_pods)) if max_pods is not None else ())
        result = script(*args, bin_dir=self.bin_dir)
        assert result.returncode == 0, result.stderr

    @contextmanager
    def max_pods(self, max_pods: int):
        """The node's kubelet with ``maxPods: max_pods`` inside the block, its usual config again after it."""
        self.restart_kubelet(max_pods)
        try:
            yield self
        finally:
            self.restart_kubelet()

    def ensure_running(self) -> None:
        """Start whatever part of the node is down (a test that stopped the kubelet and failed midway)."""
        from flotilla.kwok.realnode import running

        if not running():
            result = script("start", bin_dir=self.bin_dir)
            assert result.returncode == 0, result.stderr

    def wait(self, predicate, timeout: float = 60.0, what: str = "the condition", step: float = 0.1):
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
            time.sleep(step)


def _sessions_dir() -> Path:
    from flotilla.kwok.realnode import state_dir
    base = state_dir()
    return base.with_name(base.name + ".sessions")


def _live_sessions(sessions: Path) -> list[int]:
    live = []
    for path in sessions.glob("[0-9]*"):
        pid = int(path.name)
        try:
            os.kill(pid, 0)
            live.append(pid)
        except ProcessLookupError:
            path.unlink(missing_ok=True)
        except PermissionError:
            live.append(pid)
    return live


def _report(request, seconds: float, started: bool) -> None:
    import json

    from flotilla.kwok.realnode import state_dir

    line = f"real node: ready in {seconds:.1f}s"
    if started:
        try:
            phases = json.loads((state_dir() / "timings.json").read_text())["phases"]
            line += " (started: " + ", ".join(f"{k} {v:.1f}s" for k, v in phases.items() if k != "total") + ")"
        except (OSError, ValueError, KeyError):
            pass
    else:
        line += " (already running)"
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("")
        reporter.write_line(line)


@pytest.fixture(scope="session")
def real_node_cluster(request):
    """The running real node (started through ``scripts/real-node start`` if needed), for the whole session.

    The time the start took goes to the terminal (and so to CI's log), with its phases when it started the node.
    """
    if os.geteuid() != 0:
        _unavailable("needs root (containerd, mounts, cgroups, iptables)")
    bin_dir = _toolchain()
    from flotilla.kwok.realnode import running

    sessions = _sessions_dir()
    sessions.mkdir(parents=True, exist_ok=True)
    me = sessions / str(os.getpid())
    me.touch()
    try:
        if not running():
            (sessions / "started-by-tests").touch()
        began = time.monotonic()
        result = script("start", bin_dir=bin_dir)
        if result.returncode != 0:
            pytest.fail(f"scripts/real-node start failed ({result.returncode}):\n{result.stderr[-3000:]}")
        exports = _exports(result.stdout)
        _report(request, time.monotonic() - began, started=(sessions / "started-by-tests").exists())
        client = KubeClient.from_kubeconfig(exports["KUBECONFIG"], exports["FLOTILLA_REAL_NODE_CONTEXT"])
        cluster = RealNodeCluster(exports["KUBECONFIG"], exports["FLOTILLA_REAL_NODE_CONTEXT"],
                                  exports["FLOTILLA_REAL_NODE_IMAGE"], client, bin_dir)
        try:
            yield cluster
        finally:
            client.close()
    finally:
        me.unlink(missing_ok=True)
        if not _live_sessions(sessions) and (sessions / "started-by-tests").exists():
            (sessions / "started-by-tests").unlink(missing_ok=True)
            script("stop", bin_dir=bin_dir)


@pytest.fixture
def real_node(real_node_cluster):
    """The real node with the kubelet running and a namespace of the test's own, emptied of pods afterwards."""
    real_node_cluster.ensure_running()
    name = f"rn-{os.getpid()}-{next(_namespaces)}"
    real_node_cluster.create_namespace(name)
    real_node_cluster.namespace = name
    try:
        yield real_node_cluster
    finally:
        try:
            real_node_cluster.ensure_running()
            real_node_cluster.delete_pods(name)
        except (KubeError, AssertionError):
            pass
        real_node_cluster.namespace = "default"
