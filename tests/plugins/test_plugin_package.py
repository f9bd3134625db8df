"""The plugin packages of examples/plugins/, installed as their authors' users would install them.

Each package gets a fresh virtual environment (no system site packages)
with Flotilla installed from this checkout and the package with its test
extra; its own tests then run there with that environment's pytest, using
the fixtures of ``flotilla.testing`` found through the ``pytest11`` entry
point. Flotilla's dependencies come from a wheel cache
(``~/.cache/flotilla/wheels``, or ``$FLOTILLA_WHEEL_CACHE``), filled from
PyPI the first time and read offline after that. Sources are copied before
building, so no build directory is written into the checkout.

Both are also installed into this interpreter's path and run through
``flotilla schedule-once``, as a user runs them: jobcap's caps, and the
plugin guide's walk-through (docs/plugins.md), whose every quoted file and
whose output must be exactly the example's. The README's plugin example
runs too.
"""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from flotilla import plugin
from flotilla.core.extensions import EXTENSION_POINTS
from flotilla.core.session import Session
from flotilla.scheduler_main import main
from tests.support.scenario import PLUGINS, config, install_distribution, invoke, placements, run_once
from tests.support.venvs import ROOT, build_wheel, clean_env, fresh_venv, pip

EXAMPLES = ROOT / "examples" / "plugins"
#: Each example package and the number of tests its own suite holds (every one must pass).
PACKAGES = {"flotilla-jobcap": 5, "flotilla-nominalquota": 6, "flotilla-tiers": 9}


def _wheel(source: Path, into: Path) -> Path:
    return build_wheel(source, into)


@pytest.fixture(scope="module")
def flotilla_wheel(tmp_path_factory) -> Path:
    return _wheel(ROOT, tmp_path_factory.mktemp("flotilla-wheel"))


@pytest.mark.venv
@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_the_example_package_passes_its_own_tests_in_a_fresh_virtualenv(package, flotilla_wheel, tmp_path):
    wheel = _wheel(EXAMPLES / package, tmp_path / "wheels")
    python = fresh_venv(tmp_path / "venv", str(flotilla_wheel), f"{wheel}[test]")
    tests = tmp_path / "wheels" / "src" / package
    env = clean_env()
    result = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=tests,
                            env=env, capture_output=True, text=True)
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    # pytest adds "(H:MM:SS)" to a run over a minute.
    passed = rf"{PACKAGES[package]} passed in [\d.]+s( \(\d+:\d\d:\d\d\))?"
    assert result.returncode == 0 and re.fullmatch(passed, summary), result.stdout + result.stderr


# -- through the command line, in this interpreter -------------------------------

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
    """Both packages installed (no dependencies: Flotilla is this interpreter's) into a directory put on sys.path."""
    work = tmp_path_factory.mktemp("examples")
    wheels = [_wheel(EXAMPLES / package, work) for package in sorted(PACKAGES)]
    target = work / "site"
    pip(sys.executable, "install", "--quiet", "--no-deps", "--target", str(target), *map(str, wheels))
    sys.path.insert(0, str(target))
    yield
    sys.path.remove(str(target))
    for module in ("flotilla_jobcap", "flotilla_nominalquota", "flotilla_tiers"):
        sys.modules.pop(module, None)


def test_the_installed_package_caps_running_jobs_per_queue(tmp_path, installed):
    plugins = PLUGINS + "  - name: jobcap\n    args: {maxRunning: 3, perQueue: {B: 1}}\n"
    out = run_once(tmp_path, config(plugins=plugins), STATE)
    # A runs a-0 already: two more; B one.
    assert placements(out) == {"a-1": "node-1", "a-2": "node-1", "b-1": "node-1"}
    assert out["reasons"]["a-3"] == "queue A runs its 3 jobs (jobcap)"
    assert out["reasons"]["b-2"] == "queue B runs its 1 jobs (jobcap)"


def test_its_bad_args_are_a_config_error(tmp_path, installed):
    result = invoke(tmp_path, config(plugins=PLUGINS + "  - name: jobcap\n    args: {maxRuning: 3}\n"), STATE)
    assert result.exit_code == 2
    assert "plugin 'jobcap': unknown argument(s) maxRuning; expected maxRunning, perQueue" in result.stderr


GUIDE = ROOT / "docs" / "plugins.md"
#: A quoted block of the guide: the comment before it says what it must equal.
QUOTE = re.compile(r"<!-- (file|excerpt|output): (.+?) -->\n```\w*\n(.*?)```\n", re.S)


def test_the_plugin_guide_quotes_the_example_packages_as_they_are():
    quotes = QUOTE.findall(GUIDE.read_text())
    assert [(kind, where) for kind, where, _ in quotes] == [
        ("file", "examples/plugins/flotilla-tiers/pyproject.toml"),
        ("file", "examples/plugins/flotilla-tiers/src/flotilla_tiers/__init__.py"),
        ("excerpt", "examples/plugins/flotilla-tiers/tests/test_tiers.py"),
        ("file", "examples/plugins/flotilla-tiers/flotilla.yaml"),
        ("file", "examples/plugins/flotilla-tiers/state.yaml"),
        ("output", "flotilla schedule-once --config flotilla.yaml --state state.yaml"),
        ("excerpt", "examples/plugins/flotilla-jobcap/src/flotilla_jobcap/__init__.py"),
    ]
    for kind, where, text in quotes:
        if kind == "file":
            assert text == (ROOT / where).read_text(), where
        elif kind == "excerpt":
            assert text in (ROOT / where).read_text(), where


