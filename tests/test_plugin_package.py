"""The worked plugin package of docs/plugins.md, built and installed by pip, runs in a cycle."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scenario import PLUGINS, config, placements, run_once

PACKAGE = Path(__file__).resolve().parent.parent / "examples" / "plugins" / "flotilla-jobcap"

STATE = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 8}}
jobs:
  - {id: a-0, queue: A, requests: {cpu: 1}, state: running, node: node-1}
""" + "".join(f"  - {{id: a-{i}, queue: A, requests: {{cpu: 1}}, submitted: {i}}}\n" for i in range(1, 5)) + \
    "".join(f"  - {{id: b-{i}, queue: B, requests: {{cpu: 1}}, submitted: {i}}}\n" for i in range(1, 5))


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "--target", str(target), str(PACKAGE)], check=True)
    sys.path.insert(0, str(target))
    yield
    sys.path.remove(str(target))
    sys.modules.pop("flotilla_jobcap", None)


def test_the_installed_package_caps_running_jobs_per_queue(tmp_path, installed):
    plugins = PLUGINS + "  - name: jobcap\n    args: {maxRunning: 3, perQueue: {B: 1}}\n"
    out = run_once(tmp_path, config(plugins=plugins), STATE)
    # A runs a-0 already: two more; B one.
    assert placements(out) == {"a-1": "node-1", "a-2": "node-1", "b-1": "node-1"}
    assert out["reasons"]["a-3"] == "queue A runs its 3 jobs (jobcap)"
    assert out["reasons"]["b-2"] == "queue B runs its 1 jobs (jobcap)"


def test_its_bad_args_are_a_config_error(tmp_path, installed):
    from scenario import invoke

    result = invoke(tmp_path, config(plugins=PLUGINS + "  - name: jobcap\n    args: {maxRuning: 3}\n"), STATE)
    assert result.exit_code == 2
    assert "plugin 'jobcap': unknown argument(s) maxRuning; expected maxRunning, perQueue" in result.stderr
