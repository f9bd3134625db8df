"""Plugin arguments the config can check before any plugin is loaded: numbers, weights, resource lists.

A plugin's ``args`` is free-form YAML, so pydantic's ``allow_inf_nan=False``
does not reach it, and a plugin's constructor sees only what it asks for.
What is checked here, each at its own line:

* every number anywhere in ``args`` is finite (``.nan`` and ``.inf`` are
  numbers to YAML): a NaN weight makes every share NaN, and a NaN compares
  false with everything, so preemption to fair share silently stops;
* ``resourceWeights`` (the measure of ``assetfairness`` and ``decayedusage``,
  and of any plugin built on ``flotilla.plugin.parse_weights``) maps
  resource names to non-negative numbers, not all zero (an all-zero measure
  makes every share 0/0); a string, a boolean or null is refused, not
  converted;
* ``drf``'s ``resources`` is a list of resource names (``resources: cpu``,
  a string, would otherwise be read letter by letter).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Iterator

from flotilla.core.quantities import resource_name_problem

if TYPE_CHECKING:
    from flotilla.config.errors import FieldPath
    from flotilla.config.models import PluginConfig

#: Plugins whose ``args.resources`` is a list of resource names.
RESOURCE_LIST_PLUGINS = ("drf",)


def _shown(value: Any) -> str:
    """``value`` as YAML writes it (``null``, ``true``, ``.nan``), so the message quotes what the file says."""
    if value is None or isinstance(value, bool):
        return "null" if value is None else str(value).lower()
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else ("-.inf" if value < 0 else ".inf")
    return repr(value)


def _numbers(value: Any, path: tuple) -> Iterator[tuple[tuple, float]]:
    """(path, value) of every float below ``value`` (iteratively: YAML nests as deep as it likes)."""
    stack = [(path, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, float):
            yield where, item
        elif isinstance(item, Mapping):
            stack.extend(((*where, str(key)), sub) for key, sub in item.items())
        elif isinstance(item, list):
            stack.extend(((*where, index), sub) for index, sub in enumerate(item))


def _weight_problems(weights: Any, path: tuple) -> list[tuple[FieldPath, str]]:
    if not isinstance(weights, Mapping):
        return [(path, f"expected a mapping of resource names to non-negative numbers, e.g. {{cpu: 1, "
                       f"nvidia.com/gpu: 1, memory: 0}}, got {_shown(weights)}")]
    problems: list[tuple[FieldPath, str]] = []
    for name, weight in weights.items():
        where = (*path, str(name))
        if (why := resource_name_problem(name)) is not None:
            problems.append((where, why))
        elif isinstance(weight, bool) or not isinstance(weight, (int, float)):
            problems.append((where, f"expected a non-negative number, got {_shown(weight)}"))
        elif not math.isfinite(weight) or weight < 0:
            problems.append((where, f"expected a non-negative number, got {_shown(weight)}"))
    if not problems and not any(weights.values()):
        problems.append((path, "every weight is 0 (or none is given): shares would all be 0/0; give at least one "
                               "resource a positive weight"))
    return problems


def _resource_list_problems(resources: Any, path: tuple) -> list[tuple[FieldPath, str]]:
    if not isinstance(resources, list):
        return [(path, f"expected a list of resource names, e.g. [cpu, memory], got {_shown(resources)}")]
    return [((*path, r), why) for r, name in enumerate(resources) if (why := resource_name_problem(name))]


def plugin_arg_problems(plugins: list[PluginConfig]) -> list[tuple[FieldPath, str]]:
    """``(path, message)`` for every problem of the module docstring in the plugins' ``args``."""
    problems: list[tuple[FieldPath, str]] = []
    for p, plugin in enumerate(plugins):
        args = plugin.args or {}
        base = ("plugins", p, "args")
        problems += [(where, f"expected a finite number, got {_shown(value)}")
                     for where, value in _numbers(args, base) if not math.isfinite(value)]
        if problems:
            continue
        if "resourceWeights" in args:
            problems += _weight_problems(args["resourceWeights"], (*base, "resourceWeights"))
        if plugin.name in RESOURCE_LIST_PLUGINS and args.get("resources") is not None:
            problems += _resource_list_problems(args["resources"], (*base, "resources"))
    return problems


__all__ = ["RESOURCE_LIST_PLUGINS", "plugin_arg_problems"]
