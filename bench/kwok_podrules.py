"""Pods bound per second with pod rules, Flotilla vs kube-scheduler, on one KWOK cluster.

A benchmark, not a test. One fake cluster (1,000 nodes of 32 cores by
default) and ``--jobs`` one-core pods (5,000), dealt round-robin over
``--apps`` apps (10; each pod labelled ``app: app-<k>``), every pod carrying
one rule (``--rule``):

* ``anti-affinity``: required pod anti-affinity against its own app on
  ``kubernetes.io/hostname`` (one pod of an app per node, as a chart's "one
  replica per node"); 5,000 pods of 10 apps fit 1,000 nodes five to a node;
* ``spread``: a topology spread constraint, ``maxSkew: 1`` on
  ``kubernetes.io/hostname``, ``DoNotSchedule``, selecting its own app.

Both schedulers talk to the same API server and place the same pods (the
same podSpec, the same labels); one watch (the recorder of
``bench/kwok_throughput.py``) times every pod's first bind and Running.

* kube-scheduler (client limits 5,000/10,000 QPS, as ``bench/kwok_throughput.py``
  starts it): the pods are created while it runs (t0 = the first creation),
  with ``schedulerName: default-scheduler``;
* Flotilla: at t0 the jobs (each with the pod's labels and rules) are
  submitted to its queues; its cycles place them and its backend creates each
  pod bound to its node.

Between the runs every pod is deleted. After each run the bench checks the
rule on the API server's view (pods sharing a node with a pod of their app,
or the largest skew between nodes per app) and prints it. Pods bound per
second counts from the first bind to the last.

    python bench/kwok_podrules.py --rule anti-affinity     # 1,000 nodes, 5,000 pods
    python bench/kwok_podrules.py --rule spread --nodes 100 --jobs 500 --json out.json
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kwok_common  # noqa: E402
import kwok_throughput  # noqa: E402
from kwok_throughput import (NAMESPACE, CpuMeter, RecorderProcess, cpu_seconds, delete_all,  # noqa: E402
                             start_kube_scheduler, stop_process)

from flotilla.core.backend import PodTemplate  # noqa: E402
from flotilla.core.model import Job  # noqa: E402
from flotilla.core.podrules import parse_pod_rules  # noqa: E402
from flotilla.kubernetes.client import ApiError, KubeError  # noqa: E402
from flotilla.kubernetes.pods import PodSettings, pod_manifest  # noqa: E402

HOSTNAME = "kubernetes.io/hostname"
CONTAINER = {"name": "c", "image": "registry.k8s.io/pause:3.10",
             "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}


def rule_spec(rule: str, app: str) -> dict:
    """The podSpec fields of ``rule`` for a pod of ``app``."""
    selector = {"matchLabels": {"app": app}}
    if rule == "anti-affinity":
        return {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": selector, "topologyKey": HOSTNAME}]}}}
    return {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": HOSTNAME,
                                           "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector}]}


def templates(rule: str, apps: int) -> list[PodTemplate]:
    """One pod template per app: the podSpec with its rule, the app label."""
    out = []
    for k in range(apps):
        app = f"app-{k}"
        spec = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [dict(CONTAINER)],
                **rule_spec(rule, app)}
        out.append(PodTemplate(spec, None, {"app": app}, {}, 0))
    return out


def jobs_for(count: int, queues: int, rule: str, shapes: list[PodTemplate]) -> tuple[list[Job], dict[str, PodTemplate]]:
    """The jobs (each with its pod's labels and parsed rules; equal rules shared) and each job's template."""
    rules = [parse_pod_rules(t.pod_spec.get("affinity"), t.pod_spec.get("topologySpreadConstraints"), NAMESPACE,
                             t.labels) for t in shapes]
    jobs, by_job = [], {}
    for i in range(count):
        k = i % len(shapes)
        job = Job(f"job-{i:05d}", f"q{i % queues}", job_set=f"set-{i % queues}", priority_class="armada-default",
                  submitted=float(i), requests={"cpu": 1000}, labels=dict(shapes[k].labels), namespace=NAMESPACE,
                  pod_rules=rules[k])
        jobs.append(job)
        by_job[job.id] = shapes[k]
    return jobs, by_job


def check(client, rule: str) -> dict:
    """The rule as the API server's pods show it: pods sharing a node with a pod of their app (anti-affinity), the
    largest difference between nodes in one app's pods (spread, over the nodes of the cluster)."""
    pods = client.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
    nodes = [n["metadata"]["name"] for n in client.get("/api/v1/nodes")["items"]]
    per_app: dict[str, Counter] = defaultdict(Counter)
    for pod in pods:
        node = pod["spec"].get("nodeName")
        if node:
            per_app[pod["metadata"]["labels"]["app"]][node] += 1
    if rule == "anti-affinity":
        return {"podsSharingANodeWithTheirApp": sum(n - 1 for c in per_app.values() for n in c.values() if n > 1)}
    return {"largestSkew": max((max(c.values()) - min(c.get(n, 0) for n in nodes) for c in per_app.values()),
                               default=0)}


def _create(client, manifest: dict, attempts: int = 5) -> None:
    """Create one pod, again after a timeout of a loaded API server (one that exists already counts)."""
    for attempt in range(attempts):
        try:
            client.create_pod(NAMESPACE, manifest)
            return
        except ApiError as exc:
            if exc.status == 409:
                return
            raise
        except KubeError:
            if attempt == attempts - 1:
                raise
            time.sleep(1.0)


def run_kube_scheduler(cluster, bin_dir: Path, client, recorder, jobs, by_job, workers: int, timeout: float,
                       rule: str) -> dict:
    settings = PodSettings(namespace=NAMESPACE, scheduler_name="default-scheduler", name_prefix="kube-s-",
                           set_priority_class_name=False)
    meter = CpuMeter(cluster)
    proc, log = start_kube_scheduler(cluster, bin_dir)
    try:
        time.sleep(5)  # informers synced, nothing to schedule yet
        print(f"kube-scheduler running; creating {len(jobs)} pods", file=sys.stderr)
        t0 = time.time()
        started = time.monotonic()
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(lambda job: _create(client, pod_manifest(job, None, 0, settings,
                                                                   template=by_job[job.id])), jobs))
        created = time.monotonic() - started
        print(f"  created in {created:.1f}s", file=sys.stderr)
        recorder.wait("running", len(jobs), timeout)
        cpu = meter.stop(**{"kube-scheduler": cpu_seconds(proc.pid)})
    finally:
        stop_process(proc)
    stats = recorder.stats(t0, len(jobs))
    stats.update(creationSeconds=round(created, 2), cpuSeconds=cpu, log=str(log), **check(client, rule))
    return stats


