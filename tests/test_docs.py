"""The plugin author's guide names every extension point; the policies guide every policy."""

from __future__ import annotations

from pathlib import Path

from flotilla.actions import ACTIONS
from flotilla.core.hookspecs import EXTENSION_POINTS

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_plugins_guide_lists_every_extension_point():
    text = (DOCS / "plugins.md").read_text()
    for point in EXTENSION_POINTS:
        assert f"| `{point.name}` | `session.{point.register}" in text, point.name


def test_policies_guide_covers_every_action():
    text = (DOCS / "policies.md").read_text()
    for name in ACTIONS:
        assert f"`{name}`" in text, name
