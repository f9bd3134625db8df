"""YAML with line numbers, so every error can say where it is.

The document is parsed once into a node tree (which keeps each key's line)
and the data is constructed from that same tree. :class:`SourceMap` keeps the
tree and looks up a field path's line only when an error needs it, so a state
file of a million jobs costs no per-field bookkeeping. Pydantic validation
errors become one :class:`ConfigError` at the first offending field in file
order.
"""

from __future__ import annotations

import difflib
import os
import re
import types
import typing
from typing import Any, Sequence

import yaml
from pydantic import BaseModel, ValidationError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from flotilla.config.errors import ConfigError, FieldPath, format_path

#: libyaml when it is there (several times faster on big state files), else the pure-Python parser.
_BaseLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _UniqueKeys:
    """A safe loader's mix-in that rejects duplicate keys: YAML silently keeps the last one, hiding typos."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict:
        seen: set[tuple[str, str]] = set()
        for key, _ in node.value:
            if isinstance(key, ScalarNode) and key.tag != _MERGE_TAG:
                if (key.tag, key.value) in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key.value!r}", key.start_mark)
                seen.add((key.tag, key.value))
        return super().construct_mapping(node, deep=deep)  # type: ignore[misc]


class _Loader(_UniqueKeys, _BaseLoader):  # type: ignore[misc, valid-type]
    pass


class _PythonLoader(_UniqueKeys, yaml.SafeLoader):
    """The pure-Python parser: it reads escapes libyaml refuses without saying where (``"\\ud800"``), so that
    the text check below can name the field."""


#: Strings a config, state file or workload may not hold: NUL (no store column takes it) and lone UTF-16
#: surrogates (a YAML escape ``"\\ud800"`` gives one; it is not Unicode, and UTF-8 cannot encode it).
_BAD_TEXT = re.compile(r"[\x00\ud800-\udfff]")
#: What a text needs before any string of its document can be bad: the character, or an escape that makes it.
_MAY_BE_BAD = re.compile(r"[\x00\ud800-\udfff]|\\[uUx0]")


class SourceMap:
    """One file's YAML node tree: turns a field path into a line, and a problem into a :class:`ConfigError`."""

    def __init__(self, file: str | None, root: Node | None = None):
        self.file = file
        self.root = root

    def line_of(self, path: Sequence[str | int]) -> int | None:
        """The 1-based line of ``path``'s key or list item, else of its nearest parent that has one."""
        node = self.root
        if node is None:
            return None
        line = node.start_mark.line + 1
        for part in path:
            if isinstance(node, MappingNode):
                for key, value in reversed(node.value):
                    if isinstance(key, ScalarNode) and key.value == str(part):
                        line, node = key.start_mark.line + 1, value
                        break
                else:
                    break
            elif isinstance(node, SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
                node = node.value[part]
                line = node.start_mark.line + 1
            else:
                break
        return line

    def error(self, path: Sequence[str | int], message: str) -> ConfigError:
        """A :class:`ConfigError` for ``path`` in this file, e.g. ``error(("plugins", 2, "name"), "unknown plugin 'x'")``."""
        return ConfigError(message, self.file, self.line_of(path), format_path(path))

    def first(self, problems: Sequence[tuple[FieldPath, str]]) -> ConfigError | None:
        """The earliest of ``(path, message)`` problems in file order (ties: the first listed), as an error."""
        if not problems:
            return None
        path, message = min(problems, key=lambda problem: self.line_of(problem[0]) or 0)
        return self.error(path, message)

    def from_validation(self, exc: ValidationError, model: type[BaseModel] | None = None) -> ConfigError:
        """The first problem of a pydantic error, in file order, with a message saying what was expected.

        ``model`` (the class that was validated) lets an unknown field's
        message list the fields that are allowed there.
        """
        # On one line an unknown field (often a typo that also causes a "missing" error) explains more.
        first = min(exc.errors(), key=lambda e: (self.line_of(_user_loc(e)) or 0, e["type"] != "extra_forbidden"))
        return self.error(*_described(first, model))


def validation_problems(exc: ValidationError, model: type[BaseModel] | None = None,
                        prefix: FieldPath = ()) -> list[tuple[FieldPath, str]]:
    """Every problem of a pydantic error as ``(path, message)``, each path below ``prefix``: for a part of a
    file validated on its own (a cluster's ``args``, by its backend's model), for :meth:`SourceMap.first`."""
    errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
    return [((*prefix, *path), message) for path, message in map(lambda e: _described(e, model), errors)]


def _described(error: Any, model: type[BaseModel] | None) -> tuple[FieldPath, str]:
    """One pydantic error as the user's field path and a message saying what was expected."""
    raw, loc, kind = error["loc"], _user_loc(error), error["type"]
    ctx = error.get("ctx") or {}
    if kind == "extra_forbidden":
        message = f"unknown field {loc[-1]!r}" if loc else "unknown field"
        allowed = _fields_at(model, raw[:-1]) if model is not None else None
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1) if allowed and loc else []
        if close:
            message += f" (did you mean {close[0]!r}?)"
        elif allowed:
            message += f" (expected one of: {', '.join(allowed)})"
    elif kind == "union_tag_invalid":
        loc = loc + ("kind",)
        message = f"expected kind to be one of {ctx.get('expected_tags')} (got {ctx.get('tag')!r})"
    elif kind == "union_tag_not_found":
        loc = loc + ("kind",)
        tags = _tags_at(model, raw) if model is not None else []
        message = f"required field missing (one of: {', '.join(tags)})" if tags else "required field missing"
    elif kind == "missing":
        message = "required field missing"
    else:
        message = error["msg"].removeprefix("Value error, ")
        if kind != "value_error" and "input" in error and not isinstance(error["input"], (dict, list)):
            message += f" (got {error['input']!r})"
    return loc, message


