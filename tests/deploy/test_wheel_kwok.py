"""The built wheel, installed into a fresh virtualenv, runs a job to completion on a KWOK cluster.

What an image or a ``pip install flotilla`` gets is the wheel, not this
checkout: the fake clusters' kwok-controller Stages (``flotilla/kwok/stages``)
must ship in it, or ``flotilla kwok up`` starts a cluster whose pods run
forever and never succeed. Every command here is the installed
``flotilla``'s, run from outside the checkout; only the Kubernetes toolchain
(``FLOTILLA_K8S_BIN``, built by ``scripts/k8s-tools``) comes from outside.
"""

from __future__ import annotations

import json
import os
import subprocess
import zipfile

import pytest

from tests.support.venvs import ROOT, build_wheel, clean_env, fresh_venv

pytestmark = [pytest.mark.venv, pytest.mark.kwok]

CONFIG = """
priorityClasses:
  - {name: armada-default, priority: 30000, preemptible: false}
defaultPriorityClass: armada-default
queues:
  - {name: A, weight: 1}
cycle: {period: 0.5s}
clusters:
  - {name: wheel, kind: kubernetes, kubeconfig: KUBECONFIG, context: CONTEXT, namespace: default}
"""

WORKLOAD = """
submissions:
  - {at: 0s, queue: A, count: 3, jobSet: w, requests: {cpu: 1}, duration: 3s}
"""


def test_the_wheel_ships_the_kwok_stages_and_its_flotilla_runs_jobs_to_completion_on_kwok(tmp_path):
    from tests.support.kwok import _toolchain

    bin_dir = _toolchain()
    wheel = build_wheel(ROOT, tmp_path / "wheel")
    stages = sorted(p.name for p in (ROOT / "flotilla" / "kwok" / "stages").glob("*.yaml"))
    with zipfile.ZipFile(wheel) as archive:
        shipped = sorted(name.rsplit("/", 1)[1] for name in archive.namelist()
                         if name.startswith("flotilla/kwok/stages/"))
    assert shipped == stages == ["controller.yaml", "nodes.yaml", "pods.yaml"]

    python = fresh_venv(tmp_path / "venv", str(wheel))
    flotilla = str(python.parent / "flotilla")
    work = tmp_path / "work"  # not the checkout: nothing may be read from it
    work.mkdir()
    env = clean_env()
    env["FLOTILLA_K8S_BIN"] = str(bin_dir)
    env["KWOK_WORKDIR"] = str(tmp_path / "kwok")
    where = subprocess.run([str(python), "-c", "import flotilla; print(flotilla.__file__)"], cwd=work, env=env,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert where.startswith(str(tmp_path / "venv")), where

    name = f"fltest-{os.getpid()}-wheel"
    kubeconfig = tmp_path / "kubeconfig"

    def run(*args: str, timeout: float) -> subprocess.CompletedProcess:
        return subprocess.run([flotilla, *args], cwd=work, env=env, capture_output=True, text=True, timeout=timeout)

    up = run("kwok", "up", "--name", name, "--nodes", "1", "--kubeconfig", str(kubeconfig), "--timeout", "120",
             timeout=200)
    try:
        assert up.returncode == 0, up.stderr
        context = up.stdout.strip()
        assert context == f"kwok-{name}"
        (work / "flotilla.yaml").write_text(CONFIG.replace("KUBECONFIG", str(kubeconfig)).replace("CONTEXT", context))
        (work / "workload.yaml").write_text(WORKLOAD)
        simulate = run("simulate", "--real-time", "--config", "flotilla.yaml", "--workload", "workload.yaml",
                       "--json", "report.json", "--quiet", "--until", "60s", timeout=150)
        assert simulate.returncode == 0, simulate.stdout + simulate.stderr
        report = json.loads((work / "report.json").read_text())
        assert {queue: q["finished"] for queue, q in report["queues"].items()} == {"A": 3}
    finally:
        down = run("kwok", "down", "--name", name, "--kubeconfig", str(kubeconfig), timeout=150)
        assert down.returncode == 0, down.stderr
