"""Pods bound per second with WaitForFirstConsumer claims, Flotilla vs kube-scheduler, on one KWOK cluster.

A benchmark, not a test. One fake cluster (1,000 nodes by default) whose
kube-controller-manager runs the persistentvolume-binder controller; a
``WaitForFirstConsumer`` StorageClass with no provisioner and ``--pvs-per-node``
local PVs pinned to each node (``kubernetes.io/hostname``); one claim per pod
(5,000 by default), each matching any of the PVs. Both schedulers talk to the
same API server and must bind every claim before its pod (kube-scheduler: its
VolumeBinding plugin's PreBind; Flotilla: its backend, flotilla/kubernetes/volumes.py),
after which the PV controller completes the claim's binding. One watch (the
recorder of ``bench/kwok_throughput.py``) times every pod's first bind.

* kube-scheduler (client limits 5,000/10,000 QPS): the pods are created while it runs
  (t0 = the first creation), with ``schedulerName: default-scheduler``.
* Flotilla: at t0 the jobs (each naming its claim) are submitted to its queues; the
  scheduler cycles, its backend binds each claim's PV and creates the pod once the
  claim is bound.

Between the runs every pod, claim and PV is deleted and made again, so both start
from the same free volumes, once the PV controller has made every PV ``Available``.
Flotilla's run also marks each job's steps (:class:`Phases`: its decision, its
volume write, the PV controller's binding, seeing it, the pod) and prints where
the time went (``phases``), how many of its PV writes the API server refused
with 409 Conflict, its slowest cycles and where its scheduling thread spent its
time (a stack sampler). Each half may take ``--timeout`` seconds (an hour:
the PV controller binds one claim at a time, and on a loaded machine 5,000 take
over half an hour); ``--budget`` stops each half that many seconds after its t0
and reports its rate over the pods it bound by then (kube-scheduler's
VolumeBinding Filter costs seconds of CPU per pod at 1,000 nodes with 5,000 PVs).
kube-controller-manager's client limits are raised (1,000 QPS): at its default
20 QPS the PV controller binds a few claims a second whichever scheduler asks.
Pods bound per second counts from the first bind to the last.

    python bench/kwok_volumes.py                        # 1,000 nodes, 5,000 pods, 5 PVs per node
    python bench/kwok_volumes.py --nodes 100 --jobs 500 --json out.json
    python bench/kwok_volumes.py --nodes 300 --jobs 1500 --budget 900
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kwok_common  # noqa: E402
from kwok_throughput import (NAMESPACE, CpuMeter, RecorderProcess, cpu_seconds, start_kube_scheduler,  # noqa: E402
                             stop_process)

from flotilla.core.backend import PodTemplate  # noqa: E402
from flotilla.core.model import Job  # noqa: E402
from flotilla.kubernetes.client import ApiError, KubeClient, pod_path  # noqa: E402
from flotilla.kubernetes.pods import PodSettings, pod_manifest  # noqa: E402
from flotilla.kwok import cluster as kwok  # noqa: E402

CLASS = "bench-local"
PVS = "/api/v1/persistentvolumes"
CLAIMS = f"/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims"
SPEC = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "100m"}},
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}


def template(claim: str) -> PodTemplate:
    spec = dict(SPEC, volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": claim}}])
    return PodTemplate(spec, NAMESPACE, {}, {}, 0)


def make_volumes(client: KubeClient, nodes: int, per_node: int, jobs: int, workers: int) -> None:
    """The StorageClass (once), ``per_node`` local PVs on every node and ``jobs`` claims."""
    try:
        client.post("/apis/storage.k8s.io/v1/storageclasses", {
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": CLASS},
            "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer"})
    except ApiError as exc:
        if exc.status != 409:
            raise

    def pv(item):
        n, k = item
        client.post(PVS, {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"pv-{n}-{k}"},
                          "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                                   "persistentVolumeReclaimPolicy": "Retain", "storageClassName": CLASS,
                                   "local": {"path": f"/mnt/pv-{k}"},
                                   "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                                       {"key": "kubernetes.io/hostname", "operator": "In",
                                        "values": [f"node-{n}"]}]}]}}}})

    def claim(i):
        client.post(CLAIMS, {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                             "metadata": {"name": f"c-{i:05d}", "namespace": NAMESPACE},
                             "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": CLASS,
                                      "resources": {"requests": {"storage": "1Gi"}}}})

    started = time.monotonic()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(pv, [(n, k) for n in range(1, nodes + 1) for k in range(per_node)]))
        list(pool.map(claim, range(jobs)))
    print(f"  {nodes * per_node} PVs and {jobs} claims made in {time.monotonic() - started:.1f}s", file=sys.stderr)


def wait_available(cluster, client: KubeClient, count: int, timeout: float = 900) -> None:
    """Wait until the PV controller has made all ``count`` PVs ``Available`` (kube-scheduler's VolumeBinding takes
    no other): both runs start from volumes the controller has seen. A kube-controller-manager that exited (on a
    loaded machine it can give up waiting for the API server at its start) is started again."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if kwok.component_pid(cluster.name, "kube-controller-manager") is None:
            print("  kube-controller-manager not running: starting it again", file=sys.stderr)
            kwok.start_component(cluster.name, "kube-controller-manager")
        phases = [pv["status"].get("phase") for pv in client.get(PVS)["items"]]
        if sum(phase == "Available" for phase in phases) >= count:
            return
        time.sleep(2.0)
    raise SystemExit(f"kwok_volumes: the PV controller did not make {count} PVs Available within {timeout:g}s")


