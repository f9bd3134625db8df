"""What the Flotilla-against-kube-scheduler benches on one KWOK cluster share: their options, the fake cluster's
nodes, its namespace.

``bench/kwok_podrules.py`` and ``bench/kwok_volumes.py`` both start one fake
cluster of ``--nodes`` nodes of 32 cores, 128 GiB and 110 pod slots, make the
bench namespace, run kube-scheduler and then Flotilla on it (either may be
skipped), and take it down unless ``--keep``. Each adds its own options to
:func:`parser`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kwok_throughput import NAMESPACE  # noqa: E402

from flotilla.kubernetes.client import ApiError  # noqa: E402
from flotilla.kwok import cluster as kwok  # noqa: E402

#: The fake nodes every run makes: one shape, so the two schedulers and the benches compare alike.
NODE_TEMPLATE = "namePrefix: node\nresources: {cpu: 32, memory: 128Gi, pods: 110}\n"


def parser(doc: str, name_prefix: str, timeout: float) -> argparse.ArgumentParser:
    """The options every such bench has (size, Flotilla's queues, workers and cycle period, which half to run,
    the cluster's name, where to write the figures); the bench adds its own."""
    out = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    out.add_argument("--nodes", type=int, default=1000)
    out.add_argument("--jobs", type=int, default=5000)
    out.add_argument("--queues", type=int, default=10)
    out.add_argument("--workers", type=int, default=32)
    out.add_argument("--period", type=float, default=1.0, help="Flotilla's cycle period, seconds")
    out.add_argument("--timeout", type=float, default=timeout, help="seconds each half may take to bind its pods")
    out.add_argument("--name", default=f"{name_prefix}-{os.getpid()}")
    out.add_argument("--keep", action="store_true", help="leave the fake cluster running")
    out.add_argument("--json", help="write the figures here too")
    out.add_argument("--skip-kube-scheduler", action="store_true")
    out.add_argument("--skip-flotilla", action="store_true")
    return out


@dataclass
class Bench:
    """A started fake cluster and what taking it down needs."""
    cluster: kwok.FakeCluster
    kubeconfig: str
    bin_dir: Path
    name: str
    keep: bool

    def down(self) -> None:
        if not self.keep:
            kwok.down(self.name, kubeconfig=self.kubeconfig, bin_dir=self.bin_dir)


def start(args: argparse.Namespace, **up) -> Bench:
    """The fake cluster of ``args.nodes`` nodes (``up``: more of :func:`flotilla.kwok.cluster.up`'s arguments,
    such as kube-controller-manager's controllers), with the bench namespace made."""
    bin_dir = kwok.find_bin_dir()
    template = Path(tempfile.mkdtemp(prefix="flotilla-bench-")) / "node.yaml"
    template.write_text(NODE_TEMPLATE)
    kubeconfig = str(template.parent / "kubeconfig")
    print(f"starting fake cluster {args.name} with {args.nodes} nodes ...", file=sys.stderr)
    cluster = kwok.up(args.name, args.nodes, template, kubeconfig=kubeconfig, bin_dir=bin_dir, timeout=300, **up)
    bench = Bench(cluster, kubeconfig, bin_dir, args.name, args.keep)
    client = cluster.client()
    try:
        client.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    except ApiError as exc:
        if exc.status != 409:
            bench.down()
            raise
    finally:
        client.close()
    return bench
