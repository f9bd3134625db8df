"""Actions: the steps of a cycle, run in the configured order.

Each action decides nothing alone: it asks the session, which asks the
plugins' registered callables, and it places jobs only through the
session's placement primitive (:mod:`flotilla.core.placement`). One module
per action; :data:`ACTIONS` maps the names used in the config (``actions:
[evict, {name: allocate, args: {lookahead: 100}}, preempt, lease]``) to
them. A third-party package may add one through the ``flotilla.actions``
entry-point group (:class:`flotilla.plugin.Action`; ``docs/actions.md``);
its name may not be a built-in's, and its constructor takes its ``args``
as a plugin's does.

Internal: not part of the plugin API (:mod:`flotilla.plugin`, :mod:`flotilla.testing`); may change in any release.
"""

from __future__ import annotations

import inspect
from typing import Any, Mapping

from flotilla.actions.allocate import Allocate
from flotilla.actions.enqueue import Enqueue
from flotilla.actions.evict import Evict
from flotilla.actions.lease import Lease
from flotilla.actions.preempt import Preempt
from flotilla.actions.reserve import Reserve
from flotilla.core.entrypoints import installed
from flotilla.plugin import Action


__all__ = ["ACTIONS", "Action", "ActionNameConflict", "ENTRY_POINT_GROUP", "action_name_clash", "available_actions",
           "find_action", "get_action"]

ACTIONS: dict[str, type] = {cls.name: cls for cls in (Enqueue, Evict, Reserve, Allocate, Preempt, Lease)}
ENTRY_POINT_GROUP = "flotilla.actions"


class ActionNameConflict(Exception):
    """An action name claimed twice: by a package and a built-in, or by two packages."""


def _distribution(ep) -> str:
    dist = getattr(ep, "dist", None)
    return dist.name if dist is not None else "an unnamed distribution"


def action_name_clash(name: str) -> str | None:
    """Why ``name`` cannot be used because two claim it (a built-in and a package, or two packages), or None."""
    claims = sorted((ep for ep in installed(ENTRY_POINT_GROUP) if ep.name == name), key=_distribution)
    if name in ACTIONS and claims:
        builtin = ACTIONS[name]
        who = " and ".join(f"{_distribution(ep)} ({ep.value})" for ep in claims)
        return (f"action name {name!r} is Flotilla's built-in action ({builtin.__module__}:{builtin.__qualname__}) "
                f"and is registered again by {who}; rename the package's action or uninstall it")
    if len(claims) > 1:
        who = " and ".join(f"{_distribution(ep)} ({ep.value})" for ep in claims)
        return f"action name {name!r} is registered by two distributions: {who}; uninstall one of them"
    return None


def available_actions() -> list[str]:
    """Every action name the config may use: the built-ins in cycle order, then installed ones by name."""
    others = sorted({ep.name for ep in installed(ENTRY_POINT_GROUP)} - set(ACTIONS))
    return [*ACTIONS, *others]


def find_action(name: str):
    """The class (or factory) registered under ``name``: a built-in, or a package's entry point.

    ``KeyError`` if none; :class:`ActionNameConflict` if a package claims a
    built-in's name or two packages claim one name.
    """
    clash = action_name_clash(name)
    if clash is not None:
        raise ActionNameConflict(clash)
    if name in ACTIONS:
        return ACTIONS[name]
    for ep in installed(ENTRY_POINT_GROUP):
        if ep.name == name:
            return ep.load()
    raise KeyError(name)


def _takes_args(factory) -> bool:
    """Whether ``factory`` takes a positional argument (the action's ``args``)."""
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in parameters)


def get_action(name: str, args: Mapping[str, Any] | None = None):
    """The action registered under ``name``, built with ``args`` (its config entry's mapping).

    ``KeyError`` if no action has that name, :class:`ActionNameConflict` if
    two claim it, ``ValueError`` or ``TypeError`` (from the constructor, as
    :func:`flotilla.plugin.take_args` raises them) for arguments it does not
    take. A class whose constructor takes no argument is built without one
    and given no ``args``.
    """
    factory = find_action(name)
    if _takes_args(factory):
        return factory(dict(args or {}))
    if args:
        raise ValueError(f"unknown argument(s) {', '.join(sorted(args))}; expected no arguments")
    return factory()
