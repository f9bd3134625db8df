"""Installed entry points by group, read once while the import path stays as it is.

Reading a group opens every installed distribution's metadata: milliseconds
per read with a thousand distributions installed, and a scheduler reads its
plugins' and actions' groups each time one is built (per config, per test,
per simulation). The answer is kept until ``sys.path`` or one of its
directories changes (installing a distribution writes a ``.dist-info``
directory into one), the way importlib's own path finders keep theirs.
"""

from __future__ import annotations

import os
import sys
from importlib.metadata import EntryPoint, entry_points

_read: dict[str, tuple[tuple, tuple[EntryPoint, ...]]] = {}


def _path_state() -> tuple:
    """``sys.path`` with each entry's modification time (None where it is missing)."""
    state = []
    for entry in sys.path:
        try:
            state.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            state.append((entry, None))
    return tuple(state)


def installed(group: str) -> tuple[EntryPoint, ...]:
    """Every entry point of ``group`` the installed distributions declare (one per declaration)."""
    state = _path_state()
    kept = _read.get(group)
    if kept is not None and kept[0] == state:
        return kept[1]
    found = tuple(entry_points(group=group))
    _read[group] = (state, found)
    return found


def forget() -> None:
    """Read every group afresh next time (for code that writes distribution metadata itself)."""
    _read.clear()
