"""The one error type for bad configs, state files and workloads."""

from __future__ import annotations


class ConfigError(Exception):
    """What was wrong and where: ``file:line: path: message`` (unknown parts left out)."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None, path: str = ""):
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line
        self.path = path

    def __str__(self) -> str:
        where = ":".join(str(part) for part in (self.file, self.line) if part is not None)
        parts = [part for part in (where, self.path, self.message) if part]
        return ": ".join(parts)


def format_path(path: tuple) -> str:
    """``("jobs", 3, "priorityClass")`` -> ``jobs[3].priorityClass``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out