def delete_everything(client: KubeClient, recorder, workers: int) -> None:
    """Every pod, claim and PV of the run, gone (PVs last: a bound PV goes once its claim has)."""
    def delete(path):
        try:
            if not path.startswith(pod_path(NAMESPACE)):
                # Claims and PVs carry protection finalizers; no controller here takes them off.
                client.patch(path, {"metadata": {"finalizers": None}})
            client.delete(path, {"gracePeriodSeconds": 0})
        except ApiError as exc:
            if exc.status != 404:
                raise

    for listing, path_of in ((pod_path(NAMESPACE), lambda n: pod_path(NAMESPACE, n)),
                             (CLAIMS, lambda n: f"{CLAIMS}/{n}"), (PVS, lambda n: f"{PVS}/{n}")):
        names = [item["metadata"]["name"] for item in client.get(listing)["items"]]
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(delete, map(path_of, names)))
        deadline = time.monotonic() + 300
        while client.get(listing, limit=1)["items"] and time.monotonic() < deadline:
            time.sleep(0.5)
    recorder.reset()


def run_kube_scheduler(cluster, bin_dir: Path, client: KubeClient, recorder, count: int, workers: int,
                       timeout: float) -> dict:
    settings = PodSettings(namespace=NAMESPACE, scheduler_name="default-scheduler", name_prefix="kube-",
                           set_priority_class_name=False)
    proc, log = start_kube_scheduler(cluster, bin_dir)
    try:
        time.sleep(3.0)   # its informers synced before t0
        print(f"kube-scheduler: creating {count} pods with claims while it runs ...", file=sys.stderr)
        meter, controllers = CpuMeter(cluster), _controller_cpu(cluster)
        scheduler_cpu = cpu_seconds(proc.pid)
        t0 = time.time()
        jobs = [Job(f"job-{i:05d}", "q0", requests={"cpu": 100}) for i in range(count)]
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(lambda item: client.create_pod(NAMESPACE, pod_manifest(
                item[1], None, 0, settings, template=template(f"c-{item[0]:05d}"))), enumerate(jobs)))
        recorder.wait("bound", count, timeout)
        stats = recorder.stats(t0, count)
        now = cpu_seconds(proc.pid)
        stats["cpuSeconds"] = meter.stop(**{"kube-scheduler": now - scheduler_cpu if now is not None else None,
                                            "kube-controller-manager": _controller_cpu(cluster, controllers)})
        return stats
    finally:
        stop_process(proc)
        print(f"  kube-scheduler log: {log}", file=sys.stderr)


