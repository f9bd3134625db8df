"""Pods bound per second for pods made in the cluster (``kwok_throughput.py --in-cluster``): kube-scheduler,
no scheduler at all, and Flotilla, on one KWOK cluster, in one run.

A benchmark, not a test. One fake cluster (a real etcd and kube-apiserver,
kwok-controller as the kubelets, kube-controller-manager's Job controller,
garbage collector and pod GC) with 1,000 nodes of 32 cores. Every run's
10,000 pods come from 100 ``batch/v1`` Jobs of 100 pods (one core each, in
10 queues by their ``flotilla.io/queue`` label) in a namespace of the
run's own, made by the Job controller, as ``kubectl create`` of those Jobs
makes them. The pods of a run are all made, pending, before t0; pod
creation is the Job controller's work and is reported apart
(``jobPodsPerSecond``), not counted in the figures. One watch on the API
server per run (not the scheduler's own view) times every pod: when it is
first seen bound, when first seen Running.

A run's pods keep running after it (deleting 10,000 pods that carry the Job
controller's finalizer costs the API server more than making them): the
nodes have room for the three runs (30,000 of 32,000 cores), and each run
schedules beside the pods of those before it. Flotilla runs last, so it
works on the fullest cluster and sees the most pods.

* kube-scheduler (same Kubernetes version, client limits 5,000/10,000 QPS
  as scheduler_perf does): pods with ``schedulerName: default-scheduler``;
  t0 is its start.
* No scheduler, the ceiling: the bench's own writers (4 processes of 8
  threads, as many requests in flight as Flotilla's 32 workers) POST each
  pod's ``pods/binding`` (to nodes round-robin) as fast as the API server
  takes them; t0 is their start. No scheduler, which must bind each pod at
  least once, binds faster here.
* Flotilla: pods with ``schedulerName: flotilla``; at t0 ``flotilla serve``
  starts (one process, SQLite store) with the cluster in its config and the
  10 queues allowing the namespace; it takes the pods in, stores them as
  jobs, schedules and binds them.

Pods bound per second is counted from the first bind to the last (so a
scheduler's start-up is not counted against it); also from t0. CPU seconds
per component come from /proc over each run.

    python bench/kwok_throughput.py --in-cluster                 # 1,000 nodes, 100 Jobs x 100 pods
    python bench/kwok_throughput.py --in-cluster --nodes 100 --jobs 1000 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kwok_throughput import CpuMeter, RecorderProcess, cpu_seconds, start_kube_scheduler, stop_process  # noqa: E402

from flotilla.kubernetes.client import KubeClient, pod_path  # noqa: E402
from flotilla.kwok import cluster as kwok  # noqa: E402

IMAGE = "registry.k8s.io/pause:3.10"


#: The runs, in order: run name -> (key of the figures, the pods' schedulerName).
RUNS = {"kube-scheduler": ("kubeScheduler", "default-scheduler"), "ceiling": ("ceiling", "nobody"),
        "flotilla": ("flotilla", "flotilla")}


class ClusterCpu(CpuMeter):
    COMPONENTS = ("kube-apiserver", "etcd", "kwok-controller", "kube-controller-manager")


def namespace_of(run: str) -> str:
    return f"bench-{run}"


def job_manifest(run: str, index: int, pods: int, queues: int, scheduler: str) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"{run}-{index:03d}", "namespace": namespace_of(run), "labels": {"bench-run": run}},
            "spec": {"parallelism": pods, "completions": pods, "backoffLimit": pods,
                     "template": {
                         "metadata": {"labels": {"bench-run": run, "flotilla.io/queue": f"q{index % queues}"}},
                         "spec": {"schedulerName": scheduler, "restartPolicy": "Never",
                                  "terminationGracePeriodSeconds": 0,
                                  "containers": [{"name": "main", "image": IMAGE,
                                                  "resources": {"requests": {"cpu": "1"}}}]}}}}


def make_pods(client: KubeClient, recorder: RecorderProcess, run: str, jobs: int, pods: int, queues: int,
              scheduler: str, timeout: float) -> dict:
    """Create the run's Jobs and wait until the Job controller has made every pod (pending: nobody binds yet)."""
    count = jobs * pods
    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: client.post(f"/apis/batch/v1/namespaces/{namespace_of(run)}/jobs",
                                            job_manifest(run, i, pods, queues, scheduler), parse=False),
                      range(jobs)))
    print(f"{run}: {jobs} Jobs of {pods} pods created; the Job controller makes their pods ...", file=sys.stderr)
    if not recorder.wait("seen", count, timeout):
        raise SystemExit(f"{run}: the Job controller made {recorder.counts()['seen']} of {count} pods in {timeout}s")
    made = time.monotonic() - started
    print(f"  {count} pods pending after {made:.1f}s ({count / made:.0f}/s)", file=sys.stderr)
    return {"jobPodsSeconds": round(made, 1), "jobPodsPerSecond": round(count / made, 1)}


