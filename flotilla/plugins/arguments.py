"""Checking a plugin's ``args`` mapping, so a typo in the config is an error, not a no-op."""

from __future__ import annotations

from typing import Any, Mapping


def take_args(args: Mapping[str, Any] | None, **defaults: Any) -> dict[str, Any]:
    """``defaults`` overridden by ``args``; any key not in ``defaults`` is a ``ValueError``."""
    args = dict(args or {})
    unknown = sorted(set(args) - set(defaults))
    if unknown:
        expected = ", ".join(sorted(defaults)) or "no arguments"
        raise ValueError(f"unknown argument(s) {', '.join(unknown)}; expected {expected}")
    return {**defaults, **args}
