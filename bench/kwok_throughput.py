"""Pods bound per second and submission-to-running latency, Flotilla vs kube-scheduler, on one KWOK cluster.

A benchmark, not a test. One fake cluster (a real etcd and kube-apiserver,
kwok-controller as the kubelets) with 1,000 nodes of 32 cores; 10,000
single-pod jobs of one core in 10 queues; both schedulers talk to the same
API server, and one watch on the API server (not either scheduler's own
view) times every pod: when it is first seen bound to a node, when it is
first seen Running.

* kube-scheduler (built from the same Kubernetes version; client QPS limits
  raised to 5,000/10,000 as scheduler_perf does, so its default 50 QPS is
  not what is measured), two ways:
  A. the 10,000 pods are created pending with its scheduler name while it is
     not running; t0 is when it starts;
  B. it runs first, and the 10,000 pods are created (16 threads, protobuf)
     from t0 on: a user submits to kube-scheduler by creating pods, so this
     is the same submission as Flotilla's.
* Flotilla: at t0 the 10,000 jobs are submitted to its queues and the
  scheduler cycles (``cycle.period``); the lease creates each pod already
  bound to its node.
* No scheduler at all, the machine's ceiling: the bench's own writers (4
  processes of 8 threads, protobuf, as many requests in flight as
  Flotilla's 32 workers) create the 10,000 pods already bound to nodes
  picked round-robin, as fast as the API server takes them; once with
  kwok-controller marking them Running (what every run above pays), once
  with kwok-controller stopped (the API server alone). No scheduler, which
  must write each pod at least once, can bind faster than this here.

Pods bound per second is counted from the first bind to the last (so a
scheduler's start-up is not counted against it); latency is from t0 (every
job is waiting at t0) to the pod's Running; makespan is t0 to the last pod
Running. CPU seconds per component (API server, etcd, kwok-controller, the
scheduler or writers) are read from /proc over each run. Prints every
figure, and Flotilla's ratio to each baseline, in one run.

    python bench/kwok_throughput.py                       # 1,000 nodes, 10,000 jobs
    python bench/kwok_throughput.py --nodes 100 --jobs 1000 --json out.json
    python bench/kwok_throughput.py --pod-spec examples/jobs/train.yaml   # every run's pods: that podSpec
    python bench/kwok_throughput.py --in-cluster          # pods from 100 batch/v1 Jobs (bench/kwok_incluster.py)

With ``--pod-spec`` (a job file; its first job), every run creates that
job's pod instead of a one-container stand-in: its podSpec checked as at
submission, its labels and annotations, the scheduler's fields set on top
(Flotilla's lease gets it as the service hands it over, the baselines'
writers build the same pod); each job requests what that podSpec requests.
Such pods go as JSON (the protobuf encoder covers only stand-in pods).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flotilla.core.model import Job  # noqa: E402
from flotilla.kubernetes.client import ApiError, KubeClient, KubeError, pod_path  # noqa: E402
from flotilla.kubernetes.pods import PodSettings, pod_manifest  # noqa: E402
from flotilla.kwok import cluster as kwok  # noqa: E402

NAMESPACE = "bench"


class Recorder:
    """One raw watch on the namespace's pods: first time bound, first time Running, per pod name.

    Runs in a process of its own (:class:`RecorderProcess`), so that parsing
    every watch event does not take the interpreter lock from Flotilla's
    scheduler, which runs in the benchmark's process.
    """

    def __init__(self, client: KubeClient, namespace: str):
        self.client = client
        self.namespace = namespace
        self.bound: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.seen: set[str] = set()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        listing = client.get(pod_path(namespace))
        self.rv = listing["metadata"]["resourceVersion"]
        for pod in listing["items"]:
            self._record(pod, time.time())
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _record(self, pod: dict, now: float) -> None:
        name = pod["metadata"]["name"]
        with self.lock:
            self.seen.add(name)
            if pod["spec"].get("nodeName") and name not in self.bound:
                self.bound[name] = now
            if (pod.get("status") or {}).get("phase") == "Running" and name not in self.running:
                self.running[name] = now

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                for event in self.client.watch(pod_path(self.namespace), self.rv, 30, self.stop):
                    obj = event["object"]
                    self.rv = obj["metadata"].get("resourceVersion", self.rv)
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._record(obj, time.time())
                    elif event["type"] == "DELETED":
                        with self.lock:
                            self.seen.discard(obj["metadata"]["name"])
            except KubeError as exc:
                print(f"  recorder: {exc}; re-watching", file=sys.stderr)
                time.sleep(0.2)

    def reset(self) -> None:
        with self.lock:
            self.bound.clear()
            self.running.clear()

    def counts(self) -> dict[str, int]:
        with self.lock:
            return {"seen": len(self.seen), "bound": len(self.bound), "running": len(self.running)}

    def stats(self, t0: float, count: int) -> dict:
        with self.lock:
            bound = sorted(self.bound.values())
            running = sorted(self.running.values())
        out = {"bound": len(bound), "running": len(running)}
        if len(bound) >= 2:
            span = bound[-1] - bound[0]
            out["podsBoundPerSecond"] = round((len(bound) - 1) / span, 1) if span > 0 else float("inf")
            out["podsBoundPerSecondFromT0"] = round(len(bound) / (bound[-1] - t0), 1)
            out["firstBindAfter"] = round(bound[0] - t0, 3)
            out["lastBindAfter"] = round(bound[-1] - t0, 3)
        if running:
            latencies = [t - t0 for t in running]
            out["latencyP50"] = round(statistics.quantiles(latencies, n=100)[49], 3) if len(latencies) > 1 else latencies[0]
            out["latencyP95"] = round(statistics.quantiles(latencies, n=100)[94], 3) if len(latencies) > 1 else latencies[0]
            out["makespan"] = round(running[-1] - t0, 3)
        out["complete"] = len(running) >= count
        return out


def _recorder_main(kubeconfig: str, context: str, namespace: str, conn) -> None:
    recorder = Recorder(KubeClient.from_kubeconfig(kubeconfig, context, timeout=60.0), namespace)
    while True:
        command, args = conn.recv()
        if command == "stop":
            recorder.stop.set()
            conn.send(None)
            return
        conn.send(getattr(recorder, command)(*args))


class RecorderProcess:
    """The recorder in a child process; same methods, answered over a pipe."""

    def __init__(self, cluster: kwok.FakeCluster, namespace: str):
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_recorder_main, args=(cluster.kubeconfig, cluster.context, namespace, child),
                                   daemon=True)
        self.process.start()

    def _call(self, command: str, *args):
        self.conn.send((command, args))
        return self.conn.recv()

    def counts(self) -> dict[str, int]:
        return self._call("counts")

    def reset(self) -> None:
        self._call("reset")

    def stats(self, t0: float, count: int) -> dict:
        return self._call("stats", t0, count)

    def wait(self, what: str, count: int, timeout: float, progress: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        last = time.monotonic()
        while time.monotonic() < deadline:
            n = self.counts()[what]
            if n >= count:
                return True
            if time.monotonic() - last > progress:
                print(f"  ... {what}: {n}/{count}", file=sys.stderr)
                last = time.monotonic()
            time.sleep(0.1)
        return False

    def close(self) -> None:
        self._call("stop")
        self.process.join(10)


def cpu_seconds(pid: int | None) -> float | None:
    """User plus system CPU seconds a process has used so far (Linux /proc), None when unknown."""
    if not pid:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU seconds each of the fake cluster's components (and any extra process) used between start and stop."""

    COMPONENTS = ("kube-apiserver", "etcd", "kwok-controller")

    def __init__(self, cluster: kwok.FakeCluster):
        self.pids = {c: kwok.component_pid(cluster.name, c) for c in self.COMPONENTS}
        self.start = {c: cpu_seconds(pid) for c, pid in self.pids.items()}

    def stop(self, **extra: float | None) -> dict[str, float]:
        out = {}
        for c, pid in self.pids.items():
            now = cpu_seconds(pid)
            if now is not None and self.start[c] is not None:
                out[c] = round(now - self.start[c], 1)
        out.update({k: round(v, 1) for k, v in extra.items() if v is not None})
        return out


