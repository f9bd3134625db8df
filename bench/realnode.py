"""Jobs on the real node ``real-1``: the time to start the node, pod start latency and end to end, through serve.

Starts the node with ``scripts/real-node start`` (``--cold``: stops it first,
so the start is timed from nothing), then a real ``flotilla serve`` with one
Kubernetes cluster entry on the node, submits ``--jobs`` jobs at once (each
one container of the local busybox image running ``true``, 50m cpu, 32Mi)
and reads every job's events back:

* pod start latency: ``leased`` (the pod is created bound to real-1) to
  ``running`` (the kubelet reported the container running);
* end to end: ``submitted`` to ``succeeded``.

Event times are the service's clock. It is a benchmark, not a test: it
prints figures and asserts nothing. Run as root::

    python bench/realnode.py --cold            # the figures of docs/performance.md
    python bench/realnode.py --jobs 50         # on a node already running
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "real-node"

CONFIG = """
priorityClasses:
  - {{name: armada-default, priority: 30000, preemptible: false}}
defaultPriorityClass: armada-default
queues:
  - {{name: bench, weight: 1}}
evict: {{probability: 0}}
cycle: {{period: 0.2s}}
server: {{listen: "127.0.0.1:{port}"}}
store: {{url: "sqlite:///{db}"}}
clusters:
  - {{name: real, kind: kubernetes, kubeconfig: {kubeconfig}, context: {context}, namespace: {namespace}}}
"""


def run_script(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    began = time.monotonic()
    result = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, cwd=REPO)
    if result.returncode != 0:
        sys.exit(f"scripts/real-node {' '.join(args)} failed ({result.returncode}):\n{result.stderr[-2000:]}")
    return result, time.monotonic() - began


def exports(text: str) -> dict[str, str]:
    return dict(line[len("export "):].split("=", 1) for line in text.splitlines() if line.startswith("export "))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def summary(values: list[float]) -> str:
    values = sorted(values)
    p95 = values[min(len(values) - 1, int(round(0.95 * (len(values) - 1))))]
    return (f"median {statistics.median(values):.2f}s, p95 {p95:.2f}s, max {values[-1]:.2f}s, "
            f"mean {statistics.fmean(values):.2f}s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=20)
    ap.add_argument("--cold", action="store_true", help="stop the node first and time its start from nothing")
    ap.add_argument("--timeout", type=float, default=300.0)
    args = ap.parse_args()

    from flotilla.kubernetes.client import ApiError, KubeClient
    from flotilla.kwok.realnode import state_dir
    from flotilla.client import Client

    if args.cold:
        run_script("stop")
    started, seconds = run_script("start")
    env = exports(started.stdout)
    phases = json.loads((state_dir() / "timings.json").read_text())["phases"]
    print(f"node start (scripts/real-node start{', from nothing' if args.cold else ''}): {seconds:.1f}s wall; "
          f"last start from nothing: {phases['total']:.1f}s = " +
          ", ".join(f"{k} {v:.1f}s" for k, v in phases.items() if k != "total"))

    namespace = f"bench-{os.getpid()}"
    kube = KubeClient.from_kubeconfig(env["KUBECONFIG"], env["FLOTILLA_REAL_NODE_CONTEXT"])
    try:
        kube.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    except ApiError as exc:
        if exc.status != 409:
            raise
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        config = Path(tmp) / "serve.yaml"
        config.write_text(CONFIG.format(port=port, db=Path(tmp) / "bench.db", kubeconfig=env["KUBECONFIG"],
                                        context=env["FLOTILLA_REAL_NODE_CONTEXT"], namespace=namespace))
        serve = subprocess.Popen([sys.executable, "-m", "flotilla.scheduler_main", "serve", "--config", str(config)],
                                 cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(Path(tmp) / "serve.log", "wb"))
        client = Client(f"http://127.0.0.1:{port}")
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    client.health()
                    break
                except Exception:  # noqa: BLE001 - not up yet
                    if time.monotonic() > deadline or serve.poll() is not None:
                        sys.exit(f"serve did not start: {(Path(tmp) / 'serve.log').read_text()[-2000:]}")
                    time.sleep(0.1)
            job = {"podSpec": {"containers": [{
                "name": "main", "image": env["FLOTILLA_REAL_NODE_IMAGE"], "imagePullPolicy": "Never",
                "command": ["true"], "resources": {"limits": {"cpu": "50m", "memory": "32Mi"}}}]}}
            ids = client.submit({"queue": "bench", "jobSetId": "bench", "jobs": [job] * args.jobs}).ids
            times: dict[str, dict[str, float]] = {i: {} for i in ids}
            deadline = time.monotonic() + args.timeout
            for event in client.watch("bench", "bench"):
                times[event.job_id].setdefault(event.kind, event.time)
                if all("succeeded" in t or "failed" in t for t in times.values()):
                    break
                if time.monotonic() > deadline:
                    sys.exit("timed out waiting for the jobs")
        finally:
            client.close()
            serve.terminate()
            serve.wait(30)
    failed = [i for i, t in times.items() if "failed" in t]
    done = [t for t in times.values() if "succeeded" in t]
    print(f"{args.jobs} jobs on real-1 (`true`, 50m cpu, 32Mi), submitted at once: {len(done)} succeeded, "
          f"{len(failed)} failed")
    print("pod start latency (leased: pod created bound -> running): "
          + summary([t["running"] - t["leased"] for t in done]))
    print("end to end (submitted -> succeeded): " + summary([t["succeeded"] - t["submitted"] for t in done]))
    last = max(t["succeeded"] for t in done) - min(t["submitted"] for t in done)
    print(f"all {len(done)} done {last:.2f}s after the submission")
    for item in kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"]:
        kube.delete(f"/api/v1/namespaces/{namespace}/pods/{item['metadata']['name']}", {"gracePeriodSeconds": 0})
    kube.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