def _user_loc(error: Any) -> FieldPath:
    """A pydantic error's ``loc`` as the user's field path: union tags dropped, a failing mapping key added."""
    loc = _without_union_tags(error["loc"])
    key = getattr((error.get("ctx") or {}).get("error"), "key", None)
    return loc + (key,) if key is not None else loc


def _without_union_tags(loc: Sequence[str | int]) -> FieldPath:
    """Pydantic puts the chosen ``kind`` of a discriminated union into ``loc`` after the list index; users never wrote it."""
    out: list[str | int] = []
    for i, part in enumerate(loc):
        if i and isinstance(loc[i - 1], int) and part in _UNION_TAGS:
            continue
        out.append(part)
    return tuple(out)


#: The tags of the config's discriminated unions: the built-in cluster kinds, and the tag of a cluster whose kind a
#: package provides (models.PackagedClusterConfig).
_UNION_TAGS = frozenset({"simulated", "kubernetes", "package"})


def _options(annotation: Any) -> tuple[Any, ...]:
    """The alternatives of a (possibly ``Annotated``) union, or the type itself."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _options(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return tuple(a for option in typing.get_args(annotation) for a in _options(option))
    return (annotation,)


def _tag(model: Any) -> str | None:
    """The tag that selects ``model`` in a discriminated union: its ``UNION_TAG``, or its ``kind`` literal."""
    if _is_model(model) and isinstance(model.__dict__.get("UNION_TAG"), str):
        return model.__dict__["UNION_TAG"]
    return _kind_literal(model)


def _kind_literal(model: Any) -> str | None:
    """The ``kind`` literal of ``model`` (None when its kind is not one literal)."""
    field = model.model_fields.get("kind") if _is_model(model) else None
    if field is None or typing.get_origin(field.annotation) is not typing.Literal:
        return None
    (tag,) = typing.get_args(field.annotation)
    return tag


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _step(annotation: Any, part: str | int) -> Any:
    """The type one step below ``annotation`` along a pydantic ``loc`` part (None when lost)."""
    options = _options(annotation)
    for option in options:
        if _tag(option) == part:
            return option
    for option in options:
        origin = typing.get_origin(option)
        if isinstance(part, int) and origin is list:
            return typing.get_args(option)[0]
        if isinstance(part, str) and origin is dict:
            return typing.get_args(option)[1]
        if isinstance(part, str) and _is_model(option):
            for name, field in option.model_fields.items():
                if part in (name, field.alias):
                    return field.annotation
    return None


def _type_at(model: type[BaseModel], loc: Sequence[str | int]) -> Any:
    annotation: Any = model
    for part in loc:
        annotation = _step(annotation, part)
        if annotation is None:
            return None
    return annotation


def _fields_at(model: type[BaseModel], loc: Sequence[str | int]) -> list[str]:
    """The YAML keys allowed at ``loc`` of ``model``, in declaration order ([] when unknown)."""
    models = [option for option in _options(_type_at(model, loc)) if _is_model(option)]
    if len(models) != 1:
        return []
    return [field.alias or name for name, field in models[0].model_fields.items()]


def _tags_at(model: type[BaseModel], loc: Sequence[str | int]) -> list[str]:
    """The ``kind`` values a discriminated union at ``loc`` accepts."""
    return [tag for option in _options(_type_at(model, loc)) if (tag := _kind_literal(option)) is not None]


def _parse(loader_class: type, text: str) -> tuple[Node | None, Any]:
    loader = loader_class(text)
    try:
        root = loader.get_single_node()
        return root, loader.construct_document(root) if root is not None else None
    finally:
        loader.dispose()


def load_yaml(text: str, file: str | None) -> tuple[dict[str, Any], SourceMap]:
    """Parse ``text`` into a mapping and its :class:`SourceMap`; YAML errors, non-mappings and strings that are
    not valid text (:func:`text_problems`) become a ConfigError."""
    try:
        try:
            root, data = _parse(_Loader, text)
        except yaml.MarkedYAMLError as exc:
            if _BaseLoader is yaml.SafeLoader or not _MAY_BE_BAD.search(text):
                raise
            try:   # libyaml refuses a lone surrogate escape at its line alone; the Python parser reads it
                root, data = _parse(_PythonLoader, text)
            except yaml.YAMLError:
                raise exc from None
    except yaml.MarkedYAMLError as exc:
        raise _yaml_error(exc, file) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", file) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        line = root.start_mark.line + 1 if root is not None else None
        raise ConfigError(f"expected a mapping of fields at the top of the file, got {_kind(data)}", file, line)
    source = SourceMap(file, root)
    if _MAY_BE_BAD.search(text):
        error = source.first(text_problems(data))
        if error is not None:
            raise error
    return data, source


def _shown(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def text_problems(data: Any) -> list[tuple[FieldPath, str]]:
    """Every string (value or key) of ``data`` holding a NUL or a lone surrogate, as ``(path, message)``."""
    problems: list[tuple[FieldPath, str]] = []
    stack: list[tuple[FieldPath, Any]] = [((), data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                where = (*path, _shown(key) if isinstance(key, str) else key)
                if isinstance(key, str) and _BAD_TEXT.search(key):
                    problems.append((where, _text_message(key)))
                stack.append((where, item))
        elif isinstance(value, list):
            stack.extend(((*path, index), item) for index, item in enumerate(value))
        elif isinstance(value, str) and _BAD_TEXT.search(value):
            problems.append((path, _text_message(value)))
    return problems


def _text_message(text: str) -> str:
    bad = _BAD_TEXT.search(text)
    assert bad is not None
    if bad.group() == "\x00":
        return "NUL characters are not allowed"
    return f"not valid Unicode: lone surrogate {_shown(bad.group())} at character {bad.start() + 1}"


def _yaml_error(exc: yaml.MarkedYAMLError, file: str | None) -> ConfigError:
    mark = exc.problem_mark or exc.context_mark
    line = mark.line + 1 if mark is not None else None
    problem, context = exc.problem or str(exc), exc.context
    if context and problem.startswith("but "):
        message = f"{context}, {problem}"
    elif context and exc.context_mark is not None:
        message = f"{problem} ({context} that starts on line {exc.context_mark.line + 1})"
    else:
        message = problem
    return ConfigError(f"invalid YAML: {message}", file, line)


def _kind(value: Any) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number", bool: "true/false"}.get(
        type(value), type(value).__name__)


def read_yaml_file(path: str | os.PathLike) -> tuple[dict[str, Any], SourceMap]:
    """:func:`load_yaml` on a file; unreadable files are a ConfigError naming the file."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        raise ConfigError("no such file", name) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", name) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ConfigError(f"not UTF-8 text (byte {column} of the line)", name, line) from None
    return load_yaml(text, name)


__all__ = ["SourceMap", "load_yaml", "read_yaml_file", "text_problems", "validation_problems"]
