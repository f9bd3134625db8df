"""``flotilla simulate``: run a workload through the real scheduler on a simulated clock."""

from __future__ import annotations

import json
import sys
import time

import click

EXIT_NO_PROGRESS = 3
EXIT_SCHEDULER_BUG = 4


def _duration(ctx, param, value):
    if value is None:
        return None
    from flotilla.core.quantities import QuantityError, parse_duration

    try:
        return parse_duration(value)
    except QuantityError as exc:
        raise click.BadParameter(str(exc)) from None


def dumps_report(obj, level: int = 0) -> str:
    """JSON with one key per line and each time series on one line: readable and still small."""
    pad = "  " * (level + 1)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{pad}{json.dumps(key)}: {dumps_report(value, level + 1)}" for key, value in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + "  " * level + "}"
    return json.dumps(obj, separators=(", ", ": "))


def write_json(document, json_path: str | None) -> None:
    """The JSON report to stdout (``-``), to a file, or nowhere (``None``)."""
    if json_path == "-":
        click.echo(dumps_report(document))
    elif json_path:
        with open(json_path, "w", encoding="utf-8") as handle:
            handle.write(dumps_report(document) + "\n")


class _Progress:
    """A rich progress bar on stderr: only on a terminal, and only once the run has taken a second."""

    def __init__(self, label: str, enabled: bool):
        self.label = label
        self.enabled = enabled
        self.started = time.perf_counter()
        self.last = 0.0
        self.bar = None
        self.task = None

    def __call__(self, t: float, total: float) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self.last < 0.1:
            return
        self.last = now
        if self.bar is None:
            if now - self.started < 1.0:
                return
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(),
                                TextColumn("{task.fields[done]} / {task.fields[horizon]} simulated"),
                                TimeElapsedColumn(), console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.label, total=total, done="", horizon="")
        from flotilla.simulate.report import fmt_seconds

        self.bar.update(self.task, completed=t, total=total, done=fmt_seconds(t), horizon=fmt_seconds(total))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def _stderr_is_tty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


@click.command("simulate")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Scheduler config (YAML); its simulated clusters are the cluster. Default: the built-in "
                   "config (two 32-core nodes, queues A and B).")
@click.option("--workload", "workload_path", type=click.Path(dir_okay=False), required=True,
              help="Workload (YAML): submissions of identical jobs at given times (spec section 4).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed for the scheduler's random draws; same inputs and seed, same report.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="Write the JSON report here ('-' for stdout; the table then goes to stderr).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="Write a PNG: each queue's share over time against its fair share, and utilisation.")
@click.option("--compare", "compare", multiple=True, metavar="POLICY[,POLICY...]",
              help="Run once per fairness policy, replacing the config's fairness plugin; one table, one plot, "
                   "JSON under 'policies'. A policy is a plugin name with its args as YAML after a colon if it "
                   "takes any: --compare drf --compare 'tiers:{tiers: {prod: 0, batch: 1}}'. Repeat the option "
                   "or separate policies by commas.")
@click.option("--until", callback=_duration, default=None, metavar="DURATION",
              help="Stop at this simulated time (e.g. 2d) even if jobs remain.")
@click.option("--max-skip", callback=_duration, default=None, metavar="DURATION",
              help="Longest jump of the clock after a cycle that changed nothing (default: up to the next "
                   "submission or completion). Set it for policies that drift with time alone.")
@click.option("--progress/--no-progress", default=None,
              help="Progress bar on stderr (default: on when stderr is a terminal and the run takes over 1 s).")
@click.option("--quiet", "-q", is_flag=True, help="No table on the terminal.")
@click.option("--real-time", is_flag=True,
              help="Play the workload on the config's Kubernetes (e.g. KWOK) clusters on the wall clock instead "
                   "of simulated clusters on a simulated clock; same report and plot.")
@click.option("--speed", type=float, default=1.0, show_default=True,
              help="With --real-time: play the workload this many times faster than written (durations and "
                   "submission times divided by it; the report is in workload seconds).")
