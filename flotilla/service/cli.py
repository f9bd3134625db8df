"""The service's commands: ``serve``, and the client commands that talk to it.

Exit codes (every client command):

====  =============================================================
0     done
1     the server refused the request (unknown job or queue, conflict,
      rejected submission: 404, 409, 422)
2     usage error (bad arguments, unreadable file)
3     not authenticated or not allowed (401, 403)
4     the server cannot be reached
5     ``watch --until-done``: every job finished, but not all succeeded
====  =============================================================

Errors go to stderr, one line each; stdout carries only the output.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any, Iterable

import click
import yaml

EXIT_REFUSED, EXIT_USAGE, EXIT_AUTH, EXIT_UNREACHABLE, EXIT_NOT_ALL_SUCCEEDED = 1, 2, 3, 4, 5
TERMINAL = {"succeeded", "failed", "preempted", "cancelled"}
STATE_OF = {"queued": "queued", "leased": "leased", "pending": "pending", "running": "running",
            "succeeded": "succeeded", "failed": "failed", "preempted": "preempted", "cancelled": "cancelled"}


class CommandError(click.ClickException):
    def __init__(self, message: str, exit_code: int = EXIT_REFUSED, details: Iterable[str] = ()):
        super().__init__(message)
        self.exit_code = exit_code
        self.details = list(details)

    def show(self, file=None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)
        for line in self.details:
            click.echo(f"  {line}", err=True)


def _from_client_error(exc) -> CommandError:
    """The command's error line and exit status for a :mod:`flotilla.client` error."""
    from flotilla.client import ApiError

    if not isinstance(exc, ApiError):
        return CommandError(str(exc), EXIT_UNREACHABLE)
    code = EXIT_AUTH if exc.status in (401, 403) else EXIT_REFUSED
    if exc.code == "rejected" and exc.errors:
        return CommandError(f"{exc.status}: submission rejected, nothing was submitted", code,
                            [e.text for e in exc.errors])
    return CommandError(f"{exc.status}: {exc.message}", code)


def _client(ctx: click.Context):
    from flotilla.client import Client

    params = ctx.find_root().params if ctx else {}
    obj = ctx.obj if ctx and isinstance(ctx.obj, dict) else {}
    return Client(obj.get("url") or params.get("url"), obj.get("token") or params.get("token"))


def _call(ctx: click.Context, fn):
    from flotilla.client import FlotillaError

    with _client(ctx) as client:
        try:
            return fn(client)
        except FlotillaError as exc:
            raise _from_client_error(exc) from None


def connection_options(fn):
    fn = click.option("--token", envvar="FLOTILLA_TOKEN", default=None,
                      help="Bearer token (else $FLOTILLA_TOKEN, else the client config file).")(fn)
    fn = click.option("--url", envvar="FLOTILLA_URL", default=None,
                      help="Server address, e.g. http://127.0.0.1:8080 (else $FLOTILLA_URL, else the client config "
                           "file ~/.config/flotilla/client.yaml, else http://127.0.0.1:8080).")(fn)
    return fn


def output_option(fn):
    return click.option("--output", "-o", type=click.Choice(["table", "json", "yaml"]), default="table",
                        show_default=True, help="How to print records.")(fn)


def _remember(ctx: click.Context, url, token) -> None:
    ctx.ensure_object(dict)
    if url:
        ctx.obj["url"] = url
    if token:
        ctx.obj["token"] = token


def emit(data: Any, output: str, columns: list[tuple[str, str]] | None = None, rows: list[dict] | None = None) -> None:
    if output == "json":
        click.echo(json.dumps(data, indent=2, default=str))
    elif output == "yaml":
        click.echo(yaml.safe_dump(data, sort_keys=False, default_flow_style=False).rstrip())
    else:
        _table(rows if rows is not None else [data], columns or [(k, k) for k in (data or {})])


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":")) if value else "-"
    return str(value)


