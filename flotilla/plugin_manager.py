"""Finding and loading plugins by name, with pluggy.

A name in the config's ``plugins`` list is looked up in the
``flotilla.plugins`` entry-point group, the built-ins' names as a third
party's (Flotilla's own ``pyproject.toml`` declares them), so a third-party
package replaces the fairness policy by one line of YAML. A name that two
distributions claim is a config error naming both: which one would win
would depend on the order of ``sys.path``. The object found is called with
the plugin's ``args`` and the result registered with pluggy.

Plugins are called in config order: pluggy calls the most recently
registered implementation first, so they are registered in reverse. Every
plugin manager also holds the built-in cluster backends
(:data:`BUILTIN_BACKENDS`), registered before the config's plugins so that
those are asked first, and after them the backends that packages provide
for kinds of their own (the ``flotilla.backends`` group, :data:`BACKEND_GROUP`:
a kind's name to its backend factory, see docs/backends.md).
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from typing import Any, Mapping, Sequence

import pluggy

from flotilla.core import hookspecs
from flotilla.core.entrypoints import installed
from flotilla.core.capabilities import Backends

ENTRY_POINT_GROUP = "flotilla.plugins"
#: Cluster kinds that packages provide: the entry point's name is the kind, its object the backend factory.
BACKEND_GROUP = "flotilla.backends"

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
    return sorted({ep.name for ep in installed(ENTRY_POINT_GROUP)})


class PluginNameConflict(Exception):
    """Two distributions register one plugin name."""


def _distribution(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return dist.name if dist is not None else "an unnamed distribution"


def _claimed(group: str, name: str, what: str) -> EntryPoint:
    claims = [ep for ep in installed(group) if ep.name == name]
    if not claims:
        raise LookupError(name)
    if len(claims) > 1:
        who = " and ".join(f"{_distribution(ep)} ({ep.value})" for ep in sorted(claims, key=_distribution))
        raise PluginNameConflict(f"{what} {name!r} is registered by two distributions: {who}; "
                                 f"uninstall one of them")
    return claims[0]


class PluginLoadFailed(Exception):
    """A plugin's entry point that cannot be imported: the message names the plugin, its target and the error."""


def find_plugin(name: str):
    """The factory registered under ``name``.

    ``LookupError`` if no distribution registers it, :class:`PluginNameConflict`
    if two do, :class:`PluginLoadFailed` if its module cannot be imported.
    """
    entry = _claimed(ENTRY_POINT_GROUP, name, "plugin name")
    try:
        return entry.load()
    except Exception as exc:  # noqa: BLE001 - whatever a third-party import raises is one line naming it
        raise PluginLoadFailed(f"plugin {name!r} cannot be loaded from {entry.value} ({_distribution(entry)}): "
                               f"{type(exc).__name__}: {exc}") from None


def available_cluster_kinds() -> list[str]:
    """Every cluster kind: the built-in ones and those installed packages provide."""
    return sorted(set(BUILTIN_BACKENDS) | {ep.name for ep in installed(BACKEND_GROUP)})


def find_backend_kind(kind: str):
    """The backend factory a package registers for cluster kind ``kind`` (see docs/backends.md).

    ``LookupError`` if no distribution registers it, :class:`PluginNameConflict`
    if two do, or if the kind is a built-in one (a package serves its own
    kinds; it replaces a built-in kind's backend through the
    ``flotilla_cluster_backend`` hook of a plugin).
    """
    entry = _claimed(BACKEND_GROUP, kind, "cluster kind")
    if kind in BUILTIN_BACKENDS:
        raise PluginNameConflict(f"cluster kind {kind!r} is built in, and {_distribution(entry)} ({entry.value}) "
                                 f"registers it too; uninstall it, or give its kind another name")
    return entry.load()


def backend_args(factory, args: Mapping[str, Any]):
    """``args`` read by the factory's ``Args`` model (a pydantic model class); a factory without one takes none.

    Raises pydantic's ``ValidationError``, or ``ValueError`` for args given to a kind that takes none.
    """
    model = getattr(factory, "Args", None)
    if model is None:
        if args:
            raise ValueError(f"unknown argument(s) {', '.join(sorted(map(str, args)))}; this kind takes none")
        return None
    return model.model_validate(dict(args))


class PackagedBackendPlugin:
    """Answers ``flotilla_cluster_backend`` for the kinds packages provide (:data:`BACKEND_GROUP`)."""

    @hookspecs.hookimpl
    def flotilla_cluster_backend(self, cluster_config, options):
        kind = getattr(cluster_config, "kind", None)
        if not isinstance(kind, str) or kind in BUILTIN_BACKENDS:
            return None
        try:
            factory = find_backend_kind(kind)
        except LookupError:
            return None
        except PluginNameConflict as exc:
            raise ValueError(f"cluster {cluster_config.name!r}: {exc}") from None
        args = getattr(cluster_config, "parsed_args", None)
        if args is None:
            try:
                args = backend_args(factory, getattr(cluster_config, "args", None) or {})
            except ValueError as exc:   # pydantic's ValidationError is one
                raise ValueError(f"cluster {cluster_config.name!r}: args: {exc}") from None
        return factory(cluster_config.name, args, dict(options))