def run_kube_scheduler(cluster: kwok.FakeCluster, bin_dir: Path, recorder: RecorderProcess, count: int,
                       timeout: float) -> dict:
    meter = ClusterCpu(cluster)
    t0 = time.time()
    proc, log = start_kube_scheduler(cluster, bin_dir)
    try:
        recorder.wait("running", count, timeout)
        cpu = meter.stop(**{"kube-scheduler": cpu_seconds(proc.pid)})
    finally:
        stop_process(proc)
    stats = recorder.stats(t0, count)
    stats["cpuSeconds"] = cpu
    stats["log"] = str(log)
    return stats


def _bind_part(kubeconfig: str, context: str, namespace: str, pods: list[tuple[str, str]], first_node: int,
               nodes: int, threads: int) -> float:
    """One ceiling writer process: bind its pods to nodes round-robin; its CPU seconds."""
    client = KubeClient.from_kubeconfig(kubeconfig, context, pool_size=threads + 4)
    started = time.process_time()

    def bind(item):
        i, (name, uid) = item
        client.post(pod_path(namespace, name) + "/binding", {
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": f"node-{1 + (first_node + i) % nodes}"}},
            parse=False)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(bind, enumerate(pods)))
    client.close()
    return time.process_time() - started


def run_ceiling(cluster: kwok.FakeCluster, client: KubeClient, recorder: RecorderProcess, count: int, nodes: int,
                processes: int, threads: int, timeout: float) -> dict:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    namespace = namespace_of("ceiling")
    pending = sorted((p["metadata"]["name"], p["metadata"]["uid"])
                     for p in client.request("GET", pod_path(namespace), timeout=120)["items"])
    parts = [pending[i::processes] for i in range(processes)]
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(processes, mp_context=ctx) as pool:
        list(pool.map(time.sleep, [0.5] * processes))   # interpreters started before t0
        meter = ClusterCpu(cluster)
        t0 = time.time()
        cpus = list(pool.map(_bind_part, *zip(*[(cluster.kubeconfig, cluster.context, namespace, part, i, nodes,
                                                   threads) for i, part in enumerate(parts)])))
    recorder.wait("running", count, timeout)
    stats = recorder.stats(t0, count)
    stats["cpuSeconds"] = meter.stop(writers=sum(cpus))
    return stats


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def flotilla_config(cluster: kwok.FakeCluster, queues: int, workdir: Path, period: float) -> Path:
    namespace = namespace_of("flotilla")
    queue_lines = "\n".join(f"  - {{name: q{i}, weight: 1, namespaces: [{namespace}]}}" for i in range(queues))
    path = workdir / "flotilla.yaml"
    path.write_text(f"""queues:
{queue_lines}
cycle: {{period: {period}}}
store: {{url: "sqlite:///{workdir / 'store.db'}"}}
clusters:
  - {{name: bench, kind: kubernetes, kubeconfig: {cluster.kubeconfig}, context: {cluster.context}, namespace: {namespace}}}
""")
    return path