#: The pod every run creates (``--pod-spec``); None: the one-container stand-in.
TEMPLATE = None


def load_template(path: str):
    """The first job of a job file as a :class:`PodTemplate`, its podSpec validated as at submission."""
    import yaml

    from flotilla.core.backend import PodTemplate
    from flotilla.kubernetes.podspec import stored_pod_spec
    from flotilla.service.jobspec import parse_file

    item = parse_file(yaml.safe_load(Path(path).read_text())).jobs[0]
    return PodTemplate(stored_pod_spec(item.podSpec if item.podSpec is not None else item.podSpecs[0]), None,
                       dict(item.labels), dict(item.annotations), 0)


def manifest(job: Job, node: str | None, settings: PodSettings) -> dict:
    return pod_manifest(job, node, 0, settings, template=TEMPLATE)


def jobs_for(count: int, queues: int) -> list[Job]:
    from flotilla.kubernetes.pods import pod_requests
    requests = {"cpu": 1000} if TEMPLATE is None else pod_requests({"spec": TEMPLATE.pod_spec})
    return [Job(f"job-{i:05d}", f"q{i % queues}", job_set=f"set-{i % queues}", priority_class="armada-default",
                submitted=float(i), requests=requests) for i in range(count)]


def delete_all(client: KubeClient, recorder: RecorderProcess, workers: int, timeout: float = 300) -> None:
    """Delete every pod of the namespace (one by one: a delete-collection of 10,000 outlives the request timeout)."""
    started = time.monotonic()
    names = [p["metadata"]["name"] for p in client.get(pod_path(NAMESPACE))["items"]]

    def delete(name):
        try:
            client.delete(pod_path(NAMESPACE, name), {"gracePeriodSeconds": 0})
        except ApiError as exc:
            if exc.status != 404:
                raise

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(delete, names))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not client.get(pod_path(NAMESPACE), limit=1)["items"]:
            break
        time.sleep(0.5)
    recorder.reset()
    print(f"  deleted {len(names)} pods in {time.monotonic() - started:.1f}s", file=sys.stderr)