def _table(rows: list[dict], columns: list[tuple[str, str]]) -> None:
    cells = [[title.upper() for _, title in columns]] + [[_cell(row.get(key)) for key, _ in columns] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    for r in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def _fmt_time(ts: float | None) -> str:
    if ts is None:
        return "-"
    import datetime as dt

    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z"


# -- serve -------------------------------------------------------------------------------------

def _duration(ctx, param, value):
    from flotilla.core.quantities import QuantityError, parse_duration

    try:
        return parse_duration(value)
    except QuantityError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command("serve")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Scheduler config (YAML) with the service sections (server, auth, store, lease, queues). "
                   "Default: the built-in config.")
@click.option("--listen", default=None, help="HOST:PORT to listen on (default: server.listen of the config).")
@click.option("--store", "store_url", default=None, help="Store URL (default: store.url of the config), "
                                                        "e.g. sqlite:///flotilla.db or postgresql+psycopg://...")
@click.option("--admin-endpoints", is_flag=True, envvar="FLOTILLA_ADMIN_ENDPOINTS",
              help="Enable POST /v1/admin/clusters/NAME/stop|start (administrators; stops a simulated cluster, "
                   "for tests and demos).")
@click.option("--seed", type=int, default=None, help="Seed for the evict action's draws.")
@click.option("--role", type=click.Choice(["all", "api", "scheduler"]), default="all", show_default=True,
              envvar="FLOTILLA_ROLE",
              help="all: API and scheduling loop in one process (SQLite is fine). api: a stateless API replica. "
                   "scheduler: a leader-elected scheduler replica. api and scheduler need PostgreSQL.")
@click.option("--identity", default=None, envvar="FLOTILLA_IDENTITY",
              help="This scheduler's name in leader election (default: $POD_NAME or the host name, the pid and "
                   "a random suffix).")
@click.option("--store-wait", "store_wait", default="5m", show_default=True, envvar="FLOTILLA_STORE_WAIT",
              metavar="DURATION", callback=_duration,
              help="How long to wait at start-up for a PostgreSQL store that refuses connections or does not "
                   "resolve yet (e.g. 300s, 5m), answering /healthz meanwhile; 0: exit at once. A wrong password "
                   "or a missing database ends start-up at once.")
def serve(config_path, listen, store_url, admin_endpoints, seed, role, identity, store_wait):
    """Run the submission API and the scheduling loop (--role all), or one of them.

    Every `cycle.period`, the loop reads the store and the clusters, runs
    the configured actions, records decisions and events in one
    transaction, and hands the leases to the clusters. Simulated clusters
    run each job for its `flotilla.io/simulated-duration` annotation (or
    until cancelled) on the wall clock. SIGTERM finishes the cycle in
    progress and exits.

    \b
    Example:
      flotilla serve --config examples/serve.yaml
    """
    from flotilla.scheduler_main import build_scheduler, load_config_or_fail
    from flotilla.service.loop import lease_missing
    from flotilla.service.server import build_service, run

    from flotilla.service.reload import file_digest
    from flotilla.service.roles import RoleError, check_role
    from flotilla.service.settings import from_config
    from flotilla.service.storewait import StoreUnavailable, one_line

    digest = file_digest(config_path) if config_path is not None else None   # before the wait for the store
    config = load_config_or_fail(config_path)
    scheduler = build_scheduler(config)
    missing = lease_missing(config, scheduler)
    if missing is not None:
        raise CommandError(str(missing), EXIT_USAGE)
    settings = from_config(config)
    url = store_url or settings.store_url
    probes = None
    try:
        check_role(role, url)
        probes = _reach_store(url, store_wait, listen or settings.listen, role)
        service = build_service(config, scheduler, store_url=store_url, admin_endpoints=admin_endpoints, seed=seed,
                                role=role, identity=identity, config_path=config_path, settings=settings,
                                config_digest=digest)
    except (RoleError, StoreUnavailable) as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None
    except Exception as exc:  # a store that cannot be opened, a backend that cannot start
        raise CommandError(f"cannot start: {one_line(exc)}", EXIT_USAGE) from None
    finally:
        if probes is not None:
            probes.close()      # the service's server binds the same address next
    try:
        code = run(service, listen)
    except ValueError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None
    sys.exit(code)