def run_flotilla(cluster, client, recorder, jobs, by_job, queues: int, workers: int, period: float, timeout: float,
                 rule: str) -> dict:
    """``bench/kwok_throughput.py``'s Flotilla run, each start given its own job's template (labels and rule)."""
    from flotilla.kubernetes.backend import KubernetesCluster

    apply = KubernetesCluster.apply

    def templated(self, decisions):
        decisions.templates = {p.job.id: by_job[p.job.id] for p in decisions.start if p.job.id in by_job}
        return apply(self, decisions)

    kwok_throughput.TEMPLATE = None
    KubernetesCluster.apply = templated
    try:
        stats = kwok_throughput.run_flotilla(cluster, recorder, jobs, queues, workers, period, timeout)
    finally:
        KubernetesCluster.apply = apply
    stats.update(check(client, rule))
    return stats


def main(argv=None) -> int:
    parser = kwok_common.parser(__doc__, "flbench", timeout=1800)
    parser.add_argument("--rule", choices=("anti-affinity", "spread"), required=True)
    parser.add_argument("--apps", type=int, default=10)
    args = parser.parse_args(argv)

    shapes = templates(args.rule, args.apps)
    jobs, by_job = jobs_for(args.jobs, args.queues, args.rule, shapes)
    bench = kwok_common.start(args)
    cluster, bin_dir = bench.cluster, bench.bin_dir
    results: dict = {"rule": args.rule, "nodes": args.nodes, "jobs": args.jobs, "apps": args.apps,
                     "cpus": os.cpu_count()}
    client = cluster.client(pool_size=args.workers + 8)
    recorder = None
    try:
        recorder = RecorderProcess(cluster, NAMESPACE)
        if not args.skip_kube_scheduler:
            results["kubeScheduler"] = run_kube_scheduler(cluster, bin_dir, client, recorder, jobs, by_job,
                                                          args.workers, args.timeout, args.rule)
            print(json.dumps(results["kubeScheduler"]), file=sys.stderr)
            delete_all(client, recorder, args.workers)
        if not args.skip_flotilla:
            results["flotilla"] = run_flotilla(cluster, client, recorder, jobs, by_job, args.queues, args.workers,
                                               args.period, args.timeout, args.rule)
            print(json.dumps(results["flotilla"]), file=sys.stderr)
    finally:
        if recorder is not None:
            recorder.close()
        client.close()
        bench.down()
    for who in ("kubeScheduler", "flotilla"):
        if who in results:
            r = results[who]
            print(f"{who}: {r.get('podsBoundPerSecond')} pods bound/s (first to last bind), {r.get('bound')} bound, "
                  f"{ {k: v for k, v in r.items() if k in ('podsSharingANodeWithTheirApp', 'largestSkew')} }")
    if "kubeScheduler" in results and "flotilla" in results and results["kubeScheduler"].get("podsBoundPerSecond"):
        print(f"flotilla / kube-scheduler: "
              f"{results['flotilla']['podsBoundPerSecond'] / results['kubeScheduler']['podsBoundPerSecond']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
