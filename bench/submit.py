"""Benchmark the service: submissions per second, time to schedule, API latency, peak memory.

Starts a real ``flotilla serve`` (subprocess, loopback, a temporary embedded
store unless ``--store`` is given) with ``--nodes`` simulated nodes, then:

1. ``--clients`` concurrent clients submit ``--jobs`` jobs through the API in
   batches of ``--batch`` (each job 250m cpu, running until cancelled, so that
   100,000 of them fit on 1,000 32-core nodes);
2. measures how long ``serve`` takes to lease every job (all ``pending`` or
   ``running``), counted from the end of the submissions;
3. from the first submission to the end, a probe submits one small job and
   asks for its status in a loop (in the idle phase, the status only); each probe is labelled with the phase it
   ran in (``submitting``, ``scheduling``, ``idle``), and every latency
   figure is printed with its sample count ``n`` (a p99 of a few samples is
   their maximum, and says so by its ``n``);
4. watches ``--idle-cycles`` more cycles with every job running and nothing
   new, and prints what such an idle cycle costs (median, and per phase),
   in wall-clock seconds and in CPU seconds of the loop's thread;
5. reads the server's peak resident memory (``VmHWM``) before stopping it.

With ``--api-replicas N`` (a PostgreSQL ``--store``), it starts N
``serve --role api`` processes and one ``serve --role scheduler`` instead of
one ``serve``, and the clients spread over the replicas (client k talks to
replica k mod N).

Usage::

    python bench/submit.py                      # 100,000 jobs, 8 clients, 1,000 nodes
    python bench/submit.py --jobs 20000 --nodes 200 --json out.json
    python bench/submit.py --store postgresql+psycopg://... --api-replicas 2
    python bench/submit.py --pod-spec examples/jobs/train.yaml   # every job: that file's first job

With ``--pod-spec`` every job submitted is the first job of that file
(podSpec or podSpecs, labels, annotations, namespace, services, ingress),
with its own clientId and priority: the realistic submission, checked
against the Kubernetes schema like any other.

It is a benchmark, not a test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]

CONFIG = """
priorityClasses:
  - {{name: armada-default, priority: 30000, preemptible: false}}
  - {{name: armada-preemptible, priority: 20000, preemptible: true}}
defaultPriorityClass: armada-default
queues:
{queues}
evict: {{probability: 0}}
lease: {{timeout: 300s}}
cycle: {{period: {period}}}
server: {{listen: "127.0.0.1:{port}"}}
store: {{url: "{store}"}}
auth:
  tokens:
    - {{token: bench-token, user: bench}}
    - {{token: admin-token, user: root, groups: [admins]}}
  adminGroups: [admins]
clusters:
{clusters}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


#: The job every submission repeats (``--pod-spec``); the default is one small container.
TEMPLATE: dict = {"podSpec": {"containers": [{"name": "main", "image": "busybox",
                                              "resources": {"requests": {"cpu": "250m", "memory": "256Mi"},
                                                            "limits": {"cpu": "250m", "memory": "256Mi"}}}]}}


