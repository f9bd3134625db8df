"""What an idle ``serve`` cycle costs in CPU time, in-process: every job running, nothing new.

``bench/submit.py`` measures the same cycle through a real ``serve`` and
HTTP clients, in wall-clock seconds, which on a shared machine include
waiting for a core. This script skips the API: it stores ``--jobs`` jobs
directly, runs the loop (``ServiceLoop`` with simulated clusters, on the
embedded store or ``--store``) until every job runs, then times
``--cycles`` idle cycles in CPU seconds of the process, per loop phase
(wall-clock) and for the core's session open. It runs against whichever
``flotilla`` is first on ``PYTHONPATH``, so a base checkout can be measured
with the same script::

    python bench/idle_cycle.py                               # 100,000 jobs on 1,000 nodes
    PYTHONPATH=/path/to/base python bench/idle_cycle.py      # the same on another checkout

It is a benchmark, not a test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

from flotilla.config import parse_config
from flotilla.scheduler import Scheduler
from flotilla.service.jobspec import prepare
from flotilla.service.loop import ServiceLoop, service_backends
from flotilla.service.settings import from_config
from flotilla.service.store import Store

CONFIG = """
priorityClasses:
  - {{name: armada-default, priority: 30000, preemptible: false}}
  - {{name: armada-preemptible, priority: 20000, preemptible: true}}
defaultPriorityClass: armada-default
queues:
{queues}
evict: {{probability: 0}}
lease: {{timeout: 300s}}
clusters:
{clusters}
"""

#: The job bench/submit.py submits by default: one small container.
TEMPLATE = {"podSpec": {"containers": [{"name": "main", "image": "busybox",
                                        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"},
                                                      "limits": {"cpu": "250m", "memory": "256Mi"}}}]}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--clusters", type=int, default=2)
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--cycles", type=int, default=7, help="idle cycles timed")
    ap.add_argument("--store", default=None, help="store URL (default: a temporary sqlite file)")
    args = ap.parse_args()
    per_cluster = args.nodes // args.clusters
    clusters = "\n".join(
        f"  - {{name: sim-{c}, kind: simulated, nodes: [{{count: {per_cluster}, namePrefix: n{c}, "
        f"resources: {{cpu: 32, memory: 128Gi}}}}]}}" for c in range(args.clusters))
    queues = "\n".join(f"  - {{name: q{q}, weight: 1, owners: [bench]}}" for q in range(args.queues))
    cfg = parse_config(CONFIG.format(queues=queues, clusters=clusters), "idle-cycle.yaml")
    settings = from_config(cfg)
    store = Store(args.store or f"sqlite:///{tempfile.mkdtemp(prefix='flotilla-idle-')}/bench.db")
    store.sync_queues(settings.queues)
    loop = ServiceLoop(store, settings, Scheduler(cfg), service_backends(cfg), seed=0)
    batch = 5000
    for start in range(0, args.jobs, batch):
        queue = f"q{(start // batch) % args.queues}"
        jobs = [{**TEMPLATE, "clientId": f"c{i}", "priority": i % 10}
                for i in range(start, min(args.jobs, start + batch))]
        _, new = prepare({"queue": queue, "jobSetId": "bench", "jobs": jobs}, settings)
        store.submit(queue, "bench", "bench", new)
    for _ in range(20):   # lease everything, then one more cycle sees it all running
        started = time.process_time()
        report = loop.run_cycle()
        print(f"cycle {report.number}: leased {report.leased}, running {report.running}, "
              f"{time.process_time() - started:.2f} CPU s", file=sys.stderr)
        if report.running >= args.jobs and report.leased == 0:
            break
    cpu, phases, core = [], [], []
    for _ in range(args.cycles):
        started = time.process_time()
        report = loop.run_cycle()
        cpu.append(time.process_time() - started)
        phases.append(report.timings)
        core.append(loop.last_decisions.timings.get("open", 0.0))
    print(f"idle cycle with {report.running} jobs running on {args.nodes} nodes, {args.cycles} cycles: "
          f"CPU median {statistics.median(cpu) * 1000:.1f} ms (min {min(cpu) * 1000:.1f})")
    print("  per phase, wall-clock median (ms): " + ", ".join(
        f"{name} {statistics.median(p[name] for p in phases) * 1000:.1f}" for name in phases[0]))
    print(f"  of which the core's session open (wall-clock median): {statistics.median(core) * 1000:.1f} ms")
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
