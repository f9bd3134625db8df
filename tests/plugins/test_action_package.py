"""The example action package (examples/firstfit-action), installed as its users would install it.

In a fresh virtual environment (no system site packages) with Flotilla from
this checkout, its own tests pass with that environment's pytest; installed
into this interpreter's path, ``flotilla schedule-once`` runs it from the
config's ``actions:`` list, and the core refuses what its rules refuse.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.support.scenario import config, invoke, run_once
from tests.support.venvs import ROOT, build_wheel, clean_env, fresh_venv, pip

PACKAGE = ROOT / "examples" / "firstfit-action"


@pytest.mark.venv
def test_the_example_action_passes_its_own_tests_in_a_fresh_virtualenv(tmp_path):
    flotilla_wheel = build_wheel(ROOT, tmp_path / "flotilla-wheel")
    wheel = build_wheel(PACKAGE, tmp_path / "wheels")
    python = fresh_venv(tmp_path / "venv", str(flotilla_wheel), f"{wheel}[test]")
    tests = tmp_path / "wheels" / "src" / PACKAGE.name
    result = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=tests,
                            env=clean_env(), capture_output=True, text=True)
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0 and re.fullmatch(r"3 passed in [\d.]+s", summary), result.stdout + result.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The package installed (no dependencies: Flotilla is this interpreter's) into a directory on sys.path."""
    work = tmp_path_factory.mktemp("firstfit")
    wheel = build_wheel(PACKAGE, work)
    target = work / "site"
    pip(sys.executable, "install", "--quiet", "--no-deps", "--target", str(target), str(wheel))
    sys.path.insert(0, str(target))
    yield
    sys.path.remove(str(target))
    sys.modules.pop("firstfit_action", None)


STATE = """
clusters:
  - name: c1
    nodes:
      - {name: gpu-1, resources: {cpu: 8}, taints: [{key: gpu, value: "yes", effect: NoSchedule}]}
      - {name: node-1, resources: {cpu: 4}, labels: {disk: hdd}}
      - {name: node-2, resources: {cpu: 4}, labels: {disk: ssd}}
jobs:
  - {id: a-1, queue: A, requests: {cpu: 1}, submitted: 1, nodeSelector: {disk: ssd}}
  - {id: a-2, queue: A, requests: {cpu: 1}, submitted: 2}
  - {id: b-1, queue: B, requests: {cpu: 2}, submitted: 1}
  - {id: b-2, queue: B, requests: {cpu: 2}, submitted: 2}
"""


def test_the_installed_action_places_only_where_the_core_allows(tmp_path, installed):
    """Never on the tainted gpu-1 (first in node order), a-1 only where its selector allows, B up to its limit."""
    text = config(queues="queues: [{name: A}, {name: B, limits: {cpu: 0.125}}]",
                  extra="actions: [{name: firstfit}]")
    out = run_once(tmp_path, text, STATE)
    assert {p["job"]: p["node"] for p in out["scheduled"]} == {"a-1": "node-2", "a-2": "node-1", "b-1": "node-1"}
    assert out["reasons"] == {"b-2": "queue B at its cpu limit 0.125"}


def test_its_bad_args_are_a_config_error_at_their_line(tmp_path, installed):
    text = config(extra="actions:\n  - name: firstfit\n    args: {maxJob: 3}\n")
    line = text.splitlines().index("    args: {maxJob: 3}") + 1
    result = invoke(tmp_path, text, STATE)
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"error: {tmp_path / 'flotilla.yaml'}:{line}: actions[0].args: action "
                                     f"'firstfit': unknown argument(s) maxJob; expected maxJobs, queues")