def stray_claim_refs(client: KubeClient) -> int:
    """PVs whose claimRef names a claim bound to another PV: a claim written onto two PVs (the PV controller then
    takes the claimRef off the other, and that PV changes under any scheduler that chose it meanwhile)."""
    volume_of = {pvc["metadata"]["name"]: (pvc.get("spec") or {}).get("volumeName")
                 for pvc in client.get(CLAIMS)["items"]}
    return sum(1 for pv in client.get(PVS)["items"]
               if ((pv.get("spec") or {}).get("claimRef") or {}).get("name") in volume_of
               and volume_of[pv["spec"]["claimRef"]["name"]] not in (None, "", pv["metadata"]["name"]))


def _controller_cpu(cluster, since: float | None = None) -> float | None:
    """kube-controller-manager's CPU seconds (since ``since``, when given)."""
    now = cpu_seconds(kwok.component_pid(cluster.name, "kube-controller-manager"))
    if now is None:
        return None
    return now if since is None else now - since


class Phases:
    """When each of Flotilla's steps happened for each job (wall clock), and its API calls for the volumes.

    ``decided``: the cycle's decision reached the backend; ``writeStart`` / ``writeEnd``: its volume writes
    began and returned (a pool thread); ``controllerBound``: the PV controller's last write to the claim
    (the API server's managedFields time, to the second); ``seenBound``: Flotilla's watch saw every claim of
    the job bound; ``created``: the pod was created bound to its node."""

    ORDER = ("decided", "writeStart", "writeEnd", "controllerBound", "seenBound", "created")

    def __init__(self):
        self.lock = threading.Lock()
        self.at: dict[str, dict[str, float]] = {}
        self.patches: list[float] = []
        #: the PV writes the API server refused with 409 Conflict, and what the object's last writer was then
        self.conflicts: list[dict] = []

    def mark(self, job_id: str, phase: str, at: float | None = None) -> None:
        at = time.time() if at is None else at
        with self.lock:
            self.at.setdefault(job_id, {}).setdefault(phase, at)

    def instrument(self, backend) -> None:
        """Wrap the backend's steps (this bench's instance only) to mark each job's phases."""
        apply, bind, start, create, patch = (backend.apply, backend.volume_waits.bind, backend.starts.start_pod,
                                             backend.starts.create, backend.client.patch)

        def timed_apply(decisions):
            for p in decisions.start:
                self.mark(p.job.id, "decided")
            return apply(decisions)

        def timed_bind(job, *args):
            self.mark(job.id, "writeStart")
            try:
                return bind(job, *args)
            finally:
                self.mark(job.id, "writeEnd")

        def timed_start(job, *args):
            self.mark(job.id, "seenBound")
            return start(job, *args)

        def timed_create(job, *args):
            try:
                return create(job, *args)
            finally:
                self.mark(job.id, "created")

        def timed_patch(*args, **kwargs):
            t = time.monotonic()
            try:
                return patch(*args, **kwargs)
            except ApiError as exc:
                if exc.status == 409:
                    self._conflict(backend, *args)
                raise
            finally:
                with self.lock:
                    self.patches.append(time.monotonic() - t)

        backend.apply, backend.volume_waits.bind, backend.starts.start_pod, backend.starts.create = (
            timed_apply, timed_bind, timed_start, timed_create)
        backend.client.patch = timed_patch

    def _conflict(self, backend, path: str, body: dict, *_) -> None:
        """A write refused with 409: which version it sent, which the object has, who wrote it last, when."""
        try:
            fresh = backend.client.get(path)
        except ApiError:
            fresh = {}
        meta = fresh.get("metadata") or {}
        last = max(meta.get("managedFields") or (), key=lambda f: f.get("time", ""), default={})
        with self.lock:
            self.conflicts.append({"path": path, "at": time.time(), "sent": (body.get("metadata") or {}).get(
                "resourceVersion"), "now": meta.get("resourceVersion"), "lastWriter": last.get("manager"),
                "lastOperation": last.get("operation"), "phase": (fresh.get("status") or {}).get("phase"),
                "claimRef": ((fresh.get("spec") or {}).get("claimRef") or {}).get("name")})

    def read_controller(self, client: KubeClient) -> None:
        """``controllerBound`` of every claim, from kube-controller-manager's managedFields entries."""
        from datetime import datetime
        for pvc in client.get(CLAIMS)["items"]:
            times = [datetime.fromisoformat(f["time"].replace("Z", "+00:00")).timestamp()
                     for f in pvc["metadata"].get("managedFields") or ()
                     if f.get("manager", "").startswith("kube-controller-manager") and f.get("time")]
            if times and pvc.get("status", {}).get("phase") == "Bound":
                self.mark("job-" + pvc["metadata"]["name"][2:], "controllerBound", max(times))

    def summary(self, t0: float) -> dict:
        """Per phase: when the first and last job reached it (s after t0); per step between phases: the median,
        90th percentile and largest time a job spent in it."""
        def q(values, f):
            return round(values[min(len(values) - 1, int(f * len(values)))], 2) if values else None
        out: dict = {"reached": {}, "steps": {}}
        with self.lock:
            rows = list(self.at.values())
            patches = sorted(self.patches)
        for phase in self.ORDER:
            times = sorted(r[phase] - t0 for r in rows if phase in r)
            out["reached"][phase] = {"jobs": len(times), "first": q(times, 0), "last": q(times, 1)}
        for a, b in zip(self.ORDER, self.ORDER[1:]):
            spans = sorted(r[b] - r[a] for r in rows if a in r and b in r)
            out["steps"][f"{a}->{b}"] = {"p50": q(spans, 0.5), "p90": q(spans, 0.9), "max": q(spans, 1)}
        out["volumePatches"] = {"calls": len(patches), "p50": q(patches, 0.5), "p90": q(patches, 0.9),
                                "max": q(patches, 1), "conflicts": len(self.conflicts)}
        writers: dict[str, int] = {}
        for c in self.conflicts:
            writers[f"{c['lastWriter']} {c['lastOperation']}"] = writers.get(f"{c['lastWriter']} {c['lastOperation']}", 0) + 1
        out["conflictsByLastWriter"] = writers
        out["conflictSamples"] = self.conflicts[:5]
        return out


