"""Run ``flotilla schedule-once`` on YAML written inline, as a user would."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from click.testing import CliRunner

from flotilla.scheduler_main import main

PLUGINS = """
plugins:
  - name: assetfairness
  - name: bestfit
  - name: gang
  - name: priorityclass
  - name: predicates
"""

CLASSES = """
priorityClasses:
  - {name: armada-default, priority: 30000, preemptible: false}
  - {name: armada-preemptible, priority: 20000, preemptible: true}
defaultPriorityClass: armada-default
"""


def config(queues: str = "queues: [{name: A, weight: 1}, {name: B, weight: 1}]", plugins: str = PLUGINS,
           extra: str = "") -> str:
    return "\n".join([textwrap.dedent(plugins), textwrap.dedent(CLASSES), textwrap.dedent(queues),
                      textwrap.dedent(extra)])


def invoke(tmp_path: Path, config_yaml: str | None, state_yaml: str, seed: int = 0):
    state = tmp_path / "state.yaml"
    state.write_text(textwrap.dedent(state_yaml))
    args = ["schedule-once", "--state", str(state), "--seed", str(seed)]
    if config_yaml is not None:
        cfg = tmp_path / "flotilla.yaml"
        cfg.write_text(config_yaml)
        args += ["--config", str(cfg)]
    return CliRunner().invoke(main, args)


def run_once(tmp_path: Path, config_yaml: str | None, state_yaml: str, seed: int = 0) -> dict:
    result = invoke(tmp_path, config_yaml, state_yaml, seed)
    assert result.exit_code == 0, result.output + (result.stderr if result.stderr_bytes else "")
    return json.loads(result.stdout)


def placements(out: dict) -> dict[str, str]:
    return {p["job"]: p["node"] for p in out["scheduled"]}


def jobs(prefix: str, count: int, queue: str, *, start: int = 1, submitted: int = 0, pc: str = "armada-preemptible",
         cpu: str = "1", extra: str = "") -> str:
    """State-file lines for ``count`` identical queued jobs."""
    return "\n".join(
        f"  - {{id: {prefix}-{i}, queue: {queue}, priorityClass: {pc}, requests: {{cpu: {cpu}}}, "
        f"submitted: {submitted + i}{', ' + extra if extra else ''}}}"
        for i in range(start, start + count))


def install_distribution(site: Path, module: str, source: str, group: str, entry: str) -> None:
    """Write a real (unpacked) distribution into ``site``: ``module.py`` and one entry point in ``group``.

    ``entry`` is ``name = module:attr``. Prepend ``site`` to ``sys.path`` (monkeypatch.syspath_prepend)
    and ``importlib.metadata`` finds it exactly as it finds an installed package.
    """
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(source)
    info = site / f"flotilla_{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: flotilla-{module.replace('_', '-')}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{entry}\n")