def run_flotilla(cluster: kwok.FakeCluster, recorder: RecorderProcess, count: int, queues: int, period: float,
                 timeout: float) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix="flotilla-bench-"))
    config = flotilla_config(cluster, queues, workdir, period)
    log = workdir / "serve.log"
    meter = ClusterCpu(cluster)
    t0 = time.time()
    with open(log, "wb") as out:
        port = free_port()
        # Each cycle's phases and counts go to the log (service.cycle lines, JSON) for reading afterwards.
        proc = subprocess.Popen([sys.executable, "-m", "flotilla.scheduler_main", "--log-level", "info", "--log-json",
                                 "serve", "--config", str(config),
                                 "--listen", f"127.0.0.1:{port}"],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=str(Path(__file__).resolve().parent.parent))
        try:
            done = recorder.wait("running", count, timeout)
            cpu = meter.stop(flotilla=cpu_seconds(proc.pid))
            phases = cycle_phases(port, workdir / "metrics.txt")
            if not done and proc.poll() is not None:
                print(f"  flotilla serve ended ({proc.returncode}); see {log}", file=sys.stderr)
        finally:
            stop_process(proc)
    stats = recorder.stats(t0, count)
    stats["cpuSeconds"] = cpu
    stats["cyclePhaseSeconds"] = phases
    stats["log"] = str(log)
    return stats


def cycle_phases(port: int, path: Path) -> dict[str, float]:
    """Seconds spent in each phase of Flotilla's cycles (its /metrics), the whole scrape kept in ``path``."""
    import urllib.request

    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    except OSError as exc:
        return {"error": str(exc)}
    path.write_text(text)
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("flotilla_cycle_phase_seconds_sum{"):
            phase = line.split('phase="', 1)[1].split('"', 1)[0]
            out[phase] = round(float(line.rsplit(" ", 1)[1]), 2)
        elif line.startswith(("flotilla_cycle_seconds_sum", "flotilla_cycle_seconds_count")):
            out[line.split(" ", 1)[0].replace("flotilla_cycle_seconds_", "cycles_")] = round(
                float(line.rsplit(" ", 1)[1]), 2)
    return out


