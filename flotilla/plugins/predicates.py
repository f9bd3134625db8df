"""``predicates``: the name under which configs list Kubernetes feasibility.

The rules themselves (unschedulable nodes, nodeSelector, NoSchedule and
NoExecute taints) are the core's (:mod:`flotilla.core.feasibility`): every
session enforces them whatever the plugin list, so leaving this name out
turns nothing off. The name stays accepted so that configs listing it keep
loading; it registers nothing and takes no arguments (its one hook
implementation is empty: a plugin implements at least one hook).
"""

from __future__ import annotations

from typing import Mapping

from flotilla.plugin import hookimpl, take_args


class Predicates:
    def __init__(self, args: Mapping | None = None):
        take_args(args)

    @hookimpl
    def flotilla_session_open(self, session):
        """Nothing to register: the core asks its feasibility rules in every session."""
