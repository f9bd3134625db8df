"""The test layout (tests/README.md): modules in one folder per layer, helpers only from tests/support.

A test module that imports another test module runs that module's fixtures and module-level code twice under two
names, and ties two files a reader should be able to read apart; a module at tests/ itself has no layer.
"""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
LAYERS = {"core", "actions", "plugins", "config", "simulate", "service", "kubernetes", "kwok", "realnode",
          "conformance", "deploy", "docs"}
SHARED = {"support"}
#: Top-level names of helpers under tests/ (tests/ put on sys.path): imported only as tests.support.<module>.
OLD_HELPERS = {"conftest", "scenario", "kwok_fixtures", "realnode_fixtures", "service_fixtures", "serve_process",
               "venv_tools", "docs_examples"}


def python_files():
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def imported_modules(source: str, package: tuple[str, ...]) -> list[tuple[int, str]]:
    """Every module ``source`` imports, relative names resolved against ``package`` (``("tests", "core")``)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else ()
            module = ".".join([*base, *([node.module] if node.module else [])])
            out.append((node.lineno, module))
            # ``from tests.support import scenario`` and ``from . import test_x`` name modules as well.
            out += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return out


def imports_of_test_modules(source: str, package: tuple[str, ...], test_modules: set[str]) -> list[str]:
    """``line: module`` for each import of a test module (or a helper's old top-level name) in ``source``."""
    bad = []
    for line, module in imported_modules(source, package):
        parts = module.split(".")
        names_a_test_module = bool(test_modules & set(parts)) or parts[0] in OLD_HELPERS
        reaches_into_a_layer = parts[0] == "tests" and len(parts) > 1 and parts[1] not in SHARED
        if names_a_test_module or reaches_into_a_layer:
            bad.append(f"{line}: {module}")
    return bad


def test_no_test_module_sits_at_the_root_of_tests():
    assert sorted(p.name for p in TESTS.glob("*.py")) == ["__init__.py", "conftest.py"]


def test_every_test_module_sits_in_a_layer_folder_that_is_a_package():
    misplaced = [str(p.relative_to(TESTS)) for p in TESTS.rglob("test_*.py")
                 if len(p.relative_to(TESTS).parts) != 2 or p.parent.name not in LAYERS]
    assert misplaced == []
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == LAYERS | SHARED
    assert [f for f in sorted(folders) if not (TESTS / f / "__init__.py").is_file()] == []


def test_no_test_module_imports_another_test_module():
    """Only tests.support is imported; conftest's fixtures reach test modules by name, not by import."""
    test_modules = {p.stem for p in TESTS.rglob("test_*.py")}
    bad = []
    for path in python_files():
        package = path.relative_to(TESTS.parent).with_suffix("").parts[:-1]
        bad += [f"{path.relative_to(TESTS)}:{b}" for b in imports_of_test_modules(path.read_text(), package, test_modules)]
    assert bad == []


def test_every_way_of_naming_a_test_module_is_caught():
    source = ("import test_kwok\n"
              "from tests.kwok.test_kwok import job\n"
              "from tests.kwok import test_kwok\n"
              "from . import test_placement\n"
              "from .test_placement import helper\n"
              "from scenario import run_once\n"
              "from tests.support.scenario import run_once\n"
              "from tests.support import scenario\n"
              "from flotilla.core.model import Job\n")
    assert imports_of_test_modules(source, ("tests", "core"), {"test_kwok", "test_placement"}) == [
        "1: test_kwok", "2: tests.kwok.test_kwok", "2: tests.kwok.test_kwok.job", "3: tests.kwok",
        "3: tests.kwok.test_kwok", "4: tests.core", "4: tests.core.test_placement", "5: tests.core.test_placement",
        "5: tests.core.test_placement.helper", "6: scenario", "6: scenario.run_once"]