def job(i: int, client: int) -> dict:
    return {**TEMPLATE, "clientId": f"c{client}-{i}", "priority": i % 10}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--clusters", type=int, default=2)
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--period", default="1s", help="cycle.period")
    ap.add_argument("--idle-cycles", type=int, default=5,
                    help="cycles to watch after everything is leased (an idle cycle's cost with every job active)")
    ap.add_argument("--store", default=None, help="store URL (default: a temporary sqlite file)")
    ap.add_argument("--api-replicas", type=int, default=0,
                    help="0: one `serve` (role all); N: N `serve --role api` and one `serve --role scheduler` "
                         "(needs a PostgreSQL --store)")
    ap.add_argument("--json", dest="json_out", default=None, help="write the figures here as JSON")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--pod-spec", default=None, help="a job file: every job is its first job (default: 250m cpu)")
    args = ap.parse_args()
    if args.pod_spec:
        import yaml
        global TEMPLATE
        TEMPLATE = {k: v for k, v in yaml.safe_load(Path(args.pod_spec).read_text())["jobs"][0].items()
                    if k not in ("clientId", "priority")}
        # Running until cancelled, like the default job: the idle cycles are measured with every job running.
        TEMPLATE["annotations"] = {k: v for k, v in (TEMPLATE.get("annotations") or {}).items()
                                   if k != "flotilla.io/simulated-duration"}

    tmp = Path(tempfile.mkdtemp(prefix="flotilla-bench-"))
    store = args.store or f"sqlite:///{tmp}/bench.db"
    roles = ["all"] if args.api_replicas == 0 else ["scheduler"] + ["api"] * args.api_replicas
    ports = [free_port() for _ in roles]
    per_cluster = args.nodes // args.clusters
    clusters = "\n".join(
        f"  - {{name: sim-{c}, kind: simulated, nodes: [{{count: {per_cluster}, namePrefix: n{c}, "
        f"resources: {{cpu: 32, memory: 128Gi}}}}]}}" for c in range(args.clusters))
    queues = "\n".join(f"  - {{name: q{q}, weight: 1, owners: [bench]}}" for q in range(args.queues))
    config = tmp / "serve.yaml"
    config.write_text(CONFIG.format(queues=queues, period=args.period, port=ports[0], store=store, clusters=clusters))
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    log = open(tmp / "serve.log", "wb")     # the scheduling process's log (cycles are read from it)
    procs = []
    for k, (role, port) in enumerate(zip(roles, ports)):
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "flotilla.scheduler_main", "--log-level", "info", "--log-json", "serve", "--config",
             str(config), "--role", role, "--listen", f"127.0.0.1:{port}"], cwd=REPO, env=env,
            stdout=subprocess.DEVNULL, stderr=log if k == 0 else open(tmp / f"api-{k}.log", "wb")))
    urls = [f"http://127.0.0.1:{port}" for role, port in zip(roles, ports) if role != "scheduler"]
    url = urls[0]
    try:
        deadline = time.monotonic() + 60
        for port, proc in zip(ports, procs):
            while True:
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline or proc.poll() is not None:
                    print("serve did not start; see the logs in", tmp, file=sys.stderr)
                    return 1
                time.sleep(0.2)
        headers = {"Authorization": "Bearer bench-token"}
        print(f"serve up on {', '.join(urls)} ({' + '.join(roles)}): {args.nodes} nodes in {args.clusters} clusters, "
              f"store {store}", file=sys.stderr)

        # 3. The probe runs from the first submission to the end, labelled with the phase it ran in.
        probe_lat: list[tuple[str, str, float]] = []      # (phase, kind, seconds)
        phase = ["submitting"]
        stop = threading.Event()

        def probe() -> None:
            with httpx.Client(base_url=url, headers=headers, timeout=60) as http:
                k, last = 0, None
                while not stop.is_set():
                    now = phase[0]
                    if now != "idle" or last is None:   # idle cycles stay idle: status probes only
                        t = time.perf_counter()
                        r = http.post("/v1/submit", json={"queue": "q0", "jobSetId": "probe", "jobs": [job(k, 999)]})
                        probe_lat.append((now, "submit", time.perf_counter() - t))
                        last = r.json()["jobs"][0]["id"] if r.status_code == 200 else last
                        k += 1
                    if last is not None:
                        t = time.perf_counter()
                        http.get(f"/v1/jobs/{last}")
                        probe_lat.append((now, "status", time.perf_counter() - t))
                    time.sleep(0.01)

        prober = threading.Thread(target=probe, daemon=True)  # dies with an early return
        prober.start()

        # 1. Submissions.
        per_client = args.jobs // args.clients
        latencies: list[float] = []
        lock = threading.Lock()
        errors: list[str] = []

        def client(n: int) -> None:
            with httpx.Client(base_url=urls[n % len(urls)], headers=headers, timeout=120) as http:
                for start in range(0, per_client, args.batch):
                    body = {"queue": f"q{n % args.queues}", "jobSetId": f"bench-{n}",
                            "jobs": [job(i, n) for i in range(start, min(per_client, start + args.batch))]}
                    t = time.perf_counter()
                    r = http.post("/v1/submit", json=body)
                    dt = time.perf_counter() - t
                    if r.status_code != 200:
                        errors.append(f"{r.status_code} {r.text[:200]}")
                        return
                    with lock:
                        latencies.append(dt)

        t0 = time.perf_counter()
        threads = [threading.Thread(target=client, args=(n,)) for n in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        submit_seconds = time.perf_counter() - t0
        submitted = per_client * args.clients
        if errors:
            print("submission errors:", errors[:3], file=sys.stderr)
            return 1
        print(f"submitted {submitted} jobs in {submit_seconds:.2f}s: {submitted / submit_seconds:.0f} jobs/s "
              f"(batch p50 {pct(latencies, 50) * 1000:.0f} ms, p99 {pct(latencies, 99) * 1000:.0f} ms, "
              f"n={len(latencies)})", file=sys.stderr)

        # 2. Time to lease everything.
        phase[0] = "scheduling"
        t1 = time.perf_counter()
        leased = 0
        with httpx.Client(base_url=url, headers={"Authorization": "Bearer admin-token"}, timeout=60) as admin:
            while time.perf_counter() - t1 < args.timeout:
                counts = [admin.get(f"/v1/queues/q{q}").json()["jobs"] for q in range(args.queues)]
                leased = sum(c["leased"] + c["pending"] + c["running"] + c["succeeded"] for c in counts)
                if leased >= submitted:
                    break
                time.sleep(0.25)
        schedule_seconds = time.perf_counter() - t1
        phase[0] = "idle"
        print(f"leased {leased} jobs on {args.nodes} nodes {schedule_seconds:.2f}s after the last submission "
              f"({(submit_seconds + schedule_seconds):.2f}s after the first)", file=sys.stderr)
        # 4. A few cycles with everything running and nothing new: what an idle cycle costs with this many jobs.
        before = len(read_cycles(tmp / "serve.log"))
        deadline = time.perf_counter() + 120
        while len(read_cycles(tmp / "serve.log")) < before + args.idle_cycles + 1 and time.perf_counter() < deadline:
            time.sleep(0.5)
        stop.set()
        prober.join()
        memory = read_memory(procs[0].pid)   # the process that schedules (role all or scheduler)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()

    # Cycles from the server's log: which probes overlapped one; what the idle ones at the end cost.
    cycles = read_cycles(tmp / "serve.log")
    busy = [c for c in cycles if c.get("leased", 0) > 0]
    idle = [c for c in cycles[-args.idle_cycles:] if c.get("leased", 0) == 0 and c.get("running", 0) >= submitted]
    cycle_seconds = [sum(v for k, v in c.items() if k.endswith("_s")) for c in busy]
    figures = {
        "jobs": submitted,
        "clients": args.clients,
        "batch": args.batch,
        "nodes": args.nodes,
        "apiReplicas": args.api_replicas,
        "submitSeconds": round(submit_seconds, 3),
        "submissionsPerSecond": round(submitted / submit_seconds, 1),
        "batchLatency": latency(latencies),
        "scheduleSeconds": round(schedule_seconds, 3),
        "leased": leased,
        "busyCycles": len(busy),
        "busyCycleSecondsMax": round(max(cycle_seconds), 3) if cycle_seconds else None,
        "probes": {p: {k: latency([s for p2, k2, s in probe_lat if (p2, k2) == (p, k)]) for k in ("submit", "status")}
                   for p in ("submitting", "scheduling", "idle")},
        "peakRssMiB": memory.get("VmHWM"),
        "rssMiBAtEnd": memory.get("VmRSS"),
        "idleCycles": len(idle),
        "idleCycleSecondsMedian": round(statistics.median(c["seconds"] for c in idle), 3) if idle else None,
        "idleCyclePhasesMedian": {k: round(statistics.median(c[k] for c in idle), 3)
                                  for k in sorted(idle[0]) if k.endswith("_s")} if idle else None,
        # CPU seconds of the loop's thread (absent from servers before the loop logged them): on a shared
        # machine the wall-clock figures above include waiting for a core and for the API's threads.
        "idleCycleCpuSecondsMedian": round(statistics.median(sum(v for k, v in c.items() if k.endswith("_cpu"))
                                                             for c in idle), 3)
        if idle and any(k.endswith("_cpu") for k in idle[0]) else None,
        "idleCycleCpuPhasesMedian": {k: round(statistics.median(c[k] for c in idle), 4)
                                     for k in sorted(idle[0]) if k.endswith("_cpu")}
        if idle and any(k.endswith("_cpu") for k in idle[0]) else None,
        "store": "sqlite (embedded)" if store.startswith("sqlite") else store.split("://")[0],
    }
    print(json.dumps(figures, indent=2))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(figures, indent=2))
    return 0


def latency(seconds: list[float]) -> dict:
    """p50 and p99 in milliseconds, with the sample count they rest on."""
    return {"n": len(seconds), "p50Ms": round(pct(seconds, 50) * 1000, 1) if seconds else None,
            "p99Ms": round(pct(seconds, 99) * 1000, 1) if seconds else None}


def read_memory(pid: int) -> dict[str, float]:
    """The process's peak (VmHWM) and current (VmRSS) resident memory, in MiB, from /proc."""
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in ("VmHWM", "VmRSS"):
                out[name] = round(int(value.split()[0]) / 1024, 1)
    except OSError:
        pass
    return out


def read_cycles(path: Path) -> list[dict]:
    """The ``service.cycle`` records of a serve log, in order."""
    cycles = []
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("event") == "service.cycle":
            cycles.append(rec)
    return cycles


if __name__ == "__main__":
    sys.exit(main())
