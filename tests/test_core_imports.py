"""The core's imports, read from its source (ast, not import side effects): nothing above it, no cycles."""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parent.parent / "flotilla" / "core"
FORBIDDEN = ("flotilla.actions", "flotilla.plugins", "flotilla.service", "flotilla.kubernetes")


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in it (also inside functions and TYPE_CHECKING blocks)."""
    package = "flotilla.core"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module
            found.add(module)
            # ``from flotilla.core import hookspecs`` imports the module flotilla.core.hookspecs.
            found.update(f"{module}.{alias.name}" for alias in node.names
                         if (CORE.parent.parent / (f"{module}.{alias.name}".replace(".", "/") + ".py")).exists())
    return found


def core_graph() -> dict[str, set[str]]:
    modules = {f"flotilla.core.{path.stem}": path for path in CORE.glob("*.py") if path.stem != "__init__"}
    return {name: imports_of(path) for name, path in modules.items()}


def under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_core_imports_no_action_plugin_service_or_backend():
    graph = core_graph()
    assert len(graph) > 10  # the glob found the core
    offending = sorted((name, imported) for name, imported_set in graph.items() for imported in imported_set
                       if any(under(imported, forbidden) for forbidden in FORBIDDEN))
    assert offending == []


def test_the_core_has_no_import_cycles():
    graph = core_graph()
    edges = {name: {m for m in imported if m in graph and m != name} for name, imported in graph.items()}
    cycles = []
    state: dict[str, int] = {}   # 1: on the current path, 2: done
    path: list[str] = []

    def visit(name: str) -> None:
        state[name] = 1
        path.append(name)
        for nxt in sorted(edges[name]):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[name] = 2

    for name in sorted(edges):
        if name not in state:
            visit(name)
    assert cycles == []


def test_the_walk_sees_imports_inside_functions_and_type_checking_blocks(tmp_path):
    module = tmp_path / "probe.py"
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from flotilla.actions import allocate\n"
                      "def f():\n    import flotilla.service.api\n")
    assert {"flotilla.actions", "flotilla.service.api"} <= imports_of(module)
