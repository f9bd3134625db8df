"""Actions: the steps of a cycle, run in the configured order.

Each action decides nothing alone: it asks the session, which asks the
plugins' registered callables. One module per action; :data:`ACTIONS` maps
the names used in the config (``actions: [evict, allocate, preempt, lease]``)
to them. A third-party package may add one through the ``flotilla.actions``
entry-point group (an object with ``name`` and ``execute(session)``).

Internal: not part of the plugin API (:mod:`flotilla.plugin`, :mod:`flotilla.testing`); may change in any release.
"""

from __future__ import annotations

from typing import Protocol

from flotilla.actions.allocate import Allocate
from flotilla.actions.enqueue import Enqueue
from flotilla.actions.evict import Evict
from flotilla.actions.lease import Lease
from flotilla.actions.preempt import Preempt
from flotilla.actions.reserve import Reserve
from flotilla.core.entrypoints import installed


class Action(Protocol):
    name: str

    def execute(self, session) -> None: ...


ACTIONS: dict[str, type] = {cls.name: cls for cls in (Enqueue, Evict, Reserve, Allocate, Preempt, Lease)}
ENTRY_POINT_GROUP = "flotilla.actions"


def available_actions() -> list[str]:
    """Every action name the config may use: the built-ins in cycle order, then installed ones by name."""
    others = sorted({ep.name for ep in installed(ENTRY_POINT_GROUP)} - set(ACTIONS))
    return [*ACTIONS, *others]


def get_action(name: str):
    """The action registered under ``name``, built in or from an entry point; ``KeyError`` if none."""
    if name in ACTIONS:
        return ACTIONS[name]()
    for ep in installed(ENTRY_POINT_GROUP):
        if ep.name == name:
            return ep.load()()
    raise KeyError(name)
