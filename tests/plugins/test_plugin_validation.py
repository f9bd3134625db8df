"""A plugin whose hooks cannot be registered is refused at load: one line naming the plugin, the hook and the
nearest known name, exit 2, nothing on stdout."""

from __future__ import annotations

import sys

import pytest

from tests.support.scenario import config, install_distribution, invoke

STATE = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 4}}
jobs:
  - {id: a-1, queue: A, requests: {cpu: 1}}
"""

PLUGINS = """
plugins:
  - name: assetfairness
  - name: bestfit
  - name: badplugin
"""


def load_with(tmp_path, monkeypatch, body: str):
    source = "from flotilla.plugin import hookimpl\n\n\nclass Bad:\n    def __init__(self, args):\n        pass\n" + body
    install_distribution(tmp_path / "site", "bad_plugin", source, "flotilla.plugins", "badplugin = bad_plugin:Bad")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    try:
        return invoke(tmp_path, config(plugins=PLUGINS), STATE)
    finally:
        sys.modules.pop("bad_plugin", None)


@pytest.mark.parametrize("body, message", [
    ("""
    @hookimpl
    def flotilla_sesion_open(self, session):
        pass
""", "plugins[2].name: plugin 'badplugin': flotilla_sesion_open is not a Flotilla hook "
     "(did you mean flotilla_session_open?)"),
    ("""
    @hookimpl
    def flotilla_session_open(self, sesion):
        pass
""", "plugins[2].name: plugin 'badplugin': flotilla_session_open takes an unknown parameter 'sesion' "
     "(did you mean session?); flotilla_session_open offers session"),
    ("""
    @hookimpl
    def flotilla_session_close(self, session, decision):
        pass
""", "plugins[2].name: plugin 'badplugin': flotilla_session_close takes an unknown parameter 'decision' "
     "(did you mean decisions?); flotilla_session_close offers session, decisions"),
    ("""
    def flotilla_session_open(self, session):
        pass
""", "plugins[2].name: plugin 'badplugin': its method flotilla_session_open is not marked @hookimpl, so it "
     "implements no hook"),
    ("""
    def open(self, session):
        pass
""", "plugins[2].name: plugin 'badplugin' implements no hook (mark a method such as flotilla_session_open "
     "with @hookimpl)"),
    ("""
    @hookimpl(specname="flotilla_sesion_open")
    def open_it(self, session):
        pass
""", "plugins[2].name: plugin 'badplugin': open_it names hook flotilla_sesion_open, which is not a Flotilla hook "
     "(did you mean flotilla_session_open?)"),
    ("""
    @hookimpl(wrapper=True)
    def flotilla_session_open(self, session):
        yield
""", "plugins[2].name: plugin 'badplugin': flotilla_session_open is marked as a hook wrapper; Flotilla's hooks take "
     "plain implementations"),
    ("""
    @hookimpl
    def flotilla_session_open(self, **kwargs):
        pass
""", "plugins[2].name: plugin 'badplugin': flotilla_session_open takes an unknown parameter 'kwargs'; "
     "flotilla_session_open offers session"),
    ("""
    def __init__(self, args):
        raise KeyError("tiers")

    @hookimpl
    def flotilla_session_open(self, session):
        pass
""", "plugins[2].name: plugin 'badplugin' failed to start: KeyError: 'tiers'"),
    ("""
    import flotilla_no_such_module
""", "plugins[2].name: plugin 'badplugin' cannot be loaded from bad_plugin:Bad (flotilla-bad-plugin): "
     "ModuleNotFoundError: No module named 'flotilla_no_such_module'"),
], ids=["misspelt-hook", "misspelt-parameter", "unknown-parameter", "unmarked", "no-hook", "misspelt-specname",
        "wrapper", "keyword-catch-all", "constructor-fails", "import-fails"])
def test_a_plugin_that_cannot_be_registered_is_one_line_and_exit_2(tmp_path, monkeypatch, body, message):
    result = load_with(tmp_path, monkeypatch, body)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == f"error: {tmp_path / 'flotilla.yaml'}:5: {message}\n"


def test_a_hook_taking_fewer_parameters_than_offered_loads(tmp_path, monkeypatch):
    result = load_with(tmp_path, monkeypatch, """
    @hookimpl
    def flotilla_session_close(self):
        pass
""")
    assert result.exit_code == 0, result.stderr


def test_a_package_action_that_cannot_be_imported_is_one_line_and_exit_2(tmp_path, monkeypatch):
    install_distribution(tmp_path / "site", "bad_action", "import flotilla_no_such_module\n", "flotilla.actions",
                         "badaction = bad_action:Bad")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    result = invoke(tmp_path, config(extra="actions: [evict, allocate, badaction, lease]"), STATE)
    sys.modules.pop("bad_action", None)
    assert result.exit_code == 2
    assert result.stdout == ""
    line = ("actions[2]: action 'badaction' failed to load: ModuleNotFoundError: No module named "
            "'flotilla_no_such_module'")
    assert result.stderr.splitlines() == [f"error: {tmp_path / 'flotilla.yaml'}:{actions_line(tmp_path)}: {line}"]


def actions_line(tmp_path) -> int:
    lines = (tmp_path / "flotilla.yaml").read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if text.startswith("actions:"))


def test_a_misspelt_hook_in_a_compared_policy_is_one_line_naming_the_entry(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from flotilla.scheduler_main import main

    install_distribution(tmp_path / "site", "bad_plugin", "from flotilla.plugin import hookimpl\n\n\nclass Bad:\n"
                         "    def __init__(self, args):\n        pass\n\n    @hookimpl\n"
                         "    def flotilla_sesion_open(self, session):\n        pass\n",
                         "flotilla.plugins", "badplugin = bad_plugin:Bad")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    workload = tmp_path / "w.yaml"
    workload.write_text("submissions:\n  - {at: 0s, queue: A, count: 1, requests: {cpu: 1}, duration: 1m}\n")
    result = CliRunner().invoke(main, ["simulate", "--workload", str(workload), "--compare", "assetfairness,badplugin"])
    sys.modules.pop("bad_plugin", None)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "error: --compare 'badplugin': plugin 'badplugin': flotilla_sesion_open is not a Flotilla hook (did you mean "
        "flotilla_session_open?)"]