def _reach_store(url: str, wait: float, listen: str, role: str):
    """Wait for a PostgreSQL store (:mod:`flotilla.service.storewait`); the probes answering meanwhile, if any.

    SQLite is a file, nothing to wait for. With ``wait`` 0, one attempt and no probes.
    """
    from flotilla.service.server import split_listen
    from flotilla.service.storewait import StartupProbes, store_address, wait_for_store

    if url.startswith("sqlite"):
        return None
    if wait <= 0:
        wait_for_store(url, 0)
        return None
    address = store_address(url)    # a URL that does not parse fails here, before anything listens
    host, port = split_listen(listen)

    def on_signal(signum, frame) -> None:
        raise _StoppedWaiting(signal.Signals(signum).name)

    handlers = {signum: signal.signal(signum, on_signal) for signum in (signal.SIGTERM, signal.SIGINT)}
    # Nothing to reload yet; a changed config file is still seen once the service runs (see build_service).
    handlers[signal.SIGHUP] = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    probes = None
    try:
        probes = StartupProbes(host, port, role)
        probes.set_reason(f"store unreachable: {address}")
        wait_for_store(url, wait, on_wait=probes.set_reason)
        probes.set_reason("starting: the store answers, building the service on it")
    except _StoppedWaiting as stop:
        if probes is not None:
            probes.close()
        print(f"flotilla serve: {stop} while waiting for store {address}: stopped", file=sys.stderr, flush=True)
        sys.exit(0)
    except BaseException:
        if probes is not None:
            probes.close()
        raise
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    return probes


class _StoppedWaiting(BaseException):
    """SIGTERM or SIGINT while waiting for the store: nothing to finish, so the process ends with status 0."""


# -- jobs --------------------------------------------------------------------------------------

def _read_job_file(path: str) -> dict:
    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    except OSError as exc:
        raise CommandError(f"{path}: cannot read: {exc.strerror}", EXIT_USAGE) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CommandError(f"{path}: not valid YAML: {exc}", EXIT_USAGE) from None
    if not isinstance(data, dict):
        raise CommandError(f"{path}: expected a job file (queue, jobSetId, jobs)", EXIT_USAGE)
    if "queue" not in data and os.environ.get("FLOTILLA_QUEUE"):
        # kubectl flotilla sets it from the current namespace's flotilla.io/queue label (flotilla.kubectl_plugin).
        data = {"queue": os.environ["FLOTILLA_QUEUE"], **data}
    return data


@click.command("submit")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@output_option
@connection_options
@click.pass_context
def submit(ctx, file, output, url, token):
    """Submit a job file (YAML or JSON; `-` for stdin): all of its jobs, or none.

    Prints each job's id in the file's order (`--output json`:
    {"jobs": [{"id": ..., "clientId": ...}, ...]}); a job whose clientId the
    queue has seen comes back with the existing job's id.
    """
    _remember(ctx, url, token)
    data = _read_job_file(file)
    result = _call(ctx, lambda c: c.submit(data)).raw
    emit(result, output, [("id", "id"), ("clientId", "clientId"), ("existing", "existing")], result["jobs"])


@click.command("cancel")
@click.argument("queue")
@click.argument("job_set", required=False)
@click.option("--job", "job_ids", multiple=True, help="Cancel only this job (repeatable).")
@click.option("--state", "states", multiple=True, type=click.Choice(["queued", "leased", "pending", "running"]),
              help="Only jobs in this state (repeatable); without JOB_SET: all of the queue's jobs in these states.")