class Sampler:
    """Where the scheduling thread spends its time: its stack sampled every ``interval`` seconds (the innermost
    Flotilla frames and whatever it waits in), counted; with the cycles' own clock, what a slow cycle waited on."""

    def __init__(self, interval: float = 0.05):
        self.interval, self.counts, self.thread_id = interval, {}, threading.get_ident()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="bench-sampler")
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(self.interval):
            frame = sys._current_frames().get(self.thread_id)
            names = []
            while frame is not None and len(names) < 6:
                code = frame.f_code
                where = code.co_filename
                if "flotilla" in where or not names:
                    names.append(f"{Path(where).stem}.{code.co_name}:{frame.f_lineno}")
                frame = frame.f_back
            key = " < ".join(names)
            self.counts[key] = self.counts.get(key, 0) + 1

    def top(self, n: int = 15) -> list:
        self.stop.set()
        total = sum(self.counts.values()) or 1
        return [(round(100 * c / total, 1), k) for k, c in sorted(self.counts.items(), key=lambda kv: -kv[1])[:n]]


_RLOCK = threading.RLock


class TimedLock:
    """The backend's lock, timed: per place that takes it (the calling function), how often, how long it waited and
    how long it held the lock (total and longest). What a slow cycle or a late sighting waited on shows here."""

    def __init__(self):
        self._lock = _RLOCK()
        self._depth, self._since, self._who = 0, 0.0, ""
        self.waits: dict[str, list] = {}
        self.holds: dict[str, list] = {}

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        asked = time.perf_counter()
        got = self._lock.acquire(blocking, timeout)
        if got:
            self._depth += 1
            if self._depth == 1:
                now = time.perf_counter()
                caller = sys._getframe(1)
                if caller.f_code.co_name in ("__enter__", "acquire"):
                    caller = caller.f_back
                self._who = f"{Path(caller.f_code.co_filename).stem}.{caller.f_code.co_name}"
                row = self.waits.setdefault(self._who, [0, 0.0, 0.0])
                row[0] += 1
                row[1] += now - asked
                row[2] = max(row[2], now - asked)
                self._since = now
        return got

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            held = time.perf_counter() - self._since
            row = self.holds.setdefault(self._who, [0, 0.0, 0.0])
            row[0] += 1
            row[1] += held
            row[2] = max(row[2], held)
        self._lock.release()

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    def summary(self, n: int = 8) -> dict:
        def top(rows):
            return {k: {"times": c, "totalSeconds": round(t, 2), "longest": round(m, 3)}
                    for k, (c, t, m) in sorted(rows.items(), key=lambda kv: -kv[1][2])[:n]}
        return {"heldLongest": top(self.holds), "waitedLongest": top(self.waits)}