def run_kube_scheduler(cluster: kwok.FakeCluster, bin_dir: Path, client: KubeClient, recorder: RecorderProcess,
                       jobs: list[Job], workers: int, timeout: float, streaming: bool = False) -> dict:
    """kube-scheduler on the same pods: pending before it starts (t0 = its start), or, ``streaming``,
    created from t0 on while it runs (t0 = the first creation: a user submits to kube-scheduler by creating pods)."""
    settings = PodSettings(namespace=NAMESPACE, scheduler_name="default-scheduler",
                           name_prefix="kube-s-" if streaming else "kube-", set_priority_class_name=False)

    def create_all() -> float:
        started = time.monotonic()
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(lambda job: client.create_pod(NAMESPACE, manifest(job, None, settings)), jobs))
        return time.monotonic() - started

    created = None
    if not streaming:
        print(f"kube-scheduler: creating {len(jobs)} pending pods ...", file=sys.stderr)
        created = create_all()
        recorder.wait("seen", len(jobs), 60)
        print(f"  created in {created:.1f}s ({len(jobs) / created:.0f}/s); starting kube-scheduler", file=sys.stderr)
    meter = CpuMeter(cluster)
    t0 = time.time()
    proc, log = start_kube_scheduler(cluster, bin_dir)
    try:
        if streaming:
            print("kube-scheduler running; creating the pods now", file=sys.stderr)
            time.sleep(5)  # informers synced, nothing to schedule yet
            t0 = time.time()
            created = create_all()
            print(f"  created in {created:.1f}s ({len(jobs) / created:.0f}/s)", file=sys.stderr)
        recorder.wait("running", len(jobs), timeout)
        cpu = meter.stop(**{"kube-scheduler": cpu_seconds(proc.pid)})
    finally:
        stop_process(proc)
    stats = recorder.stats(t0, len(jobs))
    stats["creationSeconds"] = round(created, 2)
    stats["cpuSeconds"] = cpu
    stats["log"] = str(log)
    return stats


def start_kube_scheduler(cluster: kwok.FakeCluster, bin_dir: Path) -> tuple[subprocess.Popen, Path]:
    """kube-scheduler on ``cluster`` (client limits 5,000/10,000 QPS, no leader election); the process and its log."""
    workdir = Path(tempfile.mkdtemp(prefix="flotilla-bench-"))
    config = workdir / "scheduler.yaml"
    config.write_text(f"""apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: {kwok.workdir(cluster.name) / 'kubeconfig.yaml'}
  qps: 5000
  burst: 10000
leaderElection:
  leaderElect: false
""")
    log_path = workdir / "kube-scheduler.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([str(bin_dir / "kube-scheduler"), "--config", str(config), "--secure-port", "0",
                                 "--authentication-skip-lookup=true", "-v", "1"],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return proc, log_path


