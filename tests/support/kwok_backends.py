"""The scheduler and its Kubernetes backends in this process, on the session's KWOK clusters."""

import time
from flotilla.core.model import Job
from flotilla.plugin_manager import make_backends


CONFIG = """
plugins:
  - name: assetfairness
  - name: bestfit
  - name: gang
  - name: priorityclass
  - name: predicates
priorityClasses:
  - {{name: armada-default, priority: 30000, preemptible: false}}
  - {{name: armada-preemptible, priority: 20000, preemptible: true}}
defaultPriorityClass: armada-default
queues: [{{name: A, weight: 1}}, {{name: B, weight: 1}}]
lease: {{timeout: 60s}}
gracePeriod: {{default: 1s, max: 300s}}   # preempted pods go 1 s after their deletion: the tests wait for them
clusters:
{clusters}
"""


def write_config(tmp_path, kwok, names=("a", "b"), rename=None):
    rename = rename or {}
    entries = "\n".join(
        f"  - {{name: {rename.get(key, 'kwok-' + key)}, kind: kubernetes, kubeconfig: {kwok[key].kubeconfig}, "
        f"context: {kwok[key].context}}}" for key in names)
    path = tmp_path / "flotilla.yaml"
    path.write_text(CONFIG.format(clusters=entries))
    return path


def scheduler_and_backends(config_path):
    from flotilla.config import load_config
    from flotilla.scheduler import Scheduler

    config = load_config(config_path)
    scheduler = Scheduler(config)
    backends = make_backends(config, scheduler.pm)
    for backend in backends.values():
        assert backend.wait_synced(30), f"{backend.name} did not sync"
    return config, scheduler, backends


def close_all(backends):
    for backend in backends.values():
        backend.close()


def job(job_id, queue, cpu=1, submitted=0, pc="armada-preemptible", **kwargs):
    return Job(job_id, queue, job_set=queue.lower(), priority_class=pc, requests={"cpu": cpu * 1000},
               submitted=submitted, **kwargs)


def wait_idle(backends, runner=None, settle=0.3):
    for backend in backends.values():
        assert backend.wait_idle(30)
    time.sleep(settle)
    if runner is not None:
        runner.pump_events()
