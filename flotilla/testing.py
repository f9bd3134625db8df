"""Pytest fixtures for plugin authors: run one cycle, or a short simulation, with your plugin.

Installed with Flotilla and registered through the ``pytest11`` entry point,
so a plugin package's tests use them with no import and no conftest:

.. code-block:: python

    def test_prod_goes_first(flotilla_cycle):
        result = flotilla_cycle(STATE, plugins=[{"name": "tiers", "args": {"tiers": {"prod": 0}}},
                                                "bestfit", "gang", "priorityclass", "predicates"])
        assert result.scheduled == {"p-1": "node-1"}
        assert result.queued == {"b-1": "0/1 nodes are available: 1 Insufficient cpu"}

``flotilla_cycle(state, plugins=None, config=None, seed=0) -> CycleResult``
    One cycle of every configured action but ``lease``, exactly as
    ``flotilla schedule-once --state`` runs it; :class:`CycleResult` holds
    its decisions as plain data (and ``output``, the command's JSON).

``flotilla_simulate(workload, plugins=None, config=None, seed=0, until=None) -> SimulationResult``
    ``flotilla simulate`` on a workload; :class:`SimulationResult` holds
    the placements and preemptions of every cycle that made any, and the
    report's per-queue figures.

Arguments, for both:

* ``state`` / ``workload``: YAML text (a ``str``), a file (a
  :class:`pathlib.Path`), or the loaded mapping. The state file is that of
  ``schedule-once --state`` (clusters, nodes, jobs queued or running, extra
  queues, ``now``); the workload that of ``simulate --workload``.
* ``config``: the scheduler config, in the same three forms; ``None`` is
  the built-in default (two 32-core nodes in cluster ``sim``, queues ``A``
  and ``B``, the five built-in plugins).
* ``plugins``: when given, replaces the config's ``plugins:`` list. Each
  entry is a name (``"bestfit"``), a mapping as in the YAML (``{"name":
  "tiers", "args": {...}}``), or your plugin's class itself, alone or as
  ``(cls, args)``. A class is found the way the scheduler finds every
  plugin, through the ``flotilla.plugins`` entry-point group: the entry
  point your installed package declares for it, else one the fixture
  declares for the test in a throwaway distribution (so tests run before
  the package is installed). It must be defined at the top level of an
  importable module.

A config, state, workload or plugin list the scheduler refuses raises
:class:`SetupError`, whose message is the line ``flotilla`` would print
(``plugins[0].args: plugin 'tiers': ...``), so argument checks are tested
with ``pytest.raises(SetupError, match=...)``.

This module is part of the public plugin API (see :mod:`flotilla.plugin`
for the stability promise): the two fixtures, their arguments, and the
fields of :class:`CycleResult`, :class:`SimulatedCycle`,
:class:`SimulationResult` and :class:`SetupError`.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import pytest
import yaml

ENTRY_POINT_GROUP = "flotilla.plugins"


class SetupError(Exception):
    """The scheduler refused the config, state, workload or plugin list; the message says what and where."""


@dataclass(frozen=True)
class CycleResult:
    """One cycle's decisions as plain data, in the order ``schedule-once`` prints them."""

    #: Queued jobs placed this cycle: job id -> node name.
    scheduled: dict[str, str]
    #: Running jobs to stop, by id.
    preempted: list[str]
    #: Jobs left waiting: job id -> the reason users see.
    queued: dict[str, str]
    #: Each queue's share of the pool after the cycle, as reported (measured by the core, 6 decimals).
    shares: dict[str, float]
    #: The ``schedule-once`` JSON output, exactly: also clusters, fair shares, allocations.
    output: dict = field(repr=False)
    #: Jobs left waiting: job id -> their reason's code (``insufficient_resources``, ``taint``, ...; the
    #: ``reason`` label of ``flotilla_queue_queued_jobs_by_reason``), what a test reads rather than the words.
    #: Left out of ``==``, so a result compared with one written out without it compares as before.
    codes: dict[str, str] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class SimulatedCycle:
    """One simulated cycle that started or stopped anything."""

    #: Simulated seconds since the start.
    time: float
    #: Jobs started: job id -> node name.
    scheduled: dict[str, str]
    #: Jobs preempted, by id.
    preempted: list[str]


@dataclass(frozen=True)
class SimulationResult:
    """What a short simulation did: its cycles' decisions and the report's figures."""

    #: The cycles that changed anything, in time order.
    cycles: list[SimulatedCycle]
    #: Per queue: the report's figures (``meanShare``, ``fairShare``, ``finished``, ``preemptions``, ``waitMean``, ...).
    queues: dict[str, dict]
    #: The whole ``simulate`` report (as ``--json -`` prints it), less ``wallSeconds``, which varies.
    report: dict = field(repr=False)


