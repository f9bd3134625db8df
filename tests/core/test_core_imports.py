"""The core's imports, read from its source (ast, not import side effects): nothing above it, no cycles."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "flotilla" / "core"
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


# -- across the whole package ------------------------------------------------------------------

PACKAGE = CORE.parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def from_imports(path: Path) -> list[tuple[int, str, str]]:
    """``(line, module, name)`` of every ``from MODULE import NAME`` in ``path`` (relative ones resolved)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{module}" if module else base
            found += [(node.lineno, module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, "") for alias in node.names]
    return found


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(path: Path) -> list[tuple[str, int, str]]:
    """Private names (``_x``) ``path`` takes from another module, and private modules from outside their package."""
    importer = module_name(path)
    out = []
    for line, module, name in from_imports(path):
        if not module.startswith("flotilla"):
            continue
        if name and private(name) and module != importer:
            out.append((importer, line, f"{module}.{name}"))
        parts = module.split(".")
        for depth, part in enumerate(parts):   # flotilla.client._sync: only for flotilla.client's own modules
            if private(part) and not under(importer, ".".join(parts[:depth])):
                out.append((importer, line, module))
                break
    return out


def test_no_module_imports_a_private_name_of_another():
    """A leading underscore is the module's own business: another module that needs it needs a public name."""
    offending = [found for path in sorted(PACKAGE.rglob("*.py")) for found in private_imports(path)]
    assert offending == []


#: The one module of flotilla.kubernetes the service may import (its public surface).
KUBERNETES_SURFACE = "flotilla.kubernetes.public"


def test_the_service_imports_only_the_public_surface_of_the_kubernetes_package():
    offending = sorted((module_name(path), line, module)
                       for path in sorted((PACKAGE / "service").rglob("*.py"))
                       for line, module, name in from_imports(path)
                       if under(module, "flotilla.kubernetes")
                       and not under(f"{module}.{name}" if module == "flotilla" else module, KUBERNETES_SURFACE)
                       and not (module == "flotilla.kubernetes" and name == "public"))
    assert offending == []


def is_module(dotted: str) -> bool:
    path = PACKAGE.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def private_attributes(path: Path) -> list[tuple[str, int, str]]:
    """Private names ``path`` reads as attributes of a module of the package it imported (``import flotilla.x as
    m``, ``from flotilla import x``: ``m._y``, ``x._y``): the same reach as importing them, spelled otherwise."""
    importer = module_name(path)
    tree = ast.parse(path.read_text(), str(path))
    modules: dict[str, str] = {}   # the name bound in the module -> the module it is
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update((alias.asname, alias.name) for alias in node.names
                           if alias.asname and alias.name.startswith("flotilla"))
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("flotilla"):
            modules.update((alias.asname or alias.name, f"{node.module}.{alias.name}") for alias in node.names
                           if is_module(f"{node.module}.{alias.name}"))
    return sorted((importer, node.lineno, f"{modules[node.value.id]}.{node.attr}") for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                  and node.value.id in modules and private(node.attr) and modules[node.value.id] != importer)


def test_no_module_reads_a_private_name_of_another_as_an_attribute():
    offending = [found for path in sorted(PACKAGE.rglob("*.py")) for found in private_attributes(path)]
    assert offending == []


def fake_package(tmp_path: Path, monkeypatch, files: dict[str, str]) -> Path:
    """A package ``flotilla`` of ``files`` (path under it -> source) that the checks read instead of the real one."""
    package = tmp_path / "flotilla"
    for name, source in files.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(source)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", package)
    return package


def test_the_attribute_check_sees_private_names_of_imported_modules(tmp_path, monkeypatch):
    package = fake_package(tmp_path, monkeypatch, {
        "kwok/cluster.py": "", "kwok/realnode/__init__.py": "",
        "kwok/probe.py": "import flotilla.kwok.cluster as kc\nfrom flotilla.kwok import realnode as rn_mod\n"
                         "from flotilla.kwok.realnode import NODE\n_own = 1\n"
                         "def f(probe):\n    return kc._kill, rn_mod._pid, rn_mod.node, NODE._x, probe._own\n"})
    probe = package / "kwok" / "probe.py"
    assert private_attributes(probe) == [("flotilla.kwok.probe", 6, "flotilla.kwok.cluster._kill"),
                                         ("flotilla.kwok.probe", 6, "flotilla.kwok.realnode._pid")]


