"""Structured logs (structlog), always on stderr so stdout stays machine-readable.

One event per decision at debug, one summary per cycle at info. The filtering
logger makes a disabled level a no-op call, cheap enough for the inner loop.
"""

from __future__ import annotations

import logging
import sys

import structlog

LEVELS = ("debug", "info", "warning", "error")
_level = logging.WARNING


def configure_logging(level: str = "warning", json: bool = False) -> None:
    """Send logs at ``level`` and above to stderr, as key=value lines or JSON."""
    global _level
    _level = getattr(logging, level.upper())
    renderer = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


def ensure_configured() -> None:
    """Library use without a CLI: warnings and up to stderr, unless the caller configured structlog."""
    if not structlog.is_configured():
        configure_logging("warning")


def debug_enabled() -> bool:
    """True when per-decision debug events are wanted; hot loops check this once, not per event."""
    return _level <= logging.DEBUG