def _hook_params() -> dict[str, list[str]]:
    """Every hook Flotilla declares, with the parameters an implementation may take."""
    return {name: list(inspect.signature(fn).parameters)
            for name, fn in vars(hookspecs).items() if name.startswith("flotilla_") and callable(fn)}


def _nearest(word: str, known) -> str:
    """`` (did you mean X?)`` for the known name closest to ``word``, or nothing when none is close."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.5)
    return f" (did you mean {close[0]}?)" if close else ""


def plugin_problem(name: str, plugin, pm: pluggy.PluginManager) -> str | None:
    """Why ``plugin`` (built under ``name``) cannot be registered, in one line, or None if it can.

    A method marked ``@hookimpl`` must name a hook Flotilla declares and
    take only that hook's parameters; a plugin must implement at least one
    hook. Each problem names the plugin, the hook and the nearest known
    name, so a misspelling reads as one line instead of pluggy's traceback.
    """
    hooks = _hook_params()
    implemented = []
    for attr in sorted(dir(plugin)):
        try:
            opts = pm.parse_hookimpl_opts(plugin, attr)
        except Exception:  # an attribute that cannot be read is no hook implementation
            opts = None
        if opts is None:
            continue
        hook = opts.get("specname") or attr
        if hook not in hooks:
            named = f"{attr} names hook {hook}, which" if hook != attr else attr
            return f"plugin {name!r}: {named} is not a Flotilla hook{_nearest(hook, hooks)}"
        if opts.get("wrapper") or opts.get("hookwrapper"):
            return f"plugin {name!r}: {attr} is marked as a hook wrapper; Flotilla's hooks take plain implementations"
        try:
            params = [p for p in inspect.signature(getattr(plugin, attr)).parameters]
        except (TypeError, ValueError):
            params = []
        for param in params:
            if param not in hooks[hook]:
                return (f"plugin {name!r}: {attr} takes an unknown parameter {param!r}"
                        f"{_nearest(param, hooks[hook])}; {hook} offers {', '.join(hooks[hook])}")
        implemented.append(attr)
    if not implemented:
        unmarked = [attr for attr in sorted(dir(plugin)) if attr in hooks]
        if unmarked:
            return f"plugin {name!r}: its method {unmarked[0]} is not marked @hookimpl, so it implements no hook"
        return f"plugin {name!r} implements no hook (mark a method such as flotilla_session_open with @hookimpl)"
    return None


def new_plugin_manager() -> pluggy.PluginManager:
    """A plugin manager with Flotilla's hooks and the built-in cluster backends, and no decision plugins."""
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    pm.register(PackagedBackendPlugin(), name="backends:packaged")
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
        except (PluginNameConflict, PluginLoadFailed) as exc:
            raise PluginError(index, "name", str(exc)) from None
        try:
            built.append((name, factory(dict(args or {}))))
        except (ValueError, TypeError) as exc:
            raise PluginError(index, "args", f"plugin {name!r}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - a constructor's own failure is one line naming the plugin
            raise PluginError(index, "name", f"plugin {name!r} failed to start: {type(exc).__name__}: {exc}") from None
    for index, (name, plugin) in enumerate(built):
        problem = plugin_problem(name, plugin, pm)
        if problem is not None:
            raise PluginError(index, "name", problem)
    for name, plugin in reversed(built):
        pm.register(plugin, name=name)
    return pm


def make_backends(config, pm=None, kinds: Sequence[str] | None = None, **options) -> Backends:
    """One backend per cluster of ``config`` (those whose kind is in ``kinds``, if given), by name, with the
    capabilities of each read once (:class:`~flotilla.core.capabilities.Backends`).

    Each comes from the ``flotilla_cluster_backend`` hook of ``pm`` (the
    scheduler's plugin manager, so the config's plugins are asked first;
    default: the built-in backends alone). ``options`` reach every answer
    (``clock``, ``duration_of``, ``exit_code_of``). A cluster nobody answers for is an error.
    """
    if pm is None:
        pm = new_plugin_manager()
    backends = {}
    for cluster in getattr(config, "clusters", None) or []:
        kind = getattr(cluster, "kind", None)
        if kinds is not None and kind not in kinds:
            continue
        backend = pm.hook.flotilla_cluster_backend(cluster_config=cluster, config=config, options=options)
        if backend is None:
            raise ValueError(f"cluster {cluster.name!r}: no plugin provides a backend of kind {kind!r}")
        backends[cluster.name] = backend
    return Backends(backends)
