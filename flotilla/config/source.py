"""YAML with line numbers, so every error can say where it is.

The document is composed once (to map each field path to its line) and
loaded once (for the data). Pydantic validation errors are turned into one
:class:`ConfigError` at the first offending field.
"""

from __future__ import annotations

import os
from typing import Any

import yaml
from pydantic import ValidationError

from flotilla.config.errors import ConfigError, format_path


class SourceMap:
    """Field path -> 1-based line, for one file."""

    def __init__(self, file: str | None, lines: dict[tuple, int] | None = None):
        self.file = file
        self.lines = lines or {}

    def line_of(self, path: tuple) -> int | None:
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get(())

    def error(self, path: tuple, message: str) -> ConfigError:
        return ConfigError(message, self.file, self.line_of(path), format_path(tuple(path)))

    def from_validation(self, exc: ValidationError) -> ConfigError:
        # The first problem in file order; on one line, an unknown field (often a typo that also
        # causes the "missing" error) explains more than what is missing.
        errors = exc.errors()
        first = min(errors, key=lambda e: (self.line_of(tuple(e["loc"])) or 0, e["type"] != "extra_forbidden"))
        loc = tuple(part for part in first["loc"] if not (isinstance(part, str) and part in _UNION_TAGS))
        kind = first["type"]
        keyed = (first.get("ctx") or {}).get("error")
        if getattr(keyed, "key", None) is not None:
            loc = loc + (keyed.key,)
        if kind == "extra_forbidden":
            message = f"unknown field {loc[-1]!r}" if loc else "unknown field"
        elif kind in ("union_tag_invalid", "union_tag_not_found"):
            loc = loc + ("kind",)
            message = f"expected kind to be one of {first.get('ctx', {}).get('expected_tags', 'simulated, kubernetes')}"
        elif kind == "missing":
            message = "required field missing"
        else:
            message = first["msg"]
            if message.startswith("Value error, "):
                message = message[len("Value error, "):]
            if kind not in ("value_error",) and "input" in first and not isinstance(first["input"], (dict, list)):
                message += f" (got {first['input']!r})"
        return self.error(loc, message)


_UNION_TAGS = {"simulated", "kubernetes"}


def _walk(node: yaml.Node, path: tuple, lines: dict[tuple, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            child = path + (key.value,)
            lines[child] = key.start_mark.line + 1
            _walk(value, child, lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            child = path + (i,)
            lines[child] = item.start_mark.line + 1
            _walk(item, child, lines)


def load_yaml(text: str, file: str | None) -> tuple[Any, SourceMap]:
    """Parse ``text``; YAML errors and non-mapping documents become a ConfigError."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise ConfigError(f"invalid YAML: {exc.problem or exc}", file, line) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", file) from None
    lines: dict[tuple, int] = {}
    if node is not None:
        lines[()] = node.start_mark.line + 1
        _walk(node, (), lines)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping at the top of the document", file, 1)
    return data, SourceMap(file, lines)


def read_yaml_file(path: str | os.PathLike) -> tuple[Any, SourceMap]:
    name = os.fspath(path)
    with open(name, encoding="utf-8") as handle:
        text = handle.read()
    return load_yaml(text, name)