def stop_process(proc: subprocess.Popen, timeout: float = 10) -> None:
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_flotilla(cluster: kwok.FakeCluster, recorder: RecorderProcess, jobs: list[Job], queues: int, workers: int,
                 period: float, timeout: float) -> dict:
    from flotilla.config import load_config
    from flotilla.scheduler import Scheduler
    from flotilla.kubernetes.backend import KubernetesCluster
    from flotilla.kubernetes.runner import Runner

    workdir = Path(tempfile.mkdtemp(prefix="flotilla-bench-"))
    config_path = workdir / "flotilla.yaml"
    queue_lines = "\n".join(f"  - {{name: q{i}, weight: 1}}" for i in range(queues))
    config_path.write_text(f"""queues:
{queue_lines}
cycle: {{period: {period}}}
clusters:
  - {{name: bench, kind: kubernetes, kubeconfig: {cluster.kubeconfig}, context: {cluster.context}, namespace: {NAMESPACE}}}
""")
    config = load_config(config_path)
    scheduler = Scheduler(config)
    class Templated(KubernetesCluster):
        """Starts come with the --pod-spec template, as the service hands a lease over."""

        def apply(self, decisions):
            if TEMPLATE is not None:
                decisions.templates = {p.job.id: TEMPLATE for p in decisions.start}
            super().apply(decisions)

    backend = Templated(
        "bench", cluster.client(pool_size=workers + 8), settings=PodSettings(namespace=NAMESPACE),
        priority_classes=[(pc.name, pc.priority, pc.preemptible) for pc in config.priority_classes],
        workers=workers, delete_finished=False)
    try:
        assert backend.wait_synced(60), "backend did not sync"
        runner = Runner(scheduler, {"bench": backend}, lease_timeout=config.lease.timeout)
        print(f"flotilla: submitting {len(jobs)} jobs in {queues} queues", file=sys.stderr)
        meter = CpuMeter(cluster)
        process_cpu = time.process_time()
        t0 = time.time()
        runner.submit(jobs)
        cycles = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and recorder.counts()["running"] < len(jobs):
            t = time.monotonic()
            result = runner.cycle()
            if result.decisions is not None:
                cycles.append((round(result.seconds, 3), len(result.decisions.scheduled)))
            time.sleep(max(0.0, period - (time.monotonic() - t)))
        stats = recorder.stats(t0, len(jobs))
        stats["cpuSeconds"] = meter.stop(flotilla=time.process_time() - process_cpu)
        stats["cycles"] = len(cycles)
        stats["firstCycleSeconds"] = cycles[0][0] if cycles else None
        stats["firstCycleScheduled"] = cycles[0][1] if cycles else 0
        stats["createErrors"] = backend.counters["create_errors"]
        return stats
    finally:
        backend.close()


def _write_bound(kubeconfig: str, context: str, count: int, queues: int, part: int, parts: int, nodes: int,
                 threads: int, pod_spec: str | None) -> float:
    """One ceiling writer process: create every ``parts``-th pod from ``part`` on, bound round-robin; its CPU seconds."""
    global TEMPLATE
    TEMPLATE = load_template(pod_spec) if pod_spec else None

    client = KubeClient.from_kubeconfig(kubeconfig, context, pool_size=threads + 4)
    settings = PodSettings(namespace=NAMESPACE, name_prefix="ceiling-", set_priority_class_name=False)
    started = time.process_time()
    mine = [(i, job) for i, job in enumerate(jobs_for(count, queues)) if i % parts == part]
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda item: client.create_pod(
            NAMESPACE, manifest(item[1], f"node-{1 + item[0] % nodes}", settings)), mine))
    client.close()
    return time.process_time() - started