# -- inputs ------------------------------------------------------------------

def _read(source: str | os.PathLike | Mapping | None, name: str):
    """``(data, SourceMap)`` from YAML text, a file or a mapping; ``None`` for ``None``."""
    from flotilla.config import ConfigError, SourceMap, load_yaml, read_yaml_file

    if source is None:
        return None
    try:
        if isinstance(source, os.PathLike):
            return read_yaml_file(source)
        if isinstance(source, str):
            return load_yaml(source, f"<{name}>")
    except ConfigError as exc:
        raise SetupError(str(exc)) from None
    if isinstance(source, Mapping):
        return dict(source), SourceMap(f"<{name}>")
    raise TypeError(f"{name}: expected YAML text (str), a file (pathlib.Path) or a mapping, got {type(source).__name__}")


class _Plugins:
    """Turns the ``plugins=`` entries into the config's YAML form, declaring entry points for bare classes."""

    def __init__(self, site: Callable[[], Path]):
        self._site = site
        self._declared: dict[str, str] = {}

    def entries(self, plugins: Sequence[Any]) -> list[dict]:
        if isinstance(plugins, (str, Mapping)):
            raise TypeError("plugins: expected a list of plugin entries")
        return [self._entry(entry) for entry in plugins]

    def _entry(self, entry: Any) -> dict:
        if isinstance(entry, str):
            return {"name": entry}
        if isinstance(entry, Mapping):
            return dict(entry)
        args: Mapping = {}
        if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[1], Mapping):
            entry, args = entry
        if callable(entry):
            return {"name": self._name_of(entry), "args": dict(args)}
        raise TypeError(f"plugins: expected a name, a mapping with name and args, a plugin class or (class, args); "
                        f"got {entry!r}")

    def _name_of(self, factory: Callable) -> str:
        target = f"{factory.__module__}:{factory.__qualname__}"
        try:
            found = importlib.import_module(factory.__module__)
            for part in factory.__qualname__.split("."):
                found = getattr(found, part)
        except (ImportError, AttributeError):
            found = None
        if found is not factory:
            raise TypeError(f"plugins: {factory.__qualname__} is not importable as {target}; define it at the top "
                            f"level of a module, or name its installed entry point")
        from flotilla.core.entrypoints import installed

        package = factory.__module__.partition(".")[0]
        for ep in installed(ENTRY_POINT_GROUP):
            if ep.value.replace(" ", "") == target:
                return ep.name
            if ep.module.partition(".")[0] == package and _loads(ep) is factory:
                return ep.name
        name = f"{factory.__module__}.{factory.__qualname__}"
        if name not in self._declared:
            self._declare(name, target)
        return name

    def _declare(self, name: str, target: str) -> None:
        """A distribution on ``sys.path`` that declares ``name = target`` in the plugins group, as pip writes it."""
        self._declared[name] = target
        digest = hashlib.sha1(name.encode()).hexdigest()[:12]
        info = self._site() / f"flotilla_testing_{digest}-0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: flotilla-testing-{digest}\nVersion: 0\n")
        (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{name} = {target}\n")
        from flotilla.core.entrypoints import forget

        forget()  # written within the same clock tick as the last read, the directory may look unchanged


def _loads(ep):
    """The object ``ep`` names, or None when it does not load."""
    try:
        return ep.load()
    except Exception:  # another plugin's broken entry point is not this test's concern
        return None


def _config(config, plugins: Sequence[Any] | None, declare: _Plugins):
    from flotilla.config import ConfigError, SourceMap, format_path, validate_config
    from flotilla.config.loader import DEFAULT_CONFIG_NAME, DEFAULT_CONFIG_YAML

    class PluginsGiven(SourceMap):
        """The config's source map, except that the plugin list came from ``plugins=``: its problems have no line."""

        def error(self, path, message):
            if path and path[0] == "plugins":
                return ConfigError(message, None, None, format_path(path))
            return super().error(path, message)

    loaded = _read(config, "config") or _read(DEFAULT_CONFIG_YAML, DEFAULT_CONFIG_NAME.strip("<>"))
    data, source = loaded
    if plugins is not None:
        data = {**data, "plugins": declare.entries(plugins)}
        source = PluginsGiven(source.file, source.root)
    try:
        return validate_config(data, source)
    except ConfigError as exc:
        raise SetupError(str(exc)) from None


def _scheduler(config):
    from flotilla.scheduler_main import UserError, build_scheduler

    try:
        return build_scheduler(config)
    except UserError as exc:
        raise SetupError(exc.format_message()) from None


# -- running -----------------------------------------------------------------

def run_cycle(state, plugins: Sequence[Any] | None = None, config=None, seed: int = 0, *,
              declare: _Plugins) -> CycleResult:
    """What the ``flotilla_cycle`` fixture calls (see the module docstring)."""
    from flotilla.config import ConfigError
    from flotilla.config.state import validate_state
    from flotilla.core.reasons import code_of

    cfg = _config(config, plugins, declare)
    scheduler = _scheduler(cfg)
    loaded = _read(state, "state")
    if loaded is None:
        raise TypeError("state: expected YAML text (str), a file (pathlib.Path) or a mapping, got None")
    try:
        snapshot = validate_state(*loaded, cfg)
    except ConfigError as exc:
        raise SetupError(str(exc)) from None
    actions = scheduler.actions   # lease included: with no sink it hands nothing over
    decisions = scheduler.run_cycle(snapshot, random.Random(seed), actions=actions)
    output = decisions.to_dict()
    return CycleResult(
        scheduled={p["job"]: p["node"] for p in output["scheduled"]},
        preempted=list(output["preempted"]),
        queued=dict(output["reasons"]),
        shares={name: q["share"] for name, q in output["queues"].items()},
        output=output,
        codes={job.id: code_of(decisions.why(job)) for job in decisions.queued},
    )


def run_simulation(workload, plugins: Sequence[Any] | None = None, config=None, seed: int = 0,
                   until: float | None = None, *, declare: _Plugins) -> SimulationResult:
    """What the ``flotilla_simulate`` fixture calls (see the module docstring)."""
    from flotilla.config import ConfigError
    from flotilla.simulate.engine import Simulation
    from flotilla.simulate.workload import load_workload, parse_workload

    cfg = _config(config, plugins, declare)
    scheduler = _scheduler(cfg)
    cycles: list[SimulatedCycle] = []

    def record(sim, info) -> None:
        if info.changed:
            cycles.append(SimulatedCycle(info.time, {p.job.id: p.node for p in info.decisions.scheduled},
                                         sorted(job.id for job in info.decisions.preempted)))

    try:
        if isinstance(workload, os.PathLike):
            parsed = load_workload(workload, cfg)
        elif isinstance(workload, (str, Mapping)):
            text = workload if isinstance(workload, str) else yaml.safe_dump(dict(workload), sort_keys=False)
            parsed = parse_workload(text, "<workload>", cfg)
        else:
            raise TypeError(f"workload: expected YAML text (str), a file (pathlib.Path) or a mapping, "
                            f"got {type(workload).__name__}")
        simulation = Simulation(cfg, parsed, seed=seed, until=until, scheduler=scheduler, on_cycle=record)
    except ConfigError as exc:
        raise SetupError(str(exc)) from None
    report = simulation.run()
    report.pop("wallSeconds", None)
    return SimulationResult(cycles, dict(report["queues"]), report)


# -- fixtures ----------------------------------------------------------------

@pytest.fixture
def flotilla_cycle(tmp_path_factory, monkeypatch) -> Callable[..., CycleResult]:
    """``flotilla_cycle(state, plugins=None, config=None, seed=0) -> CycleResult``: one cycle with your plugin."""
    declare = _Plugins(_site(tmp_path_factory, monkeypatch))

    def cycle(state, plugins: Sequence[Any] | None = None, config=None, seed: int = 0) -> CycleResult:
        return run_cycle(state, plugins, config, seed, declare=declare)

    return cycle


@pytest.fixture
def flotilla_simulate(tmp_path_factory, monkeypatch) -> Callable[..., SimulationResult]:
    """``flotilla_simulate(workload, plugins=None, config=None, seed=0, until=None) -> SimulationResult``."""
    declare = _Plugins(_site(tmp_path_factory, monkeypatch))

    def simulate(workload, plugins: Sequence[Any] | None = None, config=None, seed: int = 0,
                 until: float | None = None) -> SimulationResult:
        return run_simulation(workload, plugins, config, seed, until, declare=declare)

    return simulate


def _site(tmp_path_factory, monkeypatch) -> Callable[[], Path]:
    """A directory put on ``sys.path`` for this test only, made when the first class needs declaring."""
    made: list[Path] = []

    def site() -> Path:
        if not made:
            made.append(tmp_path_factory.mktemp("flotilla-plugins"))
            monkeypatch.syspath_prepend(str(made[0]))
        return made[0]

    return site


__all__ = ["CycleResult", "SetupError", "SimulatedCycle", "SimulationResult", "flotilla_cycle", "flotilla_simulate"]