@output_option
@connection_options
@click.pass_context
def cancel(ctx, queue, job_set, job_ids, states, output, url, token):
    """Cancel a job set, some of its jobs, or a queue's jobs in given states.

    Queued jobs are cancelled at once; leased and running ones are stopped
    on their cluster (with their grace period) by the next cycle.
    """
    _remember(ctx, url, token)
    if not job_set and not job_ids and not states:
        raise CommandError("give JOB_SET, --job or --state", EXIT_USAGE)
    result = _call(ctx, lambda c: c.cancel(queue, job_set, list(job_ids) or None, list(states) or None)).raw
    rows = [{"id": i, "result": "cancelled"} for i in result["cancelled"]] + \
           [{"id": i, "result": "cancelling"} for i in result["cancelling"]]
    emit(result, output, [("id", "id"), ("result", "result")], rows)


@click.command("reprioritize")
@click.argument("queue")
@click.argument("job_set", required=False)
@click.option("--job", "job_ids", multiple=True, help="Only this job (repeatable).")
@click.option("--priority", type=int, required=True, help="The new priority (lower runs first).")
@output_option
@connection_options
@click.pass_context
def reprioritize(ctx, queue, job_set, job_ids, priority, output, url, token):
    """Change the priority of a job set's jobs (or of the given jobs) that have not finished."""
    _remember(ctx, url, token)
    if not job_set and not job_ids:
        raise CommandError("give JOB_SET or --job", EXIT_USAGE)
    changed = _call(ctx, lambda c: c.reprioritize(queue, priority, job_set, list(job_ids) or None))
    emit({"reprioritized": changed}, output, [("id", "id")], [{"id": i} for i in changed])


JOB_COLUMNS = [("id", "id"), ("queue", "queue"), ("jobSet", "jobSet"), ("clientId", "clientId"), ("state", "state"),
               ("cluster", "cluster"), ("node", "node"), ("priority", "priority"), ("reason", "reason")]
#: One job's status also says where a queued job stands in its queue.
STATUS_COLUMNS = [*JOB_COLUMNS[:5], ("position", "position"), *JOB_COLUMNS[5:]]
PENDING_COLUMNS = [("position", "position"), ("id", "id"), ("jobSet", "jobSet"), ("priority", "priority"),
                   ("reason", "reason")]


@click.command("status")
@click.argument("job_id", required=False)
@click.option("--job-set", nargs=2, metavar="QUEUE JOBSET", default=None, help="Every job of a job set instead.")
@output_option
@connection_options
@click.pass_context
def status(ctx, job_id, job_set, output, url, token):
    """A job's state (queued, leased, pending, running, succeeded, failed, preempted, cancelled) and record.

    A queued job's REASON says why it waits and POSITION where it stands in
    its queue's scheduling order (1: next), as of the last cycle. Without
    JOB_ID: the plugins failing in the last cycle (plugin, point, how many
    times, the error) and how many cycles in a row failed closed.
    """
    _remember(ctx, url, token)
    if job_set:
        rows = [dict(job.raw) for job in _call(ctx, lambda c: c.jobs(*job_set))]
        emit({"jobs": rows}, output, JOB_COLUMNS, rows)
        return
    if not job_id:
        plugins = _call(ctx, lambda c: c.service_status()).get("plugins") or {"failing": [], "failedCycles": 0}
        if output != "table":
            emit({"plugins": plugins}, output)
            return
        failing = plugins.get("failing", [])
        click.echo(f"plugins failing: {len(failing) or 'none'}"
                   + (f"; {plugins['failedCycles']} cycles in a row failed closed" if plugins.get("failedCycles")
                      else ""))
        if failing:
            _table(failing, [("plugin", "plugin"), ("point", "point"), ("failures", "failures"), ("error", "error")])
        return
    record = dict(_call(ctx, lambda c: c.status(job_id)).raw)
    emit(record, output, STATUS_COLUMNS)


@click.command("logs")
@click.argument("job_id")
@click.option("--pod", type=click.IntRange(min=0), default=0, show_default=True,
              help="Which of the job's pods (a job of several podSpecs), counting from 0.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing as the container writes, until it ends.")
