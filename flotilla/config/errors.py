"""The one error type for bad configs, state files and workloads.

Every loader stops at the first problem (in file order) and raises one
:class:`ConfigError`, so the CLI prints exactly one line a user can act on:
``file:line: field.path: what was wrong and what was expected``.
"""

from __future__ import annotations

from typing import Sequence

#: A field path as loaders build it: ``("jobs", 3, "priorityClass")``.
FieldPath = tuple[str | int, ...]


class ConfigError(Exception):
    """What was wrong and where: ``file:line: path: message``, leaving out the parts that are unknown."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None, path: str = ""):
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line
        self.path = path

    def __str__(self) -> str:
        where = ":".join(str(part) for part in (self.file, self.line) if part is not None)
        return ": ".join(part for part in (where, self.path, self.message) if part)


def format_path(path: Sequence[str | int]) -> str:
    """``("jobs", 3, "priorityClass")`` -> ``jobs[3].priorityClass``; the form every error message uses."""
    out = ""
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


__all__ = ["ConfigError", "FieldPath", "format_path"]