def run_flotilla(cluster, recorder, count: int, queues: int, workers: int, period: float, timeout: float,
                 bind_timeout: float = 600.0) -> dict:
    from flotilla.config import load_config
    from flotilla.kubernetes.backend import KubernetesCluster
    from flotilla.kubernetes.runner import Runner
    from flotilla.scheduler import Scheduler

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
    templates = {f"job-{i:05d}": template(f"c-{i:05d}") for i in range(count)}

    class Templated(KubernetesCluster):
        def apply(self, decisions):
            decisions.templates = {p.job.id: templates[p.job.id] for p in decisions.start}
            super().apply(decisions)

    from unittest import mock
    with mock.patch.object(threading, "RLock", TimedLock):   # the backend's lock, timed (this bench's only)
        backend = Templated("bench", cluster.client(pool_size=workers + 8),
                            settings=PodSettings(namespace=NAMESPACE),
                            priority_classes=[(pc.name, pc.priority, pc.preemptible) for pc in config.priority_classes],
                            workers=workers, delete_finished=False, volume_bind_timeout=bind_timeout)
    phases = Phases()
    phases.instrument(backend)
    try:
        assert backend.wait_synced(60), "backend did not sync"
        deadline = time.monotonic() + 120
        while len(backend.volumes.pvcs) < count and time.monotonic() < deadline:
            time.sleep(0.1)
        runner = Runner(Scheduler(config), {"bench": backend}, lease_timeout=config.lease.timeout)
        jobs = [Job(f"job-{i:05d}", f"q{i % queues}", job_set=f"set-{i % queues}", priority_class="armada-default",
                    submitted=float(i), requests={"cpu": 100}, claims=(f"{NAMESPACE}/c-{i:05d}",))
                for i in range(count)]
        print(f"flotilla: submitting {count} jobs with claims in {queues} queues", file=sys.stderr)
        meter, controllers = CpuMeter(cluster), _controller_cpu(cluster)
        own_cpu = time.process_time()
        t0 = time.time()
        runner.submit(jobs)
        cycles = []
        sampler = Sampler()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and recorder.counts()["bound"] < count:
            t, at = time.monotonic(), time.time() - t0
            result = runner.cycle()
            if result.decisions is not None:
                cycles.append((round(result.seconds, 3), len(result.decisions.scheduled), round(at, 1)))
            time.sleep(max(0.0, period - (time.monotonic() - t)))
        stats = recorder.stats(t0, count)
        stats["cpuSeconds"] = meter.stop(**{"flotilla (bench process)": time.process_time() - own_cpu,
                                            "kube-controller-manager": _controller_cpu(cluster, controllers)})
        phases.read_controller(backend.client)
        stats["pvsNamingAClaimBoundElsewhere"] = stray_claim_refs(backend.client)
        stats["phases"] = phases.summary(t0)
        stats["cycles"] = len(cycles)
        stats["slowestCycleSeconds"] = max((c[0] for c in cycles), default=None)
        stats["firstCycleScheduled"] = cycles[0][1] if cycles else 0
        stats["slowestCycles"] = sorted(cycles, key=lambda c: -c[0])[:5]
        stats["schedulingThread"] = sampler.top()
        if isinstance(backend._lock, TimedLock):
            stats["backendLock"] = backend._lock.summary()
        stats["createErrors"] = backend.counters["create_errors"]
        # Starts given back (a volume write refused, a claim not bound in time): how many, and the last reasons.
        stats["startsGivenBack"] = sum(sum(h[1] == "queued" for h in r.history[1:]) for r in runner.jobs.values())
        stats["jobStates"], stats["lastReasons"] = {}, {}
        for record in runner.jobs.values():
            stats["jobStates"][record.state] = stats["jobStates"].get(record.state, 0) + 1
            if record.reason:
                short = record.reason[:90]
                stats["lastReasons"][short] = stats["lastReasons"].get(short, 0) + 1
        return stats
    finally:
        backend.close()


