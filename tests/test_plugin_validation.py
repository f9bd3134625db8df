"""A plugin whose hooks cannot be registered is refused at load: one line naming the plugin, the hook and the
nearest known name, exit 2, nothing on stdout."""

from __future__ import annotations

import sys

import pytest

from scenario import config, install_distribution, invoke

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
], ids=["misspelt-hook", "misspelt-parameter", "unknown-parameter", "unmarked", "no-hook"])
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
