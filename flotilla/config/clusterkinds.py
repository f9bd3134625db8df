"""Clusters of kinds that packages provide: the kind is installed, and its ``args`` are what its backend reads.

A ``kind`` other than the built-in ones names an entry point of the
``flotilla.backends`` group (:func:`flotilla.plugin_manager.find_backend_kind`).
Checked here, with the rest of the config, each problem at its own line:

* a kind no installed package provides: one error naming it, the kinds
  there are, and the nearest one;
* ``args`` that the kind's own pydantic model (its ``Args``) refuses, at the
  field of ``args`` it names; the model's reading is kept on the cluster
  (``parsed_args``) for its backend.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any, Sequence

from pydantic import ValidationError

if TYPE_CHECKING:
    from flotilla.config.errors import FieldPath


def cluster_kind_problems(clusters: Sequence[Any]) -> list[tuple[FieldPath, str]]:
    """``(path, message)`` for every packaged cluster whose kind is not installed or whose args its model refuses."""
    from flotilla.config.models import PackagedClusterConfig
    from flotilla.config.source import validation_problems
    from flotilla.plugin_manager import (PluginNameConflict, available_cluster_kinds, backend_args,
                                         find_backend_kind)

    problems: list[tuple[FieldPath, str]] = []
    for c, cluster in enumerate(clusters):
        if not isinstance(cluster, PackagedClusterConfig):
            continue
        try:
            factory = find_backend_kind(cluster.kind)
        except LookupError:
            problems.append((("clusters", c, "kind"), unknown_kind_message(cluster.kind, available_cluster_kinds())))
            continue
        except PluginNameConflict as exc:
            problems.append((("clusters", c, "kind"), str(exc)))
            continue
        try:
            cluster.keep_parsed_args(backend_args(factory, cluster.args))
        except ValidationError as exc:
            model = getattr(factory, "Args", None)
            problems += validation_problems(exc, model, ("clusters", c, "args"))
        except ValueError as exc:
            problems.append((("clusters", c, "args"), f"cluster kind {cluster.kind!r}: {exc}"))
    return problems


def unknown_kind_message(kind: str, known: Sequence[str]) -> str:
    """``unknown cluster kind 'slurm' (known: kubernetes, simulated)``, with the nearest known kind if one is near."""
    message = f"unknown cluster kind {kind!r} (known: {', '.join(known)})"
    close = difflib.get_close_matches(kind, known, n=1)
    return message + (f"; did you mean {close[0]!r}?" if close else "")


__all__ = ["cluster_kind_problems", "unknown_kind_message"]
