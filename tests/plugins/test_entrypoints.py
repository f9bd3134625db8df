"""Entry points are read once while the import path stays as it is, and afresh once a distribution appears."""

from __future__ import annotations

import time

from flotilla.core.entrypoints import installed

GROUP = "flotilla.plugins"


def declare(site, dist: str, name: str, target: str) -> None:
    """What pip writes for a distribution declaring one plugin."""
    info = site / f"{dist}-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\n{name} = {target}\n")


def names() -> set[str]:
    return {ep.name for ep in installed(GROUP)}


def test_a_distribution_installed_after_a_read_is_seen_by_the_next(tmp_path, monkeypatch):
    builtins = names()
    assert {"assetfairness", "drf", "predicates", "bestfit"} <= builtins
    assert installed(GROUP) is installed(GROUP)  # unchanged path: the same answer, not a new read

    monkeypatch.syspath_prepend(str(tmp_path))
    assert names() == builtins
    time.sleep(0.02)  # past the file system's clock tick, as a later pip install would be
    declare(tmp_path, "tierfair", "tierfair", "tierfair:Plugin")
    assert names() == builtins | {"tierfair"}

    monkeypatch.undo()
    assert names() == builtins
