"""``python -m flotilla.kwok.realnode start|stop|env|kubelet-stop|kubelet-start|kubelet-restart`` (what
``scripts/real-node`` runs).

``start`` and ``env`` print shell exports on stdout (``eval`` them); progress and errors go to stderr.
Exit codes: 0 done, 1 failed (the message says why), 3 ``env``: no node running.
"""

from __future__ import annotations

import sys

import click

from flotilla.kwok import realnode
from flotilla.kwok.cluster import KwokError


def _fail(exc: Exception) -> None:
    click.echo(f"real-node: {exc}", err=True)
    sys.exit(1)


@click.group()
def main() -> None:
    """The real node real-1 (containerd, runc, a kubelet) beside a KWOK cluster's API server."""


@main.command()
def start() -> None:
    """Start whatever part of the node is down, wait until real-1 is Ready; print the exports."""
    try:
        rn = realnode.start()
    except (realnode.RealNodeError, KwokError) as exc:
        _fail(exc)
    click.echo(rn.exports(), nl=False)


@main.command()
def stop() -> None:
    """Stop every process start made and remove its mounts, network, cgroups and directory."""
    problems = realnode.stop()
    for line in problems:
        click.echo(f"real-node: {line}", err=True)
    sys.exit(1 if problems else 0)


@main.command()
def env() -> None:
    """Print the exports of the running node (exit 3 when none runs)."""
    rn = realnode.node()
    if not realnode.running(rn):
        click.echo("real-node: not running (scripts/real-node start)", err=True)
        sys.exit(3)
    click.echo(rn.exports(), nl=False)


@main.command("kubelet-stop")
def kubelet_stop() -> None:
    """Stop the kubelet alone: its containers go on, the node goes NotReady (a lost node, for tests)."""
    if not realnode.stop_kubelet():
        _fail(RuntimeError("the kubelet is not running"))


@main.command("kubelet-start")
def kubelet_start() -> None:
    """Start the kubelet again and wait until real-1 is Ready."""
    try:
        realnode.kubelet_up()
    except realnode.RealNodeError as exc:
        _fail(exc)


@main.command("kubelet-restart")
@click.option("--max-pods", type=click.IntRange(min=1), default=realnode.MAX_PODS, show_default=True,
              help="The kubelet's maxPods (its config keeps it until changed again or the node is stopped).")
def kubelet_restart(max_pods: int) -> None:
    """Restart the kubelet with maxPods set; wait until real-1 is Ready with that many pod slots."""
    try:
        realnode.restart_kubelet(max_pods=max_pods)
    except realnode.RealNodeError as exc:
        _fail(exc)


if __name__ == "__main__":
    main()