#: The real node's package: its front (``__init__``) composes the parts, which import one another and
#: ``layout`` but nothing from the front (so they load in any order); only ``__main__`` uses the front's names.
REALNODE = "flotilla.kwok.realnode"


def test_the_real_node_parts_take_nothing_from_the_package_front():
    realnode = PACKAGE / "kwok" / "realnode"
    parts = sorted(path for path in realnode.glob("*.py") if path.stem not in ("__init__", "__main__"))
    assert {path.stem for path in parts} >= {"layout", "processes", "host", "config", "containerd", "controlplane",
                                          "kubelet", "network", "teardown", "chains", "images"}
    offending = sorted((module_name(path), line, f"{module}.{name}" if name else module) for path in parts
                       for line, module, name in from_imports(path)
                       if (module == REALNODE and not is_module(f"{module}.{name}"))
                       or (module == "flotilla.kwok" and name == "realnode"))
    assert offending == []
    assert max(len(path.read_text().splitlines()) for path in realnode.glob("*.py")) <= 450


def test_the_checks_see_private_names_private_modules_and_kubernetes_internals(tmp_path, monkeypatch):
    package = fake_package(tmp_path, monkeypatch, {
        "service/probe.py": "from flotilla.kwok.cluster import _kill\nfrom flotilla.client._sync import Client\n"
                            "from flotilla.service.probe import _mine\ndef f():\n    from flotilla.kubernetes.backend "
                            "import KubernetesCluster\n    from flotilla.kubernetes.public import KubeClient\n"})
    probe = package / "service" / "probe.py"
    assert private_imports(probe) == [("flotilla.service.probe", 1, "flotilla.kwok.cluster._kill"),
                                      ("flotilla.service.probe", 2, "flotilla.client._sync")]
    assert [(m, n) for _, m, n in from_imports(probe) if under(m, "flotilla.kubernetes")] == [
        ("flotilla.kubernetes.backend", "KubernetesCluster"), ("flotilla.kubernetes.public", "KubeClient")]


#: The store's parts share these modules; no part imports a sibling (what takes two parts is the Store's).
STORE_SHARED = ("flotilla.service.store.engine", "flotilla.service.store.records")


def test_the_store_parts_import_no_sibling():
    store = PACKAGE / "service" / "store"
    parts = sorted(path for path in store.glob("*.py") if path.stem != "__init__")
    assert {path.stem for path in parts} >= {"engine", "records", "queues", "jobs", "events", "intake", "leases"}
    offending = sorted((module_name(path), line, module) for path in parts
                       for line, module, name in from_imports(path)
                       if (under(module, "flotilla.service.store") or (module, name) == ("flotilla.service", "store"))
                       and (module not in STORE_SHARED or module_name(path) in STORE_SHARED))
    assert offending == []


#: The Kubernetes backend's parts share the pod cache and the ledger (the jobs' and pods' bookkeeping); the facade
#: (cluster.py) composes them, and only the package and the config factory import it (no part reaches into it).
BACKEND = "flotilla.kubernetes.backend"
BACKEND_SHARED = (f"{BACKEND}.podcache", f"{BACKEND}.ledger")
BACKEND_FACADES = (f"{BACKEND}.cluster", f"{BACKEND}.config")


def test_the_kubernetes_backend_parts_import_no_sibling_but_the_pod_cache_and_the_ledger():
    backend = PACKAGE / "kubernetes" / "backend"
    parts = sorted(path for path in backend.glob("*.py") if module_name(path) not in (BACKEND, *BACKEND_FACADES))
    assert {path.stem for path in parts} >= {"podcache", "informers", "writes", "bindguard", "held", "reporting",
                                          "priorityclasses", "ledger", "lostpods", "podevents",
                                          "starts", "volumewaits", "stops", "dispatch", "snapshots"}
    offending = sorted((module_name(path), line, module) for path in parts
                       for line, module, name in from_imports(path)
                       if (under(module, BACKEND) or (module, name) == ("flotilla.kubernetes", "backend"))
                       and module not in BACKEND_SHARED)
    assert offending == []
    importers_of_the_cluster = sorted({module_name(path) for path in sorted(PACKAGE.rglob("*.py"))
                                       for _, module, _ in from_imports(path) if module == f"{BACKEND}.cluster"})
    assert importers_of_the_cluster == [BACKEND, f"{BACKEND}.config"]
