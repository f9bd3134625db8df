"""``flotilla kwok up|down|stop|start``: fake Kubernetes clusters for trying Flotilla on thousands of nodes."""

from __future__ import annotations

import time

import click


def register(main: click.Group) -> None:
    main.add_command(kwok)


def _fail(exc: Exception):
    from flotilla.scheduler_main import UserError
    raise UserError(str(exc)) from None


@click.group()
def kwok() -> None:
    """Fake Kubernetes clusters (KWOK) built from this project's own binaries.

    A fake cluster is a real etcd and kube-apiserver with kwok-controller
    pretending to be the kubelets of N nodes: pods bound to a node become
    Running at once and Succeeded after the duration Flotilla writes on them.
    The binaries come from `scripts/k8s-tools` (or FLOTILLA_K8S_BIN); nothing
    is downloaded.

    \b
    Example:
      flotilla kwok up --name kwok-1 --nodes 1000
      flotilla simulate --real-time --config examples/kwok.yaml --workload W.yaml
      flotilla kwok down --name kwok-1
    """


@kwok.command()
@click.option("--name", required=True, help="Cluster name; the kubeconfig context is kwok-NAME.")
@click.option("--nodes", type=click.IntRange(min=0), default=0, show_default=True, help="Fake nodes to create.")
@click.option("--node-template", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A Node manifest (kind: Node; {index} in metadata.name becomes 1..N) or the short form "
                   "{namePrefix, resources, labels, taints}. Default: 32 cpu, 128Gi memory, 110 pods.")
@click.option("--kubeconfig", default="~/.kube/config", show_default=True,
              help="Kubeconfig file the cluster's context is added to.")
@click.option("--timeout", type=float, default=180, show_default=True, help="Seconds to wait for the cluster.")
@click.option("--controllers", default="", metavar="LIST",
              help="Also run kube-controller-manager with these controllers (comma-separated; 'jobs' is "
                   "job,garbagecollector,podgc: kubectl-created Jobs make their pods). Only when creating.")
def up(name, nodes, node_template, kubeconfig, timeout, controllers):
    """Start fake cluster NAME (etcd, kube-apiserver, kwok-controller) with N nodes; print its context.

    Running it again on an existing cluster starts whatever is stopped and
    adds nodes up to --nodes. stdout is the kubeconfig context alone, for
    `context: ...` in a Flotilla config.
    """
    from flotilla.kwok.cluster import JOB_CONTROLLERS, KwokError
    from flotilla.kwok.cluster import up as kwok_up

    wanted: list[str] = []
    for item in filter(None, (c.strip() for c in controllers.split(","))):
        wanted += JOB_CONTROLLERS if item == "jobs" else [item]
    started = time.monotonic()
    try:
        cluster = kwok_up(name, nodes, node_template, kubeconfig=kubeconfig, timeout=timeout,
                          controllers=tuple(dict.fromkeys(wanted)))
    except (KwokError, OSError) as exc:
        _fail(exc)
    click.echo(f"cluster {name}: {nodes} nodes ready in {time.monotonic() - started:.1f}s; "
               f"kubeconfig {cluster.kubeconfig}", err=True)
    click.echo(cluster.context)


@kwok.command()
@click.option("--name", required=True, help="Cluster name.")
@click.option("--kubeconfig", default="~/.kube/config", show_default=True,
              help="Kubeconfig file to remove the cluster's context from.")
def down(name, kubeconfig):
    """Delete fake cluster NAME: its processes, its etcd data and its kubeconfig context."""
    from flotilla.kwok.cluster import KwokError
    from flotilla.kwok.cluster import down as kwok_down

    try:
        existed = kwok_down(name, kubeconfig=kubeconfig)
    except (KwokError, OSError) as exc:
        _fail(exc)
    click.echo(f"cluster {name}: {'deleted' if existed else 'not found, nothing to do'}", err=True)


@kwok.command()
@click.option("--name", required=True, help="Cluster name.")
@click.option("--component", default="kube-apiserver", show_default=True,
              type=click.Choice(["kube-apiserver", "etcd", "kwok-controller"]),
              help="Which process to stop (to try what an outage does to the scheduler).")
def stop(name, component):
    """Stop one component of fake cluster NAME; `flotilla kwok start` brings it back."""
    from flotilla.kwok.cluster import stop_component

    if not stop_component(name, component):
        _fail(RuntimeError(f"cluster {name}: {component} is not running"))
    click.echo(f"cluster {name}: {component} stopped", err=True)


@kwok.command()
@click.option("--name", required=True, help="Cluster name.")
def start(name):
    """Start whatever components of fake cluster NAME are stopped."""
    from flotilla.kwok.cluster import KwokError
    from flotilla.kwok.cluster import start as kwok_start

    try:
        kwok_start(name)
    except (KwokError, OSError) as exc:
        _fail(exc)
    click.echo(f"cluster {name}: started", err=True)
