"""The plugin reference is generated from the declarations and current; the policies guide covers every action."""

from __future__ import annotations

from pathlib import Path

from flotilla.actions import ACTIONS
from flotilla.core.extensions import EXTENSION_POINTS
from flotilla.core.reference import render

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_the_plugin_reference_is_generated_from_the_declarations():
    # Regenerate with scripts/plugins-reference.
    assert (DOCS / "plugins-reference.md").read_text() == render()
    text = render()
    for point in EXTENSION_POINTS:
        assert f"| `{point.name}` | `session.{point.register}` | {point.combine} |" in text, point.name
        assert f"### `{point.name}`" in text, point.name


def test_the_plugin_guide_links_to_the_reference():
    assert "(plugins-reference.md)" in (DOCS / "plugins.md").read_text()


def test_policies_guide_covers_every_action():
    text = (DOCS / "policies.md").read_text()
    for name in ACTIONS:
        assert f"`{name}`" in text, name
