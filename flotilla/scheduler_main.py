"""The ``flotilla`` command.

``flotilla schedule-once`` runs one cycle on a state file and prints the
decisions as JSON; other commands (``simulate``, ``serve``, ``submit``,
``kwok``, ...) are registered at the end of this module from their own
packages. Every user error is one line on stderr and a non-zero exit; stdout
carries only the command's output.
"""

from __future__ import annotations

import json
import random
import sys

import click

from flotilla import __version__
from flotilla.core.logs import LEVELS, configure_logging

EXIT_USAGE = 2


class UserError(click.ClickException):
    """One clear line on stderr, exit code 2, nothing on stdout."""

    exit_code = EXIT_USAGE

    def show(self, file=None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


def build_scheduler(config):
    """A Scheduler for ``config``, with plugin problems reported at their place in the config file."""
    from flotilla.config import ConfigError
    from flotilla.scheduler import Scheduler
    from flotilla.plugin_manager import PluginError
    from flotilla.core.session import SessionError

    try:
        return Scheduler(config)
    except PluginError as exc:
        if exc.field.startswith("actions"):
            path = ("actions", exc.index, *exc.field.split(".")[1:])
        else:
            path = ("plugins", exc.index, exc.field)
        raise UserError(str(config.source.error(path, exc.message))) from None
    except SessionError as exc:
        raise UserError(str(config.source.error(("plugins",), str(exc)))) from None
    except ConfigError as exc:
        raise UserError(str(exc)) from None


def load_config_or_fail(path):
    from flotilla.config import ConfigError, load_config

    try:
        return load_config(path)
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read config: {exc.strerror}") from None


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="flotilla")
@click.option("--log-level", type=click.Choice(LEVELS), default="warning", show_default=True,
              help="Logs go to stderr: one line per cycle at info, one per decision at debug.")
@click.option("--log-json", is_flag=True, help="Log as JSON lines instead of key=value text.")
def main(log_level: str, log_json: bool) -> None:
    """Flotilla: a batch-job scheduler for one or many Kubernetes clusters.

    Jobs wait in queues; every cycle the scheduler opens a session on a
    snapshot of all clusters and runs its actions (evict, allocate, preempt,
    lease), which ask the configured plugins what to do.

    Start here: `flotilla schedule-once --state examples/two-queues.yaml`
    runs one cycle of the built-in default config on a small state file.
    """
    configure_logging(log_level, json=log_json)


@main.command("schedule-once")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Scheduler config (YAML). Default: the built-in config (one simulated cluster of two "
                   "32-core nodes, queues A and B, the five built-in plugins).")
@click.option("--state", "state_path", type=click.Path(dir_okay=False), required=True,
              help="State file: clusters and nodes (optional; default: the config's simulated clusters) "
                   "and jobs, queued or running.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed for the evict action's draws; same inputs and seed, same output.")
@click.option("--indent", type=int, default=2, show_default=True, help="JSON indentation (0: one line).")
def schedule_once(config_path, state_path, seed, indent):
    """Run one cycle (every configured action but lease) on a state file and print the decisions.

    Output (JSON on stdout): `scheduled` (queued jobs placed: job, cluster,
    node), `preempted` (running jobs to stop), `queued` (jobs left waiting),
    `reasons` (why each of those waits) and `queues` (fair share, share of
    the pool after the cycle, resources allocated).

    \b
    Example:
      flotilla schedule-once --state examples/two-queues.yaml
      flotilla schedule-once --config examples/flotilla.yaml --state S.yaml --seed 7
    """
    _, scheduler, snapshot = _load_for_cycle(config_path, state_path)
    actions = scheduler.actions   # lease included: with no sink it hands nothing over
    decisions = run_or_fail(scheduler, snapshot, seed, actions)
    click.echo(json.dumps(decisions.to_dict(), indent=indent or None))


class CycleFailed(click.ClickException):
    """The cycle failed closed (a plugin's failure no action isolates): one line on stderr, exit 1."""

    exit_code = 1

    def show(self, file=None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


def run_or_fail(scheduler, snapshot, seed: int, actions):
    """One cycle on ``snapshot``; a cycle that fails closed is :class:`CycleFailed`, naming the plugin."""
    from flotilla.core.extensions import PluginFailed

    try:
        return scheduler.run_cycle(snapshot, random.Random(seed), actions=actions)
    except PluginFailed as failure:
        raise CycleFailed(f"the cycle failed closed (nothing decided): {failure.reason}") from None


@main.command("wishlist")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Scheduler config (YAML) with nodeTemplates.")
@click.option("--state", "state_path", type=click.Path(dir_okay=False), required=True,
              help="State file, as for schedule-once.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for the evict action's draws.")
@click.option("--indent", type=int, default=2, show_default=True, help="JSON indentation (0: one line).")
def wishlist(config_path, state_path, seed, indent):
    """Run one cycle on a state file, then say which node templates would run the jobs still waiting.

    Output (JSON): `templates` (per template: its cluster, how many waiting
    jobs it would unblock, how many such nodes would run them all; queue
    order, gangs whole, first fit decreasing) and `unfit` (jobs no template
    could run, with the reason).

    
    Example:
      flotilla wishlist --config examples/wishlist.yaml --state examples/wishlist-state.yaml
    """
    from flotilla.core.wishlist import compute_wishlist

    config, scheduler, snapshot = _load_for_cycle(config_path, state_path)
    if not config.node_templates:
        raise UserError("the config lists no nodeTemplates: nothing to wish for")
    actions = scheduler.actions   # lease included: with no sink it hands nothing over
    decisions = run_or_fail(scheduler, snapshot, seed, actions)
    result = compute_wishlist(scheduler, snapshot, decisions.queued, [t.to_core() for t in config.node_templates],
                              decisions.scheduled, decisions.preempted)
    click.echo(json.dumps(result.to_dict(), indent=indent or None))


def _load_for_cycle(config_path, state_path):
    """The config, its scheduler and the state file's snapshot, or a one-line error."""
    from flotilla.config import ConfigError, load_state

    config = load_config_or_fail(config_path)
    scheduler = build_scheduler(config)
    try:
        snapshot = load_state(state_path, config)
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    except OSError as exc:
        raise UserError(f"{state_path}: cannot read state: {exc.strerror}") from None
    return config, scheduler, snapshot


def _register_commands() -> None:
    """Commands that live in their own packages; each is optional until its package lands."""
    import importlib

    for module, attr in (
        ("flotilla.simulate.cli", "simulate"),
        ("flotilla.service.cli", "register"),
        ("flotilla.kwok.cli", "register"),
    ):
        try:
            target = getattr(importlib.import_module(module), attr)
        except ModuleNotFoundError as exc:
            if exc.name and module.startswith(exc.name):
                continue
            raise
        if isinstance(target, click.Command):
            main.add_command(target)
        else:
            target(main)


_register_commands()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
