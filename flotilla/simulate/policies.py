"""``--compare``: the same run under several fairness policies.

The fairness slot of a config is the plugin that registers ``queue_order``
(exactly one does; see :mod:`flotilla.core.hookspecs`). It is found by
asking each plugin, so a third-party policy is recognised as well as
``assetfairness``, ``drf`` and ``decayedusage``. Comparing replaces that one
plugin and keeps everything else; a policy that is the config's own keeps
its ``args``.
"""

from __future__ import annotations

import random

from flotilla.config.models import PluginConfig
from flotilla.core.model import Snapshot
from flotilla.plugin_manager import PluginError, load_plugins
from flotilla.core.session import Session

KNOWN_FAIRNESS = ("assetfairness", "drf", "decayedusage")


def _registers_queue_order(config, name: str, args) -> bool:
    try:
        pm = load_plugins([(name, args)])
    except PluginError:
        return False
    probe = Snapshot([], [], [], config.to_core_priority_classes(), config.default_priority_class)
    session = Session(probe, None, random.Random(0), pm.get_plugins())
    try:
        pm.hook.flotilla_session_open(session=session)
    except Exception:  # noqa: BLE001 - a plugin that cannot open on an empty session is not the one we want
        return False
    return bool(session.queue_order_fns)


class PolicyError(ValueError):
    """A ``--compare`` name that cannot stand in for the fairness plugin."""


def fairness_index(config) -> int | None:
    """Position of the config's fairness plugin, or None if no plugin registers a queue order."""
    for i, plugin in enumerate(config.plugins):
        if plugin.name in KNOWN_FAIRNESS:
            return i
    for i, plugin in enumerate(config.plugins):
        if _registers_queue_order(config, plugin.name, plugin.args):
            return i
    return None


def with_policy(config, policy: str):
    """A copy of ``config`` whose fairness plugin is ``policy``."""
    index = fairness_index(config)
    if index is None:
        raise config.source.error(("plugins",), "no fairness plugin (one registering queue_order, such as "
                                                "assetfairness) to replace with --compare")
    current = config.plugins[index]
    others = [p.name for i, p in enumerate(config.plugins) if i != index]
    if policy in others:
        raise PolicyError(f"{policy!r} cannot be the fairness policy: the config already uses it for something else")
    if policy != current.name and not _registers_queue_order(config, policy, {}):
        raise PolicyError(f"{policy!r} cannot be the fairness policy: it registers no queue_order "
                          f"(fairness policies: assetfairness, drf, decayedusage or a third-party one)")
    replacement = current if current.name == policy else PluginConfig(name=policy, args={})
    plugins = list(config.plugins)
    plugins[index] = replacement
    copy = config.model_copy(update={"plugins": plugins})
    copy._source = config.source
    return copy


def parse_policies(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    seen = []
    for name in names:
        if name not in seen:
            seen.append(name)
    return seen


__all__ = ["KNOWN_FAIRNESS", "PolicyError", "fairness_index", "parse_policies", "with_policy"]
