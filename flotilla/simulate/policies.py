"""``--compare``: the same run under several fairness policies, each with its own args.

The fairness slot of a config is the plugin that registers ``queue_order``
(exactly one does; see :mod:`flotilla.core.hookspecs`). It is found by
asking each plugin, so a third-party policy is recognised as well as
``assetfairness``, ``drf`` and ``decayedusage``. Comparing replaces that one
plugin and keeps everything else.

A compared policy is written ``NAME`` or ``NAME:ARGS``, where ``ARGS`` is
the YAML flow mapping the config's ``args:`` would hold
(``tiers:{tiers: {prod: 0, batch: 1}}``), as a kube-scheduler profile
carries each plugin's args beside its name. Entries are given one per
``--compare`` or several separated by commas (a comma inside ``{...}`` or
``[...]`` belongs to the args). Without args a policy that is the config's
own keeps the config's ``args`` and any other gets none. Args are checked
as the config's are (finite numbers, resource weights, then the plugin's
own constructor), and a problem is one error naming the entry as written.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import yaml

from flotilla.config.errors import format_path
from flotilla.config.models import PluginConfig
from flotilla.config.pluginargs import plugin_arg_problems
from flotilla.core.model import Snapshot
from flotilla.core.session import Session
from flotilla.plugin_manager import (PluginError, PluginLoadFailed, PluginNameConflict, available_plugins, find_plugin,
                                     load_plugins)

KNOWN_FAIRNESS = ("assetfairness", "drf", "decayedusage")


class PolicyError(ValueError):
    """A ``--compare`` entry that cannot stand in for the fairness plugin."""


@dataclass(frozen=True)
class Policy:
    """One compared policy: the plugin's name, its args (None: none written) and its label in the report."""

    name: str
    args: Mapping[str, Any] | None
    label: str
    text: str

    def __str__(self) -> str:
        return self.text


def _opens_with_queue_order(config, pm) -> bool:
    probe = Snapshot([], [], [], config.to_core_priority_classes(), config.default_priority_class)
    session = Session(probe, None, random.Random(0), pm.get_plugins())
    try:
        pm.hook.flotilla_session_open(session=session)
    except Exception:  # noqa: BLE001 - a plugin that cannot open on an empty session is not the one we want
        return False
    return bool(session.queue_order_fns)


def _registers_queue_order(config, name: str, args) -> bool:
    try:
        pm = load_plugins([(name, args)])
    except PluginError:
        return False
    return _opens_with_queue_order(config, pm)


def fairness_index(config) -> int | None:
    """Position of the config's fairness plugin, or None if no plugin registers a queue order."""
    for i, plugin in enumerate(config.plugins):
        if plugin.name in KNOWN_FAIRNESS:
            return i
    for i, plugin in enumerate(config.plugins):
        if _registers_queue_order(config, plugin.name, plugin.args):
            return i
    return None


def _split_entries(text: str) -> list[str]:
    """``text`` cut at the commas that are outside brackets and quotes."""
    entries, depth, quote, start = [], 0, "", 0
    for i, char in enumerate(text):
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
        elif char == "," and depth == 0:
            entries.append(text[start:i])
            start = i + 1
    entries.append(text[start:])
    return [entry.strip() for entry in entries if entry.strip()]


def _parse_entry(text: str) -> tuple[str, Mapping[str, Any] | None]:
    name, colon, written = text.partition(":")
    name = name.strip()
    if not name:
        raise PolicyError(f"--compare {text!r}: expected a plugin name, e.g. drf or 'tiers:{{tiers: {{prod: 0}}}}'")
    if not colon:
        return name, None
    try:
        args = yaml.safe_load(written) if written.strip() else {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at column {len(name) + 2 + mark.column}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "not YAML"
        raise PolicyError(f"--compare {text!r}: args: {problem}{at}; expected a YAML mapping such as "
                          f"{{tiers: {{prod: 0, batch: 1}}}}") from None
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise PolicyError(f"--compare {text!r}: args: expected a YAML mapping such as {{tiers: {{prod: 0, batch: 1}}}}, "
                          f"got {written.strip()!r}")
    return name, {str(key): value for key, value in args.items()}


def parse_policies(values: str | Sequence[str]) -> list[Policy]:
    """The policies of one or more ``--compare`` values, in order, each once; :class:`PolicyError` if one is malformed.

    A name compared once is labelled by its name; a name compared with
    several args is labelled by each entry as written.
    """
    if isinstance(values, str):
        values = [values]
    parsed: list[tuple[str, Mapping[str, Any] | None, str]] = []
    for value in values:
        for text in _split_entries(value):
            name, args = _parse_entry(text)
            if all((name, args) != (seen_name, seen_args) for seen_name, seen_args, _ in parsed):
                parsed.append((name, args, text))
    names = [name for name, _, _ in parsed]
    return [Policy(name, args, name if names.count(name) == 1 else text, text) for name, args, text in parsed]


def check_policy(config, policy: Policy) -> None:
    """:class:`PolicyError` naming ``policy`` if it is not an installed plugin or its written args are bad."""
    try:
        find_plugin(policy.name)
    except LookupError:
        raise PolicyError(f"--compare {policy.text!r}: unknown plugin {policy.name!r} "
                          f"(available: {', '.join(available_plugins())})") from None
    except (PluginNameConflict, PluginLoadFailed) as exc:
        raise PolicyError(f"--compare {policy.text!r}: {exc}") from None
    if policy.args is not None:
        problems = plugin_arg_problems([PluginConfig(name=policy.name, args=dict(policy.args))])
        if problems:
            path, message = problems[0]
            raise PolicyError(f"--compare {policy.text!r}: {format_path(path[2:])}: {message}")


def with_policy(config, policy: Policy | str):
    """A copy of ``config`` whose fairness plugin is ``policy``; :class:`PolicyError` if it cannot be."""
    if isinstance(policy, str):
        policy = parse_policies(policy)[0]
    index = fairness_index(config)
    if index is None:
        raise config.source.error(("plugins",), "no fairness plugin (one registering queue_order, such as "
                                                "assetfairness) to replace with --compare")
    current = config.plugins[index]
    others = [p.name for i, p in enumerate(config.plugins) if i != index]
    where = f"--compare {policy.text!r}"
    if policy.name in others:
        raise PolicyError(f"{where}: {policy.name!r} cannot be the fairness policy: the config already uses it "
                          f"for something else")
    check_policy(config, policy)
    args = policy.args if policy.args is not None else (current.args if policy.name == current.name else {})
    try:
        pm = load_plugins([(policy.name, args)])
    except PluginError as exc:
        hint = ""
        if policy.args is None and exc.field == "args":
            hint = f"; give its args after a colon, e.g. --compare '{policy.name}:{{...}}'"
        raise PolicyError(f"{where}: {'args: ' if exc.field == 'args' else ''}{exc.message}{hint}") from None
    if not _opens_with_queue_order(config, pm):
        raise PolicyError(f"{where}: {policy.name!r} cannot be the fairness policy: it registers no queue_order "
                          f"(fairness policies: assetfairness, drf, decayedusage or a third-party one)")
    if policy.name == current.name:
        replacement = current.model_copy(update={"args": dict(args)})
    else:
        replacement = PluginConfig(name=policy.name, args=dict(args))
    plugins = list(config.plugins)
    plugins[index] = replacement
    copy = config.model_copy(update={"plugins": plugins})
    copy._source = config.source
    return copy


__all__ = ["KNOWN_FAIRNESS", "Policy", "PolicyError", "check_policy", "fairness_index", "parse_policies",
           "with_policy"]
