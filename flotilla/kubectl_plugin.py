"""``kubectl flotilla``: the ``flotilla`` CLI as a kubectl plugin (the ``kubectl-flotilla`` console script).

kubectl runs ``kubectl-flotilla`` found on PATH for ``kubectl flotilla ...``.
The commands are the CLI's own; what the plugin adds is the queue of the
namespace one works in: when the kubeconfig's current context names a
namespace (``default`` when it names none) whose ``flotilla.io/queue`` label
names a queue (the label in-cluster pods of that namespace are queued by,
docs/kubernetes.md), that queue is ``FLOTILLA_QUEUE``, so ``kubectl flotilla
submit`` of a job file without ``queue:`` submits there. An explicit
``FLOTILLA_QUEUE`` wins; a kubeconfig that cannot be read or an API server
that cannot be reached leaves it unset, and says so on stderr.
"""

from __future__ import annotations

import os
import sys

QUEUE_LABEL = "flotilla.io/queue"


def current_namespace(kubeconfig: str | None = None) -> tuple[str | None, str]:
    """The kubeconfig's current context and the namespace it names (``default`` when none)."""
    from kubernetes import config as k8s_config

    _, active = k8s_config.list_kube_config_contexts(config_file=kubeconfig)
    return active.get("name"), (active.get("context") or {}).get("namespace") or "default"


def namespace_queue(kubeconfig: str | None = None) -> tuple[str, str | None]:
    """The current namespace and the queue its ``flotilla.io/queue`` label names (None: no label)."""
    from flotilla.kubernetes.client import KubeClient

    context, namespace = current_namespace(kubeconfig)
    client = KubeClient.from_kubeconfig(kubeconfig, context)
    try:
        labels = client.get(f"/api/v1/namespaces/{namespace}")["metadata"].get("labels") or {}
    finally:
        client.close()
    return namespace, labels.get(QUEUE_LABEL)


def main(argv: list[str] | None = None) -> None:
    if not os.environ.get("FLOTILLA_QUEUE"):
        try:
            _, queue = namespace_queue(os.environ.get("KUBECONFIG") or None)
        except Exception as exc:  # no kubeconfig, an API server that does not answer: no queue from it
            print(f"kubectl flotilla: no queue from the current namespace: {exc}", file=sys.stderr)
            queue = None
        if queue:
            os.environ["FLOTILLA_QUEUE"] = queue
    from flotilla.scheduler_main import main as flotilla

    flotilla.main(args=argv, prog_name="kubectl flotilla")


if __name__ == "__main__":
    main()
