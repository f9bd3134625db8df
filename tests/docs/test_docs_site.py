"""The documentation site: ``mkdocs build --strict`` passes; the config, CLI, HTTP API and metrics references are
generated from the code, so what the code gains appears in them; no page holds a commit hash or a before/after
table of an old change (history belongs in CHANGELOG.md)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
import yaml
from pydantic import Field

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "gen"))

import reference  # noqa: E402  (docs/gen/reference.py)


def test_mkdocs_build_strict_passes(tmp_path):
    try:
        import material  # noqa: F401
        import mkdocs_gen_files  # noqa: F401
        import mkdocstrings  # noqa: F401
    except ImportError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"the docs extra is missing under CI: {exc}")
        pytest.skip(f"the docs extra is not installed (pip install -e '.[docs]'): {exc}")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
                            cwd=ROOT, capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for page in ("reference/config", "reference/cli", "reference/http-api", "reference/metrics",
                 "reference/plugin-api", "reference/client", "concepts/cycle", "getting-started"):
        assert (tmp_path / page / "index.html").is_file(), page
    # mkdocstrings rendered the plugin API from the docstrings.
    plugin_api = (tmp_path / "reference" / "plugin-api" / "index.html").read_text()
    for name in ("flotilla.plugin.PluginSession", "flotilla.plugin.take_args", "flotilla.testing.CycleResult",
                 "flotilla.core.hookspecs.flotilla_session_open"):
        assert f'id="{name}"' in plugin_api, name
    client = (tmp_path / "reference" / "client" / "index.html").read_text()
    for name in ("flotilla.client.Client.submit", "flotilla.client.AsyncClient.watch", "flotilla.client.errors.NotFound"):
        assert f'id="{name}"' in client, name


def test_every_nav_page_exists_and_every_page_is_in_the_nav():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text().replace("!!python", "#"))

    def pages(items):
        for item in items:
            for value in item.values():
                yield from (pages(value) if isinstance(value, list) else [value])

    listed = set(pages(config["nav"]))
    generated = set(reference.PAGES)
    on_disk = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")
               if "gen" not in p.relative_to(ROOT / "docs").parts}
    assert listed - generated <= on_disk
    assert on_disk - listed == set(), "every page of docs/ belongs in mkdocs.yml's nav"


def test_the_config_reference_has_every_key_of_every_model():
    page = reference.config_reference()
    for model in reference.config_models():
        assert f"## {model.__name__}\n" in page
        for key in reference.config_keys(model):
            assert f"| `{key}` |" in page, (model.__name__, key)
    assert "| `leaseDuration` | number | `15.0` |" in page
    assert "| `weight` | number | `1.0` | > 0 |" in page


def test_a_new_config_option_appears_without_anyone_writing_it():
    from flotilla.config.models import FlotillaConfig, Model

    class Quota(Model):
        #: Most jobs one user may have queued.
        max_queued: int = Field(100, ge=1, alias="maxQueued")

    class Extended(FlotillaConfig):
        quota: Quota = Field(default_factory=Quota)

    page = reference.config_reference(Extended)
    assert "| `quota` | [Quota](#quota) | see below |" in page
    assert "| `maxQueued` | integer | `100` | ≥ 1 | Most jobs one user may have queued. |" in page


def test_the_cli_reference_has_every_command_and_option():
    page = reference.cli_reference()
    commands = list(reference.cli_commands())
    assert len(commands) > 20
    for path, command in commands:
        assert f"`{' '.join(path)}`" in page
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert f"`{param.opts[0]}`" in page, (path, param.opts)
    assert "### `flotilla queue create`" in page or "#### `flotilla queue create`" in page


def test_a_new_command_appears_without_anyone_writing_it():
    @click.group()
    def tool():
        """A tool."""

    @tool.command()
    @click.option("--shiny", is_flag=True, help="Polish first.")
    def polish(shiny):
        """Polish the jobs."""

    page = reference.cli_reference(tool, ("tool",))
    assert "### `tool polish`\n\n```\ntool polish [OPTIONS]\n```\n\nPolish the jobs.\n" in page
    assert "| `--shiny` | Polish first. |" in page


def test_the_http_reference_has_every_route_of_the_openapi_schema():
    schema = reference.openapi_schema()
    page = reference.http_reference(schema)
    routes = [(method.upper(), path) for path, methods in schema["paths"].items() for method in methods]
    assert ("POST", "/v1/submit") in routes and ("GET", "/v1/jobs/{job_id}") in routes
    for method, path in routes:
        assert f"## `{method} {path}`" in page
    for name in schema["components"]["schemas"]:
        assert f"### {name}\n" in page
    new = {**schema, "paths": {**schema["paths"], "/v1/brand-new": {"get": {"summary": "Something new",
                                                                            "responses": {"200": {}}}}}}
    assert "## `GET /v1/brand-new`\n\nSomething new.\n" in reference.http_reference(new)


def test_the_metrics_reference_lists_what_the_metrics_module_registers():
    families = reference.metric_families()
    page = reference.metrics_reference()
    names = [name for name, *_ in families]
    assert "flotilla_cycle_phase_seconds" in names and "flotilla_api_errors_total" in names
    assert "flotilla_queue_queued_jobs_by_reason" in names
    for name, kind, labels, _ in families:
        assert f"| `{name}` | {kind} | {', '.join(f'`{label}`' for label in labels)} |" in page
    assert ("flotilla_cycle_phase_seconds", "histogram", ("phase",)) in [f[:3] for f in families]
    assert ("flotilla_queue_jobs", "gauge", ("queue", "state")) in [f[:3] for f in families]


# -- no history in the docs ------------------------------------------------------------------------------------

def doc_pages() -> dict[str, str]:
    """README.md, every page under docs/ and the generated references; CHANGELOG.md is where history goes."""
    pages = {"README.md": (ROOT / "README.md").read_text()}
    pages |= {str(p.relative_to(ROOT)): p.read_text() for p in sorted((ROOT / "docs").rglob("*.md"))}
    pages |= {f"docs/{name} (generated)": make() for name, make in reference.PAGES.items()}
    pages |= {str(p.relative_to(ROOT)): p.read_text() for p in sorted((ROOT / "deploy").rglob("README.md"))}
    return pages


def commits_among(candidates: set[str]) -> set[str]:
    """Which of the hex strings name a commit of this repository."""
    if not candidates:
        return set()
    result = subprocess.run(["git", "cat-file", "--batch-check=%(objecttype)"], cwd=ROOT, capture_output=True,
                            text=True, input="".join(f"{c}\n" for c in sorted(candidates)))
    if result.returncode != 0:
        pytest.skip(f"not a git checkout: {result.stderr.strip()}")
    return {c for c, kind in zip(sorted(candidates), result.stdout.splitlines()) if kind.endswith("commit")}


def test_commits_are_recognised():
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    if not head:
        pytest.skip("not a git checkout")
    assert commits_among({head[:7], head, "0000000"}) == {head[:7], head}


def test_no_page_holds_a_commit_hash():
    found = {}
    for name, text in doc_pages().items():
        hexes = set(re.findall(r"(?<![0-9A-Za-z])[0-9a-f]{7,40}(?![0-9A-Za-z])", text))
        commits = commits_among(hexes)
        if commits:
            found[name] = sorted(commits)
    assert found == {}


def test_no_page_holds_a_before_after_table():
    found = []
    for name, text in doc_pages().items():
        lines = text.splitlines()
        for i, line in enumerate(lines[:-1]):
            if line.startswith("|") and re.match(r"^\|[\s|:-]+\|$", lines[i + 1].strip()):
                header = [cell.strip().strip("`*").lower() for cell in line.strip().strip("|").split("|")]
                if {"before", "after", "base", "old", "new"} & set(header):
                    found.append(f"{name}:{i + 1}: {line}")
    assert found == []