def test_the_plugin_guide_shows_what_schedule_once_prints_with_the_installed_policy(installed, monkeypatch,
                                                                                     tmp_path):
    ((command, text),) = [(where, text) for kind, where, text in QUOTE.findall(GUIDE.read_text()) if kind == "output"]
    prompt, _, printed = text.partition("\n")
    assert prompt == f"$ {command}"
    monkeypatch.chdir(EXAMPLES / "flotilla-tiers")
    result = CliRunner().invoke(main, command.split()[1:])
    assert result.exit_code == 0, result.output
    assert result.stdout == printed
    # "With assetfairness in its place the same state splits the pool at the fair shares, four and four."
    swapped = (EXAMPLES / "flotilla-tiers" / "flotilla.yaml").read_text().replace(
        "  - name: tiers\n    args: {tiers: {prod: 0, batch: 1}}\n", "  - name: assetfairness\n")
    out = run_once(tmp_path, swapped, (EXAMPLES / "flotilla-tiers" / "state.yaml").read_text())
    assert {name: queue["allocated"] for name, queue in out["queues"].items()} == {"batch": {"cpu": "4"},
                                                                                 "prod": {"cpu": "4"}}


def test_the_readme_plugin_example_swaps_the_fairness_policy_and_the_core_keeps_limits(tmp_path, monkeypatch):
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Writing a plugin"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    entry = re.search(r'^(strictorder = "strictorder_plugin:StrictOrder")$', section, re.M).group(1)
    install_distribution(tmp_path / "site", "strictorder_plugin", code, "flotilla.plugins", entry.replace('"', ""))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    plugins = "plugins: [{name: strictorder, args: {order: [B, A]}}, {name: bestfit}, {name: gang}]"
    state = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 4}}
jobs:
""" + "".join(f"  - {{id: {q}-{i}, queue: {q.upper()}, requests: {{cpu: 1}}, submitted: {i}}}\n"
              for q in "ab" for i in range(1, 5))
    out = run_once(tmp_path, config(plugins=plugins), state)
    assert placements(out) == {"b-1": "node-1", "b-2": "node-1", "b-3": "node-1", "b-4": "node-1"}
    assert out["reasons"] == {f"a-{i}": "0/1 nodes are available: 1 Insufficient cpu" for i in range(1, 5)}
    limited = run_once(tmp_path, config("queues: [{name: A}, {name: B, limits: {cpu: 0.5}}]", plugins), state)
    assert placements(limited) == {"b-1": "node-1", "b-2": "node-1", "a-1": "node-1", "a-2": "node-1"}
    assert limited["reasons"] == {"a-3": "0/1 nodes are available: 1 Insufficient cpu", "a-4": "0/1 nodes are available: 1 Insufficient cpu",
                                  "b-3": "queue B at its cpu limit 0.5", "b-4": "queue B at its cpu limit 0.5"}


# -- the public API -------------------------------------------------------------

def test_the_plugin_session_protocol_is_the_sessions_registration_api():
    assert all(hasattr(plugin, name) for name in plugin.__all__)
    registers = {point.register for point in EXTENSION_POINTS}
    listed = {name for name in vars(plugin.PluginSession) if name.startswith(("add_", "set_"))}
    assert listed == registers  # one method per extension point, no more
    for name in listed:
        assert inspect.signature(getattr(plugin.PluginSession, name)) == inspect.signature(getattr(Session, name)), name


class PreferSSD:
    """Prefers nodes labelled disk=ssd; remembers where each job went and what was left there."""

    placed: list[tuple[str, str, dict, dict]] = []

    def __init__(self, args):
        plugin.take_args(args)

    @plugin.hookimpl
    def flotilla_session_open(self, session: plugin.PluginSession):
        def ssd(job: plugin.Job, node: int) -> float:
            return 1.0 if plugin.node_at(session, node).labels.get("disk") == "ssd" else 0.0

        def allocated(job: plugin.Job, node: int) -> None:
            space = session.space
            PreferSSD.placed.append((job.id, plugin.node_at(session, node).name,
                                     space.mapping(plugin.node_free(session, node)),
                                     space.mapping(plugin.node_allocatable(session, node))))

        session.add_node_score(ssd)
        session.add_event_handler(on_allocate=allocated)


def test_a_node_is_a_position_read_through_the_plugin_api(flotilla_cycle):
    PreferSSD.placed.clear()
    state = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 4}}
      - {name: node-2, resources: {cpu: 4}, labels: {disk: ssd}}
jobs:
  - {id: a-1, queue: A, requests: {cpu: 1}, submitted: 1}
  - {id: a-2, queue: A, requests: {cpu: 2}, submitted: 2}
"""
    result = flotilla_cycle(state, plugins=["assetfairness", "gang", "priorityclass", PreferSSD])
    assert result.scheduled == {"a-1": "node-2", "a-2": "node-2"}
    assert PreferSSD.placed == [("a-1", "node-2", {"cpu": 3000}, {"cpu": 4000}),
                                ("a-2", "node-2", {"cpu": 1000}, {"cpu": 4000})]
