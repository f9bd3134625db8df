"""``docs/plugins-reference.md``, generated from the declarations (:mod:`flotilla.core.extensions`, the hookspecs).

``python -m flotilla.core.reference > docs/plugins-reference.md`` (what
``scripts/plugins-reference`` runs) writes it; ``tests/docs/test_docs.py``
checks that the file is what this module renders, so the reference cannot
drift from the code.
"""

from __future__ import annotations

import inspect
import re

from flotilla.core import hookspecs
from flotilla.core.extensions import EXTENSION_POINTS

HOOKS = (hookspecs.flotilla_session_open, hookspecs.flotilla_session_close, hookspecs.flotilla_cluster_backend)


def _markdown(docstring: str | None) -> str:
    """A docstring in Markdown: reST roles and double backticks become code spans."""
    text = inspect.cleandoc(docstring or "")
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def render() -> str:
    """The reference page, as Markdown."""
    out = [
        "# Plugin reference",
        "",
        "Generated from `flotilla/core/extensions.py` and `flotilla/core/hookspecs.py` by",
        "`scripts/plugins-reference`; edit those, not this page. The guide is [plugins.md](plugins.md).",
        "",
        "## Hooks",
        "",
        "pluggy hooks, called a handful of times per cycle; implement them with `@hookimpl`.",
        "",
    ]
    for hook in HOOKS:
        out += [f"### `{hook.__name__}{inspect.signature(hook)}`", "", _markdown(hook.__doc__), ""]
    out += [
        "## Extension points",
        "",
        "Plain callables registered on the session in `flotilla_session_open`, called in the actions'",
        "inner loops. A node is an `int` (its position in the session's node list); a `Vector` is a",
        "tuple of ints in the order of `session.space.names` (cpu in millicores).",
        "",
        "| extension point | register with | combine rule |",
        "|---|---|---|",
    ]
    out += [f"| `{p.name}` | `session.{p.register}` | {p.combine} |" for p in EXTENSION_POINTS]
    out.append("")
    for point in EXTENSION_POINTS:
        out += [f"### `{point.name}`", "", f"`{point.protocol.__name__}{point.signature}`, registered with "
                f"`session.{point.register}`.", "", _markdown(point.protocol.__doc__), "", f"Combine rule: {point.combine}.", ""]
    return "\n".join(out)


if __name__ == "__main__":
    print(render(), end="")