@click.option("--tail", type=click.IntRange(0, 10_000), default=None, help="Only the last N lines (at most 10000).")
@click.option("--container", "-c", default=None, metavar="NAME",
              help="Which container of the pod, init containers included (default: its first container).")
@connection_options
@click.pass_context
def logs(ctx, job_id, pod, follow, tail, container, url, token):
    """Print a job's container log (its pod's first container, or --container), read from its cluster.

    Anyone who may see the job's status may read its log. A job that has
    not started, or ran on a simulated cluster, has none; a finished job's
    log is there while its cluster keeps the pod (`finishedPodRetention`,
    an hour by default). Without --tail, at most the log's first 8 MiB.
    """
    from flotilla.client import FlotillaError

    _remember(ctx, url, token)
    out = sys.stdout.buffer
    with _client(ctx) as client:
        try:
            for chunk in client.logs(job_id, pod=pod, tail=tail, follow=follow, container=container):
                out.write(chunk)
                out.flush()
        except FlotillaError as exc:
            raise _from_client_error(exc) from None
        except KeyboardInterrupt:
            return


@click.command("watch")
@click.argument("queue")
@click.argument("job_set")
@click.option("--after", type=int, default=0, show_default=True, help="Start after this event id (resume).")
@click.option("--until-done", is_flag=True,
              help="Exit when every job seen has finished: 0 if all succeeded, 5 otherwise.")
@click.option("--no-follow", is_flag=True, help="Print the events so far and exit.")
@output_option
@connection_options
@click.pass_context
def watch(ctx, queue, job_set, after, until_done, no_follow, output, url, token):
    """Print a job set's events as they happen, oldest first.

    A dropped connection is resumed after the last event printed. Output:
    one line per event (`--output json`: one JSON object per line).
    """
    from flotilla.client import FlotillaError

    _remember(ctx, url, token)
    states: dict[str, str] = {}
    with _client(ctx) as client:
        try:
            for event in client.watch(queue, job_set, after=after, follow=not no_follow):
                ev = dict(event.raw)
                if ev["kind"] in STATE_OF:
                    states[ev["jobId"]] = STATE_OF[ev["kind"]]
                elif ev["kind"] == "submitted":
                    states.setdefault(ev["jobId"], "queued")
                if output == "json":
                    click.echo(json.dumps(ev))
                elif output == "yaml":
                    click.echo(yaml.safe_dump([ev], sort_keys=False).rstrip())
                else:
                    where = "/".join(x for x in (ev.get("cluster"), ev.get("node")) if x)
                    if ev.get("podNumber") is not None:
                        where += f" pod {ev['podNumber']}"
                    click.echo(f"{ev['id']:>8}  {_fmt_time(ev['time'])}  {ev['jobId']}  {ev['kind']:<14} "
                               f"{where}{('  ' + ev['reason']) if ev.get('reason') else ''}".rstrip())
                sys.stdout.flush()
                if until_done and states and all(s in TERMINAL for s in states.values()):
                    if all(s == "succeeded" for s in states.values()):
                        return
                    sys.exit(EXIT_NOT_ALL_SUCCEEDED)
        except FlotillaError as exc:
            raise _from_client_error(exc) from None
        except KeyboardInterrupt:
            return


# -- queues ------------------------------------------------------------------------------------

_QUEUE_SETTINGS = [("name", "name"), ("weight", "weight"), ("limits", "limits"), ("owners", "owners"),
                   ("groupOwners", "groupOwners")]
QUEUE_COLUMNS = [*_QUEUE_SETTINGS, ("retryPolicy", "retryPolicy")]
#: ``queue list`` also says which queues are cordoned or retiring (and leaves the retry rules to ``describe``).
QUEUE_LIST_COLUMNS = [*_QUEUE_SETTINGS, ("namespaces", "namespaces"), ("parent", "parent"), ("cordoned", "cordoned"),
                      ("retiring", "retiring"), ("placement", "placement")]