def main(argv=None) -> int:
    parser = kwok_common.parser(__doc__, "flvol", timeout=3600)
    parser.add_argument("--pvs-per-node", type=int, default=5)
    parser.add_argument("--budget", type=float, default=None,
                        help="stop each half this many seconds after its t0 and report the rate over what it bound "
                             "(kube-scheduler's half cannot bind 5,000 claims over 1,000 nodes here)")
    parser.add_argument("--bind-timeout", type=float, default=600.0,
                        help="Flotilla's volumeBindTimeout, seconds (kube-scheduler's bindTimeoutSeconds is 600)")
    args = parser.parse_args(argv)

    # The PV controller's client limits raised (its default 20 QPS would bind a few claims a second for either
    # scheduler): the schedulers are measured, not the controller's rate limit.
    bench = kwok_common.start(args, controllers=("persistentvolume-binder",),
                              extra_args=["kube-controller-manager=kube-api-qps=1000",
                                          "kube-controller-manager=kube-api-burst=2000"])
    cluster, bin_dir = bench.cluster, bench.bin_dir
    client = cluster.client(pool_size=args.workers + 8)
    results = {"nodes": args.nodes, "jobs": args.jobs, "pvsPerNode": args.pvs_per_node, "cpus": os.cpu_count(),
               "budget": args.budget}
    limit = min(args.timeout, args.budget) if args.budget else args.timeout
    try:
        recorder = RecorderProcess(cluster, NAMESPACE)
        if not args.skip_kube_scheduler:
            make_volumes(client, args.nodes, args.pvs_per_node, args.jobs, args.workers)
            wait_available(cluster, client, args.nodes * args.pvs_per_node)
            results["kubeScheduler"] = run_kube_scheduler(cluster, bin_dir, client, recorder, args.jobs,
                                                          args.workers, limit)
            print(json.dumps(results["kubeScheduler"]), file=sys.stderr)
            delete_everything(client, recorder, args.workers)
        if not args.skip_flotilla:
            make_volumes(client, args.nodes, args.pvs_per_node, args.jobs, args.workers)
            wait_available(cluster, client, args.nodes * args.pvs_per_node)
            results["flotilla"] = run_flotilla(cluster, recorder, args.jobs, args.queues, args.workers,
                                               args.period, limit, args.bind_timeout)
            print(json.dumps(results["flotilla"]), file=sys.stderr)
        recorder.close()
    finally:
        client.close()
        bench.down()
    f, k = results.get("flotilla", {}), results.get("kubeScheduler", {})
    print(f"\n{args.jobs} pods with WaitForFirstConsumer claims, {args.pvs_per_node} local PVs per node, "
          f"{args.nodes} KWOK nodes ({os.cpu_count()} cores, one API server)")
    for label, key in (("pods bound" + (f" within {args.budget:g} s" if args.budget else ""), "bound"),
                       ("pods bound per second (first to last bind)", "podsBoundPerSecond"),
                       ("pods bound per second (from t0)", "podsBoundPerSecondFromT0"),
                       ("t0 to last bind (s)", "lastBindAfter")):
        fv, kv = f.get(key), k.get(key)
        ratio = f"{fv / kv:.2f}x" if fv and kv and "PerSecond" in key else ""
        print(f"{label:44} flotilla {fv!s:>8}   kube-scheduler {kv!s:>8}   {ratio}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    if "volumePatches" in f.get("phases", {}):
        print(f"{'PV writes refused with 409 Conflict':44} flotilla {f['phases']['volumePatches']['conflicts']!s:>8}")
    wanted = 1 if args.budget else args.jobs
    return 0 if all(r.get("bound", 0) >= wanted for r in (f, k) if r) else 1


if __name__ == "__main__":
    sys.exit(main())
