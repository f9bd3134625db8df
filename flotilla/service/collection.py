"""Full garbage collections wait while a large request body is in memory.

Why: CPython's full collection walks every tracked object the process holds
(outside what ``serve`` froze at start) in one step that holds the
interpreter lock. While a 10,000-job submission is handled, its parsed body
and its models are a few hundred thousand such objects, and one full pass
took 150 to 600 ms, during which the event loop answered nobody (health
included), whichever thread happened to trigger it. Parsing and validating
in short steps does not help against a pass that walks them all at once.

So while a large body is handled (:func:`full_collections_deferred`), the
oldest generation's threshold is raised out of reach: the young generations
are still collected (each pass walks at most a few thousand young objects),
and the next full pass comes after the last large body in flight is done,
when its objects are gone and it walks only what the service keeps. Only
cyclic garbage that reached the oldest generation meanwhile waits; so that
a stream of large bodies cannot defer full collections forever, a deferral
ends after :data:`MAX_DEFERRAL` seconds even if large bodies are still in
flight, and full collections then run as usual until none is.
"""

from __future__ import annotations

import gc
import threading
import time
from contextlib import contextmanager
from typing import Iterator

#: Longest a deferral lasts, however many large bodies keep arriving.
MAX_DEFERRAL = 30.0
#: The oldest generation's threshold while deferred: never reached.
_OUT_OF_REACH = 2**31 - 1

_lock = threading.Lock()
_holders = 0
#: The thresholds to restore while deferring, else None.
_saved: tuple[int, int, int] | None = None
_since = 0.0


@contextmanager
def full_collections_deferred() -> Iterator[None]:
    """No full collection starts while inside (unless the deferral passed :data:`MAX_DEFERRAL`); reentrant and
    shared across threads: it ends when the last holder leaves."""
    global _holders, _saved, _since
    with _lock:
        if _holders == 0:
            young, middle, old = gc.get_threshold()
            _saved, _since = (young, middle, old), time.monotonic()
            gc.set_threshold(young, middle, _OUT_OF_REACH)
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _saved is not None and (_holders == 0 or time.monotonic() - _since > MAX_DEFERRAL):
                gc.set_threshold(*_saved)
                _saved = None


def deferring() -> bool:
    """Whether full collections are deferred now."""
    return _saved is not None


__all__ = ["MAX_DEFERRAL", "deferring", "full_collections_deferred"]
