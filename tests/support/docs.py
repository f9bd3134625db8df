"""Run the ``flotilla`` commands a section of a docs page shows, as a reader would paste them."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

from click.testing import CliRunner

from flotilla.scheduler_main import main

REPO = Path(__file__).resolve().parents[2]


def section(page: str, heading: str) -> str:
    """The text of ``docs/<page>`` under the ``## `` heading that starts with ``heading``, up to the next one."""
    text = (REPO / "docs" / page).read_text()
    start = text.index(f"\n## {heading}")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def commands(text: str) -> list[list[str]]:
    """Each ``flotilla ...`` command of the ``sh`` blocks in ``text``, continuation lines joined, as argv."""
    out = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.startswith("flotilla "):
                out.append(shlex.split(line.split("#")[0])[1:])
    return out


def run_documented(argv: list[str]) -> dict:
    """Run one documented command from the repository's root (its paths are relative to it); its JSON output."""
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        result = CliRunner().invoke(main, argv)
    finally:
        os.chdir(cwd)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def blocks(text: str, language: str) -> list[str]:
    """The contents of the fenced ``language`` blocks in ``text``, in order."""
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def refused(config_yaml: str, argv: list[str], tmp_path: Path) -> str:
    """Run a documented command in ``tmp_path`` (where the docs' ``flotilla.yaml`` is written, the repository's
    ``examples`` linked); it must fail with exit code 2. Its stderr."""
    (tmp_path / "flotilla.yaml").write_text(config_yaml)
    (tmp_path / "examples").symlink_to(REPO / "examples")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(main, argv)
    finally:
        os.chdir(cwd)
    assert result.exit_code == 2, result.output
    return result.stderr