def simulate(config_path, workload_path, seed, json_path, plot_path, compare, until, max_skip, progress, quiet,
             real_time, speed):
    """Run a workload through the scheduler, cycle by cycle, on a simulated clock.

    The configured actions and plugins run exactly as in `schedule-once` and
    the service; the `lease` action starts and stops jobs on the config's
    simulated clusters. The clock jumps from event to event (a submission, a
    completion, the next cycle) without sleeping. Jobs run for their
    `duration`; a preempted job goes back to its queue and starts again from
    zero. The run ends when every job has finished (or at --until); a run that
    cannot make progress (a job that fits no node, ever) stops with exit code 3.

    At the end: a table per queue (weight, fair share, mean share, jobs
    finished, mean and p95 wait from submission to start, preemptions) and
    overall utilisation, cycles, wall and simulated time.

    With --real-time the clusters are the config's `kind: kubernetes`
    clusters (e.g. from `flotilla kwok up`) and time is the wall clock; see
    docs/kubernetes.md.

    \b
    Examples:
      flotilla simulate --workload examples/workloads/two-queues.yaml --plot two-queues.png
      flotilla simulate --config examples/simulate-gangs.yaml --workload examples/workloads/gangs.yaml \\
          --compare assetfairness,drf,decayedusage --json out.json
      flotilla simulate --real-time --config examples/kwok-two-clusters.yaml \\
          --workload examples/kwok-workload.yaml --speed 10
    """
    from flotilla.scheduler_main import UserError

    if real_time and compare:
        raise UserError("--compare runs one policy after another; with --real-time run them one at a time on "
                        "fresh clusters")
    if speed != 1.0 and not real_time:
        raise click.BadParameter("--speed applies to --real-time only (a simulated clock has no speed)",
                                 param_hint="--speed")
    from rich.console import Console

    from flotilla.config import ConfigError
    from flotilla.scheduler_main import build_scheduler, load_config_or_fail
    from flotilla.simulate.engine import SchedulerBug, Simulation, SimulationError
    from flotilla.simulate.policies import Policy, PolicyError, check_policy, fairness_index, parse_policies, with_policy
    from flotilla.simulate.report import render_table
    from flotilla.simulate.workload import load_workload

    config = load_config_or_fail(config_path)
    try:
        workload = load_workload(workload_path, config)
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    if real_time:
        from flotilla.kubernetes.realtime import run_cli

        return run_cli(config, workload, workload_path, seed=seed, json_path=json_path, plot_path=plot_path,
                       until=until, quiet=quiet, speed=speed)

    policies: list[Policy | None] = [None]
    if compare:
        try:
            policies = parse_policies(compare)
            if not policies:
                raise PolicyError("--compare: expected plugin names, e.g. assetfairness,drf or "
                                  "'tiers:{tiers: {prod: 0, batch: 1}}'")
            for policy in policies:
                check_policy(config, policy)
        except PolicyError as exc:
            raise UserError(str(exc)) from None
        if fairness_index(config) is None:
            raise UserError(str(config.source.error(("plugins",), "no fairness plugin (one that registers "
                                                                  "queue_order, e.g. assetfairness) to replace")))

    to_stderr = json_path == "-"
    terminal = _stderr_is_tty() if to_stderr else sys.stdout.isatty()
    out_console = Console(stderr=to_stderr, width=None if terminal else 120)
    show_progress = _stderr_is_tty() if progress is None else progress
    reports: dict[str | None, dict] = {}
    failure: tuple[int, str] | None = None
    for policy in policies:
        label = policy.label if policy is not None else None
        run_config = config
        if policy is not None:
            try:
                run_config = with_policy(config, policy)
            except ConfigError as exc:
                raise UserError(str(exc)) from None
            except PolicyError as exc:
                raise UserError(str(exc)) from None
        try:
            scheduler = build_scheduler(run_config)
        except UserError as exc:
            if policy is not None:
                raise UserError(f"--compare {policy.text!r}: {policy.name!r} cannot be the fairness policy: "
                                f"{exc.format_message()}") from None
            raise
        bar = _Progress(f"simulate {label}" if label else "simulate", show_progress)
        try:
            sim = Simulation(run_config, workload, seed=seed, until=until, max_skip=max_skip, scheduler=scheduler,
                             progress=bar)
            reports[label] = sim.run()
        except ConfigError as exc:
            raise UserError(str(exc)) from None
        except SimulationError as exc:
            reports[label] = exc.report or {}
            code = EXIT_SCHEDULER_BUG if isinstance(exc, SchedulerBug) else EXIT_NO_PROGRESS
            failure = (code, (f"{label}: " if label else "") + str(exc))
            break
        finally:
            bar.close()
        if label is not None and reports[label].get("policy") is not None:
            reports[label]["policy"] = label

    complete = {key: value for key, value in reports.items() if value.get("queues") is not None}
    document = reports[None] if policies == [None] else {"policies": complete}
    write_json(document, json_path)
    if failure is None:
        if not quiet:
            render_table(complete, out_console)
        if plot_path:
            from flotilla.simulate.plot import plot_runs

            plot_runs(complete, plot_path, title=f"flotilla simulate: {workload_path}")
    if failure is not None:
        click.echo(f"error: {failure[1]}", err=True)
        sys.exit(failure[0])


__all__ = ["EXIT_NO_PROGRESS", "EXIT_SCHEDULER_BUG", "dumps_report", "simulate", "write_json"]