def install_crds(client: KubeClient) -> None:
    """deploy/crds/ (Volcano's PodGroup), as a cluster Flotilla serves has them."""
    import yaml

    crds = Path(__file__).resolve().parent.parent / "deploy" / "crds"
    for path in sorted(crds.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                client.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", doc, parse=False)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="kwok_throughput.py --in-cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("--in-cluster", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=10000, help="pods in all (made by --job-count Jobs)")
    parser.add_argument("--job-count", type=int, default=100, help="batch/v1 Jobs the pods come from")
    parser.add_argument("--queues", type=int, default=10)
    parser.add_argument("--workers", type=int, default=32, help="requests the ceiling's writers keep in flight")
    parser.add_argument("--period", type=float, default=1.0, help="Flotilla's cycle period, seconds")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--name", default=f"flbench-ic-{os.getpid()}")
    parser.add_argument("--keep", action="store_true", help="leave the fake cluster running")
    parser.add_argument("--skip", action="append", default=[], choices=["kube-scheduler", "ceiling", "flotilla"],
                        help="leave a run out (repeatable)")
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args(argv)
    if args.jobs % args.job_count:
        parser.error(f"--jobs {args.jobs} is not a multiple of --job-count {args.job_count}")
    per_job = args.jobs // args.job_count
    runs = len([run for run in RUNS if run not in args.skip])
    if runs * args.jobs > args.nodes * 32:
        parser.error(f"{runs} runs of {args.jobs} one-core pods do not fit on {args.nodes} nodes of 32 cores")

    bin_dir = kwok.find_bin_dir()
    template = Path(tempfile.mkdtemp(prefix="flotilla-bench-")) / "node.yaml"
    template.write_text("namePrefix: node\nresources: {cpu: 32, memory: 128Gi, pods: 110}\n")
    kubeconfig = str(template.parent / "kubeconfig")
    started = time.monotonic()
    print(f"starting fake cluster {args.name} with {args.nodes} nodes and the Job controller ...", file=sys.stderr)
    cluster = kwok.up(args.name, args.nodes, template, kubeconfig=kubeconfig, bin_dir=bin_dir, timeout=300,
                      controllers=kwok.JOB_CONTROLLERS)
    print(f"  up in {time.monotonic() - started:.1f}s", file=sys.stderr)
    client = cluster.client(pool_size=args.workers + 8)
    install_crds(client)
    results: dict = {"nodes": args.nodes, "pods": args.jobs, "jobs": args.job_count, "queues": args.queues,
                     "cpus": os.cpu_count(), "podsFrom": "batch/v1 Jobs, made by the Job controller",
                     "order": [run for run in RUNS if run not in args.skip]}
    try:
        for run in results["order"]:
            key, scheduler = RUNS[run]
            namespace = namespace_of(run)
            client.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": namespace}})
            recorder = RecorderProcess(cluster, namespace)
            try:
                made = make_pods(client, recorder, run, args.job_count, per_job, args.queues, scheduler, args.timeout)
                print(f"{run}: binding {args.jobs} pods ...", file=sys.stderr)
                if key == "kubeScheduler":
                    stats = run_kube_scheduler(cluster, bin_dir, recorder, args.jobs, args.timeout)
                elif key == "ceiling":
                    processes = 4
                    stats = run_ceiling(cluster, client, recorder, args.jobs, args.nodes, processes,
                                        max(1, args.workers // processes), args.timeout)
                else:
                    stats = run_flotilla(cluster, recorder, args.jobs, args.queues, args.period, args.timeout)
            finally:
                recorder.close()
            results[key] = {**made, **stats}
            print(json.dumps(results[key]), file=sys.stderr)
    finally:
        client.close()
        if not args.keep:
            kwok.down(args.name, kubeconfig=kubeconfig, bin_dir=bin_dir)
    report(results, args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    done = [results[key] for key in ("kubeScheduler", "ceiling", "flotilla") if key in results]
    return 0 if done and all(run.get("complete") for run in done) else 1


def report(results: dict, args) -> None:
    columns = [(key, label) for key, label in (("flotilla", "flotilla"), ("kubeScheduler", "kube-scheduler"),
                                               ("ceiling", "no scheduler")) if key in results]
    print(f"\n{results['pods']} pods from {results['jobs']} batch/v1 Jobs (Job controller) in {results['queues']} "
          f"queues on {results['nodes']} KWOK nodes ({results['cpus']} cores, one API server); all pending at t0")
    print(f"{'':44}" + "".join(f" {label:>14}" for _, label in columns))
    rows = [("pods bound per second (first to last bind)", "podsBoundPerSecond", "{:.0f}"),
            ("pods bound per second (from t0)", "podsBoundPerSecondFromT0", "{:.0f}"),
            ("first bind after t0 (s)", "firstBindAfter", "{:.2f}"),
            ("t0 to last pod Running (s)", "makespan", "{:.2f}"),
            ("Job controller's pods per second (before t0)", "jobPodsPerSecond", "{:.0f}")]
    for label, key, fmt in rows:
        values = [results[k].get(key) for k, _ in columns]
        print(f"{label:44}" + "".join(f" {fmt.format(v) if v is not None else '-':>14}" for v in values))
    for component in ("kube-apiserver", "etcd", "kwok-controller", "kube-controller-manager",
                      ("flotilla", "kube-scheduler", "writers")):
        names = component if isinstance(component, tuple) else (component,)
        label = "the scheduler (or writers)" if isinstance(component, tuple) else component
        values = [next((results[k]["cpuSeconds"][n] for n in names if n in results[k].get("cpuSeconds", {})), None)
                  for k, _ in columns]
        print(f"{'CPU s: ' + label:44}" + "".join(f" {v if v is not None else '-':>14}" for v in values))
    f = results.get("flotilla", {}).get("podsBoundPerSecond")
    if f:
        ratios = {}
        for key, label in (("kubeScheduler", "kube-scheduler"), ("ceiling", "the ceiling")):
            other = results.get(key, {}).get("podsBoundPerSecond")
            if other:
                ratios[key] = round(f / other, 3)
                print(f"Flotilla / {label}: {f / other:.2f}")
        results["ratios"] = ratios


if __name__ == "__main__":
    sys.exit(main())