@click.group("queue")
def queue_group():
    """Create, update, list, describe and delete queues (create/update/delete: administrators)."""


def _retry_rules(text: str | None) -> list:
    """``--retry-policy``: the rules as YAML or JSON (a list); the server checks each rule and names the bad one."""
    if text is None:
        return []
    try:
        rules = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CommandError(f"--retry-policy is not YAML or JSON: {exc}", EXIT_USAGE) from None
    if not isinstance(rules, list):
        raise CommandError("--retry-policy expects a list of rules, e.g. "
                           "'[{exitCodes: [42], action: retry, limit: 2}]'", EXIT_USAGE)
    return rules


def _queue_body(name, weight, limits, owners, group_owners, retry_policy=None) -> dict:
    parsed = {}
    for item in limits:
        key, sep, value = item.partition("=")
        try:
            parsed[key] = float(value)
        except ValueError:
            raise CommandError(f"--limit expects RESOURCE=FRACTION, e.g. cpu=0.5; got {item!r}", EXIT_USAGE) from None
        if not sep:
            raise CommandError(f"--limit expects RESOURCE=FRACTION, got {item!r}", EXIT_USAGE)
    return {"name": name, "weight": weight, "limits": parsed, "owners": list(owners), "group_owners": list(group_owners),
            "retry_policy": _retry_rules(retry_policy)}


def _queue_options(fn):
    fn = click.option("--retry-policy", "retry_policy", metavar="RULES",
                      help="Retry rules as YAML or JSON, e.g. '[{exitCodes: [42], action: retry, limit: 2}]' "
                           "(docs/policies.md); none: the defaults.")(fn)
    fn = click.option("--group-owner", "group_owners", multiple=True, help="A group that owns the queue (repeatable).")(fn)
    fn = click.option("--owner", "owners", multiple=True, help="A user who owns the queue (repeatable).")(fn)
    fn = click.option("--limit", "limits", multiple=True, help="RESOURCE=FRACTION of the pool, e.g. cpu=0.5.")(fn)
    fn = click.option("--weight", type=float, default=1.0, show_default=True, help="Fair-share weight.")(fn)
    return fn


@queue_group.command("create")
@click.argument("name")
@_queue_options
@output_option
@connection_options
@click.pass_context
def queue_create(ctx, name, weight, limits, owners, group_owners, retry_policy, output, url, token):
    """Create a queue."""
    _remember(ctx, url, token)
    body = _queue_body(name, weight, limits, owners, group_owners, retry_policy)
    emit(dict(_call(ctx, lambda c: c.create_queue(**body)).raw), output, QUEUE_COLUMNS)


@queue_group.command("update")
@click.argument("name")
@_queue_options
@output_option
@connection_options
@click.pass_context
def queue_update(ctx, name, weight, limits, owners, group_owners, retry_policy, output, url, token):
    """Replace a queue's settings."""
    _remember(ctx, url, token)
    body = _queue_body(name, weight, limits, owners, group_owners, retry_policy)
    emit(dict(_call(ctx, lambda c: c.update_queue(**body)).raw), output, QUEUE_COLUMNS)


@queue_group.command("list")
@output_option
@connection_options
@click.pass_context
def queue_list(ctx, output, url, token):
    """Every queue (any authenticated user)."""
    _remember(ctx, url, token)
    rows = [dict(queue.raw) for queue in _call(ctx, lambda c: c.queues())]
    emit({"queues": rows}, output, QUEUE_LIST_COLUMNS, rows)


@queue_group.command("describe")
@click.argument("name")
@output_option
@connection_options
@click.pass_context
def queue_describe(ctx, name, output, url, token):
    """A queue's settings and its jobs by state."""
    _remember(ctx, url, token)
    record = dict(_call(ctx, lambda c: c.queue(name)).raw)
    if output == "table":
        _table([record], QUEUE_COLUMNS)
        click.echo("")
        _table([record["jobs"]], [(s, s) for s in record["jobs"]])
    else:
        emit(record, output)


