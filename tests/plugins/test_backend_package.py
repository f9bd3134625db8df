"""Cluster backends as packages: capabilities read once, kinds from the ``flotilla.backends`` group, and the example
package examples/backends/flotilla-localprocess installed in a fresh virtualenv, where ``flotilla serve`` runs a
submitted job as a process to completion and ``flotilla logs`` shows its output."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from flotilla.config import ConfigError
from flotilla.config.loader import parse_config
from flotilla.core.backend import SimulatedCluster
from flotilla.core.capabilities import Backends, capabilities_of
from flotilla.core.model import Node
from flotilla.plugin_manager import make_backends
from tests.support.scenario import install_distribution
from tests.support.serve import free_port
from tests.support.venvs import ROOT, build_wheel, clean_env, fresh_venv

PACKAGE = ROOT / "examples" / "backends" / "flotilla-localprocess"

TINY = '''
from pydantic import BaseModel, ConfigDict, Field

from flotilla.backend import ClusterSnapshot, Node


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cpus: int = Field(ge=1)


class Tiny:
    """A backend of one node of ``cpus`` cores that runs nothing."""

    Args = Args

    def __init__(self, name, args, options):
        self.name, self.args, self.options = name, args, options

    def snapshot(self):
        return ClusterSnapshot(self.name, [Node("n", self.name, {"cpu": self.args.cpus * 1000})])

    def apply(self, decisions):
        pass

    def poll_events(self):
        return []


class NoArgs(Tiny):
    Args = None
'''


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """A package providing cluster kinds ``tiny`` (args: cpus), ``bare`` (no args) and ``kubernetes`` (refused)."""
    site = tmp_path / "site"
    install_distribution(site, "tiny_backend", TINY, "flotilla.backends",
                         "tiny = tiny_backend:Tiny\nbare = tiny_backend:NoArgs")
    monkeypatch.syspath_prepend(str(site))
    return site


def config_of(clusters: str, file: str = "c.yaml"):
    return parse_config("queues: [{name: A, weight: 1}]\nclusters:\n" + clusters, file)


def error_of(clusters: str) -> str:
    with pytest.raises(ConfigError) as info:
        config_of(clusters)
    return str(info.value)


# -- kinds and args --------------------------------------------------------------------------

def test_a_kind_a_package_provides_is_made_with_its_args_read_by_its_model(tiny):
    cfg = config_of("  - {name: t, kind: tiny, args: {cpus: 3}}\n  - {name: s, kind: simulated, nodes: []}\n"
                    "  - {name: b, kind: bare}\n")
    backends = make_backends(cfg, clock=lambda: 5.0)
    assert sorted(backends) == ["b", "s", "t"]
    t = backends["t"]
    assert (type(t).__name__, t.name, t.args.cpus, t.options["clock"]()) == ("Tiny", "t", 3, 5.0)
    assert [(n.name, dict(n.resources)) for n in t.snapshot().nodes] == [("n", {"cpu": 3000})]
    assert backends["b"].args is None
    assert isinstance(backends["s"], SimulatedCluster)


def test_an_unknown_kind_is_one_line_naming_the_known_kinds_and_the_nearest(tiny):
    assert error_of("  - {name: x, kind: slurm}\n") == (
        "c.yaml:3: clusters[0].kind: unknown cluster kind 'slurm' (known: bare, kubernetes, simulated, tiny)")
    assert error_of("  - {name: x, kind: tinny}\n") == (
        "c.yaml:3: clusters[0].kind: unknown cluster kind 'tinny' (known: bare, kubernetes, simulated, tiny); "
        "did you mean 'tiny'?")


def test_args_the_kinds_model_refuses_are_errors_at_their_line_and_field(tiny):
    assert error_of("  - name: x\n    kind: tiny\n    args:\n      cpus: 0\n") == (
        "c.yaml:6: clusters[0].args.cpus: Input should be greater than or equal to 1 (got 0)")
    assert error_of("  - name: x\n    kind: tiny\n    args:\n      cpus: 2\n      cpu: 2\n") == (
        "c.yaml:7: clusters[0].args.cpu: unknown field 'cpu' (did you mean 'cpus'?)")
    assert error_of("  - name: x\n    kind: tiny\n") == "c.yaml:3: clusters[0].args.cpus: required field missing"
    assert error_of("  - {name: x, kind: bare, args: {a: 1}}\n") == (
        "c.yaml:3: clusters[0].args: cluster kind 'bare': unknown argument(s) a; this kind takes none")
    assert error_of("  - {name: x, kind: tiny, cpus: 2}\n") == (
        "c.yaml:3: clusters[0].cpus: unknown field 'cpus' (expected one of: name, kind, args)")


def test_a_package_may_not_register_a_built_in_kind(tmp_path, monkeypatch):
    site = tmp_path / "site"
    install_distribution(site, "shadow", TINY, "flotilla.backends", "kubernetes = shadow:Tiny\nshadowed = shadow:Tiny")
    monkeypatch.syspath_prepend(str(site))
    # The built-in kind stays the built-in one; a config naming it through the package's other kind still works.
    assert type(config_of("  - {name: k, kind: kubernetes}\n").clusters[0]).__name__ == "KubernetesClusterConfig"
    from flotilla.plugin_manager import PluginNameConflict, find_backend_kind

    with pytest.raises(PluginNameConflict, match=r"^cluster kind 'kubernetes' is built in, and flotilla-shadow "
                                                 r"\(shadow:Tiny\) registers it too; uninstall it, or give its kind "
                                                 r"another name$"):
        find_backend_kind("kubernetes")


# -- capabilities ----------------------------------------------------------------------------

def test_capabilities_are_read_once_from_what_each_backend_implements():
    simulated = SimulatedCluster("s", [Node("n", "s", {"cpu": 1000})])
    assert capabilities_of(simulated).names() == ["drain", "availability", "switch"]

    class HalfIntake:   # one method of PodIntake is not the capability
        name = "h"

        def take_intake(self):
            return [], {}

        needs_templates = False   # false: no templates capability either

    assert capabilities_of(HalfIntake()).names() == []
    backends = Backends({"s": simulated, "h": HalfIntake()})
    assert backends.having("switch") == {"s": simulated}
    assert Backends.of(backends) is backends
    simulated.available = False      # a capability's state is read through the record, live
    assert backends.capabilities["s"].availability.available is False


def test_a_kubernetes_cluster_has_every_capability_but_logs_and_switch():
    from flotilla.kubernetes.backend import KubernetesCluster

    class Client:   # never asked: the cluster is not started
        def end_watches(self, stop):
            pass

        def close(self):
            pass

    backend = KubernetesCluster("k", client=Client(), start=False)
    try:
        caps = capabilities_of(backend)
        assert caps.names() == ["intake", "priority_classes", "templates", "enforces_deadlines", "drain",
                                "availability", "sync", "kept_logs", "kubernetes_api", "namespace", "close"]
        assert (caps.namespace, caps.sync.sync_error) == ("default", "not synced yet")
    finally:
        backend.close()


# -- the example package, installed ----------------------------------------------------------

@pytest.fixture(scope="module")
def localprocess_venv(tmp_path_factory) -> tuple[Path, Path]:
    """A fresh virtualenv with Flotilla and flotilla-localprocess[test] installed: its python, and the package's
    copied sources."""
    wheels = tmp_path_factory.mktemp("wheels")
    flotilla_wheel = build_wheel(ROOT, tmp_path_factory.mktemp("flotilla-wheel"))
    wheel = build_wheel(PACKAGE, wheels)
    python = fresh_venv(tmp_path_factory.mktemp("venv") / "env", str(flotilla_wheel), f"{wheel}[test]")
    return python, wheels / "src" / PACKAGE.name


@pytest.mark.venv
def test_the_example_backend_passes_its_own_tests_in_a_fresh_virtualenv(localprocess_venv):
    python, sources = localprocess_venv
    result = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=sources,
                            env=clean_env(), capture_output=True, text=True)
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0 and re.fullmatch(r"6 passed in [\d.]+s( \([\d:]+\))?", summary), \
        result.stdout + result.stderr


@pytest.mark.venv
def test_serve_runs_a_submitted_job_as_a_process_and_logs_shows_its_output(localprocess_venv, tmp_path):
    """The acceptance of issue 29's backends: ``kind: localprocess`` from the installed example package."""
    python, sources = localprocess_venv
    flotilla = str(python.parent / "flotilla")
    port = free_port()
    config = (sources / "flotilla.yaml").read_text().replace("127.0.0.1:8080", f"127.0.0.1:{port}")
    (tmp_path / "flotilla.yaml").write_text(config)
    env = clean_env() | {"FLOTILLA_URL": f"http://127.0.0.1:{port}", "FLOTILLA_TOKEN": "alice-secret"}
    log = open(tmp_path / "serve.log", "wb")
    serve = subprocess.Popen([flotilla, "serve", "--config", "flotilla.yaml"], cwd=tmp_path, env=env,
                             stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + 180
        while True:
            assert serve.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "serve did not come up"
            time.sleep(0.2)
        submitted = subprocess.run([flotilla, "submit", str(sources / "job.yaml"), "-o", "json"], env=env,
                                   capture_output=True, text=True)
        assert submitted.returncode == 0, submitted.stderr
        (job_id,) = [job["id"] for job in httpx.Response(200, content=submitted.stdout).json()["jobs"]]
        headers = {"Authorization": "Bearer alice-secret"}
        deadline = time.monotonic() + 120
        while (state := httpx.get(f"http://127.0.0.1:{port}/v1/jobs/{job_id}", headers=headers).json()["state"]) \
                not in ("succeeded", "failed"):
            assert time.monotonic() < deadline, state
            time.sleep(0.2)
        assert state == "succeeded"
        logs = subprocess.run([flotilla, "logs", job_id], env=env, capture_output=True, text=True)
        assert (logs.returncode, logs.stdout, logs.stderr) == (0, "hello from flotilla\ndone\n", "")
    finally:
        serve.terminate()
        serve.wait(60)
        log.close()


# -- logs through the JobLogs capability -----------------------------------------------------

class Logged:
    """A backend whose pods' output is kept in memory (the JobLogs capability)."""

    name = "t"

    def __init__(self, output: dict[str, list[bytes]]):
        self.output = output
        self.asked: list[tuple] = []

    def snapshot(self): ...

    def apply(self, decisions): ...

    def poll_events(self):
        return []

    def job_log(self, pod_id, tail, follow):
        self.asked.append((pod_id, tail, follow))
        if pod_id not in self.output:
            raise LookupError("no output of that pod here")
        return iter(self.output[pod_id])


def pod_logs(backend=None):
    from types import SimpleNamespace

    from flotilla.service.logs import PodLogs
    from flotilla.service.settings import ClusterSpec

    settings = SimpleNamespace(clusters=(ClusterSpec("t", "tiny"), ClusterSpec("s", "simulated")))
    loop = SimpleNamespace(backends=Backends({"t": backend})) if backend is not None else None
    return PodLogs(settings, loop)


def test_a_backends_own_log_is_read_through_its_capability_with_the_apis_bounds(monkeypatch):
    from flotilla.service import logs
    from flotilla.service.errors import ApiError

    monkeypatch.setattr(logs, "MAX_BYTES", 5)
    backend = Logged({"j1": [b"hel", b"", b"lo wor", b"ld\n"], "j2#1": [b"two\n"]})
    reader = pod_logs(backend)
    job = {"id": "j1", "state": "succeeded", "cluster": "t", "pods": [{}]}
    assert reader.read(job, 0, None) == (b"hello", True)
    assert reader.read(job, 0, 3) == (b"hello", True)
    response, release = reader.follow(job, 0, None)
    assert [reader.next_chunk(response) for _ in range(4)] == [b"hel", b"lo wor", b"ld\n", b""]
    release()
    assert reader.read({"id": "j2", "state": "running", "cluster": "t", "pods": [{}, {}]}, 1, None) == (b"two\n", False)
    assert backend.asked == [("j1", None, False), ("j1", 3, False), ("j1", None, True), ("j2#1", None, False)]
    with pytest.raises(ApiError) as gone:
        reader.read({"id": "j3", "state": "failed", "cluster": "t", "pods": [{}]}, 0, None)
    assert (gone.value.status, gone.value.message) == (410, "pod j3 on cluster 't': no output of that pod here")
    with pytest.raises(ApiError) as elsewhere:   # the api role: no backends here
        pod_logs().read(job, 0, None)
    assert (elsewhere.value.status, elsewhere.value.message) == (
        409, "job 'j1' ran on tiny cluster 't', whose log is read where the scheduling loop runs (serve --role all "
             "or scheduler), not here")
    with pytest.raises(ApiError) as simulated:
        reader.read({"id": "j4", "state": "running", "cluster": "s", "pods": [{}]}, 0, None)
    assert (simulated.value.status, simulated.value.message) == (
        409, "job 'j4' ran on simulated cluster 's': its jobs run no containers, so there is no log")


def test_no_call_site_probes_a_backend_with_hasattr_or_getattr():
    """What a backend can do is its capability record's to say (flotilla.core.capabilities), read once."""
    import ast

    files = sorted((ROOT / "flotilla" / "service").rglob("*.py")) + [ROOT / "flotilla" / "kubernetes" / "realtime.py"]
    probes = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("hasattr", "getattr") \
                    and node.args and re.search(r"backend|\bb\b", ast.unparse(node.args[0])):
                probes.append((str(path.relative_to(ROOT)), node.lineno, ast.unparse(node)))
    assert len(files) > 40 and probes == []