def run_ceiling(cluster: kwok.FakeCluster, recorder: RecorderProcess, count: int, queues: int, nodes: int,
                processes: int, threads: int, timeout: float, kwok_running: bool = True,
                pod_spec: str | None = None) -> dict:
    """No scheduler: writers create the pods already bound, as fast as the API server takes them.

    With ``kwok_running=False`` kwok-controller is stopped for the run (nothing marks the pods Running, so
    only binding is timed) and started again afterwards.
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    if not kwok_running:
        kwok.stop_component(cluster.name, "kwok-controller")
    try:
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(processes, mp_context=ctx) as pool:
            # Start the interpreters before t0, so their start-up is not timed.
            list(pool.map(time.sleep, [0.5] * processes))
            meter = CpuMeter(cluster)
            t0 = time.time()
            cpus = list(pool.map(_write_bound, *zip(*[(cluster.kubeconfig, cluster.context, count, queues, part,
                                                       processes, nodes, threads, pod_spec)
                                                      for part in range(processes)])))
        recorder.wait("running" if kwok_running else "bound", count, timeout)
        stats = recorder.stats(t0, count)
        stats["cpuSeconds"] = meter.stop(writers=sum(cpus))
        if not kwok_running:
            for key in ("running", "latencyP50", "latencyP95", "makespan"):
                stats.pop(key, None)
            stats["complete"] = stats["bound"] >= count
        return stats
    finally:
        if not kwok_running:
            kwok.start_component(cluster.name, "kwok-controller")


def main(argv=None) -> int:
    if "--in-cluster" in (sys.argv[1:] if argv is None else argv):
        from kwok_incluster import main as in_cluster
        return in_cluster(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--in-cluster", action="store_true",
                        help="pods made in the cluster by batch/v1 Jobs instead (bench/kwok_incluster.py)")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--queues", type=int, default=10)
    parser.add_argument("--workers", type=int, default=32,
                        help="Flotilla's pod-writing threads (the ceiling writers keep as many requests in flight)")
    parser.add_argument("--period", type=float, default=1.0, help="Flotilla's cycle period, seconds")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--name", default=f"flbench-{os.getpid()}")
    parser.add_argument("--keep", action="store_true", help="leave the fake cluster running")
    parser.add_argument("--skip-kube-scheduler", action="store_true")
    parser.add_argument("--no-streaming", action="store_true",
                        help="skip the second baseline (pods created while kube-scheduler runs)")
    parser.add_argument("--skip-ceiling", action="store_true",
                        help="skip the two no-scheduler runs (bound pods written as fast as the API server takes them)")
    parser.add_argument("--pod-spec", help="a job file: every run creates its first job's pod (default: a stand-in)")
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args(argv)
    global TEMPLATE
    TEMPLATE = load_template(args.pod_spec) if args.pod_spec else None

    bin_dir = kwok.find_bin_dir()
    template = Path(tempfile.mkdtemp(prefix="flotilla-bench-")) / "node.yaml"
    template.write_text("namePrefix: node\nresources: {cpu: 32, memory: 128Gi, pods: 110}\n")
    kubeconfig = str(template.parent / "kubeconfig")
    started = time.monotonic()
    print(f"starting fake cluster {args.name} with {args.nodes} nodes ...", file=sys.stderr)
    cluster = kwok.up(args.name, args.nodes, template, kubeconfig=kubeconfig, bin_dir=bin_dir, timeout=300)
    print(f"  up in {time.monotonic() - started:.1f}s", file=sys.stderr)
    client = cluster.client(pool_size=args.workers + 8)
    try:
        try:
            client.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": NAMESPACE}})
        except ApiError as exc:
            if exc.status != 409:
                raise
        recorder = RecorderProcess(cluster, NAMESPACE)
        jobs = jobs_for(args.jobs, args.queues)
        results = {"nodes": args.nodes, "jobs": args.jobs, "queues": args.queues, "cpus": os.cpu_count(),
                   "podSpec": args.pod_spec}
        if not args.skip_kube_scheduler:
            results["kubeScheduler"] = run_kube_scheduler(cluster, bin_dir, client, recorder, jobs, args.workers,
                                                          args.timeout)
            print(json.dumps(results['kubeScheduler']), file=sys.stderr)
            delete_all(client, recorder, args.workers)
            if not args.no_streaming:
                results["kubeSchedulerStreaming"] = run_kube_scheduler(cluster, bin_dir, client, recorder, jobs,
                                                                       args.workers, args.timeout, streaming=True)
                print(json.dumps(results['kubeSchedulerStreaming']), file=sys.stderr)
                delete_all(client, recorder, args.workers)
        results["flotilla"] = run_flotilla(cluster, recorder, jobs, args.queues, args.workers, args.period,
                                           args.timeout)
        print(json.dumps(results['flotilla']), file=sys.stderr)
        if not args.skip_ceiling:
            processes = 4
            threads = max(1, args.workers // processes)
            for key, running in (("ceiling", True), ("ceilingWithoutKwok", False)):
                delete_all(client, recorder, args.workers)
                print(f"no scheduler: {processes}x{threads} writers creating {len(jobs)} bound pods"
                      f"{'' if running else ', kwok-controller stopped'} ...", file=sys.stderr)
                results[key] = run_ceiling(cluster, recorder, args.jobs, args.queues, args.nodes, processes,
                                           threads, args.timeout, kwok_running=running,
                                           pod_spec=args.pod_spec)
                print(json.dumps(results[key]), file=sys.stderr)
        recorder.close()
    finally:
        client.close()
        if not args.keep:
            kwok.down(args.name, kubeconfig=kubeconfig, bin_dir=bin_dir)

    f = results["flotilla"]
    baselines = [(key, label) for key, label in (("kubeScheduler", "kube-sched A"),
                                                 ("kubeSchedulerStreaming", "kube-sched B")) if key in results]
    ceilings = [(key, label) for key, label in (("ceiling", "no sched"), ("ceilingWithoutKwok", "no sched/kwok"))
                if key in results]
    rows = [("pods bound per second (first to last bind)", "podsBoundPerSecond", "{:.0f}"),
            ("pods bound per second (from t0)", "podsBoundPerSecondFromT0", "{:.0f}"),
            ("submission-to-running p50 (s)", "latencyP50", "{:.2f}"),
            ("submission-to-running p95 (s)", "latencyP95", "{:.2f}"),
            ("makespan: t0 to last Running (s)", "makespan", "{:.2f}")]
    cpu_rows = [("CPU s: kube-apiserver", "kube-apiserver"), ("CPU s: etcd", "etcd"),
                ("CPU s: kwok-controller", "kwok-controller"),
                ("CPU s: the scheduler (or writers)", ("flotilla", "kube-scheduler", "writers"))]

    def ratio(key, fv, kv):
        if not fv or not kv:
            return ""
        return f"{fv / kv:.2f}x" if "PerSecond" in key else f"{kv / fv:.2f}x"

    def cpu(run: dict, key) -> float | None:
        spent = run.get("cpuSeconds", {})
        for k in (key if isinstance(key, tuple) else (key,)):
            if k in spent:
                return spent[k]
        return None

    what = f"jobs of {args.pod_spec}'s podSpec" if args.pod_spec else "one-core jobs"
    print(f"\n{args.jobs} {what} in {args.queues} queues on {args.nodes} KWOK nodes "
          f"({os.cpu_count()} cores, one API server)")
    print("  A: pods pending before kube-scheduler starts (t0 = its start)")
    print("  B: pods created from t0 on while kube-scheduler runs (t0 = first creation)")
    print("  Flotilla: jobs submitted at t0; its lease creates each pod bound to its node")
    if ceilings:
        print("  no sched: no scheduler, writers create the pods bound (the API server's ceiling);"
              " /kwok: kwok-controller stopped")
    header = f"{'':44} {'flotilla':>9}"
    for _, label in baselines:
        header += f" {label:>13} {'ratio':>6}"
    for _, label in ceilings:
        header += f" {label:>13}"
    print(header)

    def line(label, value_of, fmt, with_ratio=None):
        fv = value_of(f)
        text = f"{label:44} {fmt.format(fv) if fv is not None else '-':>9}"
        for name, _ in baselines:
            kv = value_of(results[name])
            text += f" {fmt.format(kv) if kv is not None else '-':>13} {ratio(with_ratio, fv, kv) if with_ratio else '':>6}"
        for name, _ in ceilings:
            cv = value_of(results[name])
            text += f" {fmt.format(cv) if cv is not None else '-':>13}"
        print(text)

    for label, key, fmt in rows:
        line(label, lambda run, key=key: run.get(key), fmt, with_ratio=key)
    for label, key in cpu_rows:
        line(label, lambda run, key=key: cpu(run, key), "{:.1f}")
    results["ratios"] = {name: {key: ratio(key, f.get(key), results[name].get(key)) for _, key, _ in rows}
                         for name, _ in baselines}
    if "kubeScheduler" in results and ceilings:
        need = 3 * results["kubeScheduler"].get("podsBoundPerSecond", 0)
        best = max(results[name].get("podsBoundPerSecond", 0) for name, _ in ceilings)
        results["aim"] = {"threeTimesKubeSchedulerA": round(need, 1), "apiServerCeiling": best,
                          "reachableHere": best >= need}
        print(f"\n3x kube-scheduler A would be {need:.0f} pods bound/s; with no scheduler at all this API server "
              f"binds at most {best:.0f}/s here ({'reachable' if best >= need else 'not reachable on this machine'}).")
    print(json.dumps(results, indent=2), file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    runs = [f] + [results[name] for name, _ in baselines + ceilings]
    return 0 if all(run.get("complete") for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