@queue_group.command("pending")
@click.argument("name")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True,
              help="At most this many jobs, from the head of the queue.")
@output_option
@connection_options
@click.pass_context
def queue_pending(ctx, name, limit, output, url, token):
    """The queue's queued jobs in scheduling order: position (1: next), id, job set, priority, why it waits.

    As of the last cycle; a job that left the queue since is not listed.
    The queue's owners and administrators only (others: 404, as for a
    missing queue).
    """
    _remember(ctx, url, token)
    result = dict(_call(ctx, lambda c: c.pending(name, limit)).raw)
    emit(result, output, PENDING_COLUMNS, result["jobs"])


@queue_group.command("delete")
@click.argument("name")
@click.option("--force", is_flag=True,
              help="cancel the queue's unfinished jobs first (running ones must stop before the queue goes)")
@connection_options
@click.pass_context
def queue_delete(ctx, name, force, url, token):
    """Delete a queue and its whole history; refused while it has jobs that have not finished."""
    _remember(ctx, url, token)
    result = _call(ctx, lambda c: c.delete_queue(name, force=force))
    click.echo(f"deleted queue {name} and its {result.jobs} jobs")


def _switch_command(group, name: str, argument: str, doc: str, call, done: str):
    """One of the on/off admin commands (cordon/uncordon, drain/uncordon): ``call(client, argument)``."""

    @group.command(name, help=doc)
    @click.argument(argument)
    @connection_options
    @click.pass_context
    def command(ctx, url, token, **args):
        _remember(ctx, url, token)
        value = args[argument]
        _call(ctx, lambda c: call(c, value))
        click.echo(f"{done} {value}")

    return command


queue_cordon = _switch_command(queue_group, "cordon", "name",
                               "Cordon a queue: it keeps accepting jobs but schedules nothing new (administrators).",
                               lambda c, name: c.cordon_queue(name), "cordoned queue")
queue_uncordon = _switch_command(queue_group, "uncordon", "name",
                                 "Uncordon a queue: its jobs are scheduled again (administrators).",
                                 lambda c, name: c.uncordon_queue(name), "uncordoned queue")


# -- nodes -------------------------------------------------------------------------------------

@click.group("node")
def node_group():
    """Drain and uncordon nodes (administrators); list the draining ones."""


def _node_name(text: str) -> tuple[str, str]:
    cluster, sep, node = text.partition("/")
    if not sep or not cluster or not node:
        raise CommandError(f"expected CLUSTER/NODE, e.g. c1/node-3; got {text!r}", EXIT_USAGE)
    return cluster, node


node_drain = _switch_command(node_group, "drain", "node",
                             "No new jobs go to CLUSTER/NODE; its running jobs finish (on Kubernetes: "
                             "spec.unschedulable). Administrators.",
                             lambda c, node: c.drain_node(*_node_name(node)), "draining")
node_uncordon = _switch_command(node_group, "uncordon", "node", "CLUSTER/NODE takes new jobs again (administrators).",
                                lambda c, node: c.uncordon_node(*_node_name(node)), "uncordoned")


@node_group.command("list")
@output_option
@connection_options
@click.pass_context
def node_list(ctx, output, url, token):
    """The draining nodes: `draining` while jobs run on them, `drained` once empty."""
    _remember(ctx, url, token)
    nodes = _call(ctx, lambda c: c.nodes())
    rows = [{"node": key, "state": state} for key, state in nodes.items()]
    emit({"nodes": nodes}, output, [("node", "node"), ("state", "state")], rows)


COMMANDS = [serve, submit, cancel, reprioritize, status, logs, watch, queue_group, node_group]


def register(main: click.Group) -> None:
    """Add the service's commands to the ``flotilla`` group."""
    for command in COMMANDS:
        main.add_command(command)
