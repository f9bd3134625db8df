"""Finding and loading plugins by name, with pluggy.

A name in the config's ``plugins`` list is looked up among the built-ins
first, then in the ``flotilla.plugins`` entry-point group, so a third-party
package replaces the fairness policy by one line of YAML. The object found
is called with the plugin's ``args`` and the result registered with pluggy.

Plugins are called in config order: pluggy calls the most recently
registered implementation first, so they are registered in reverse. Every
plugin manager also holds the built-in cluster backends
(:data:`BUILTIN_BACKENDS`), registered before the config's plugins so that
those are asked first.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Mapping, Sequence

import pluggy

from flotilla.core import hookspecs

ENTRY_POINT_GROUP = "flotilla.plugins"

BUILTIN_PLUGINS: dict[str, str] = {
    "assetfairness": "flotilla.plugins.assetfairness:AssetFairness",
    "bestfit": "flotilla.plugins.bestfit:BestFit",
    "gang": "flotilla.plugins.gang:Gang",
    "priorityclass": "flotilla.plugins.priorityclass:PriorityClassPlugin",
    "predicates": "flotilla.plugins.predicates:Predicates",
    "ownerfairshare": "flotilla.plugins.ownerfairshare:OwnerFairShare",
    "drf": "flotilla.contrib.drf:DominantResourceFairness",
    "decayedusage": "flotilla.contrib.decayedusage:DecayedUsage",
    "spread": "flotilla.contrib.spread:Spread",
}


#: The built-in answers to ``flotilla_cluster_backend``, one per cluster ``kind``, in every plugin manager.
BUILTIN_BACKENDS: dict[str, str] = {
    "simulated": "flotilla.core.backend:SimulatedBackendPlugin",
    "kubernetes": "flotilla.kubernetes:KubernetesBackendPlugin",
}


@dataclass
class PluginError(Exception):
    """A plugin that cannot be found or built; ``index`` is its place in the config list."""

    index: int
    field: str
    message: str

    def __str__(self) -> str:
        return self.message


def available_plugins() -> list[str]:
    names = {name for name, target in BUILTIN_PLUGINS.items()
             if importlib.util.find_spec(target.partition(":")[0]) is not None}
    names.update(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))
    return sorted(names)


def find_plugin(name: str):
    """The factory registered under ``name``; ``LookupError`` if there is none."""
    target = BUILTIN_PLUGINS.get(name)
    if target is not None:
        module, _, attr = target.partition(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except ModuleNotFoundError:
            pass
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            return ep.load()
    raise LookupError(name)


def new_plugin_manager() -> pluggy.PluginManager:
    """A plugin manager with Flotilla's hooks and the built-in cluster backends, and no decision plugins."""
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    for kind, target in BUILTIN_BACKENDS.items():
        module, _, attr = target.partition(":")
        pm.register(getattr(importlib.import_module(module), attr)(), name=f"backend:{kind}")
    return pm


def load_plugins(plugins: Sequence[tuple[str, Mapping[str, Any]]]) -> pluggy.PluginManager:
    """Build and register every ``(name, args)`` plugin; raises :class:`PluginError` on the first bad one."""
    pm = new_plugin_manager()
    built = []
    for index, (name, args) in enumerate(plugins):
        try:
            factory = find_plugin(name)
        except LookupError:
            raise PluginError(index, "name", f"unknown plugin {name!r} (available: {', '.join(available_plugins())})") from None
        try:
            built.append((name, factory(dict(args or {}))))
        except (ValueError, TypeError) as exc:
            raise PluginError(index, "args", f"plugin {name!r}: {exc}") from None
    for name, plugin in reversed(built):
        pm.register(plugin, name=name)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(0, "name", f"plugin {exc.plugin_name!r} implements an unknown hook: {exc}") from None
    return pm
