"""A run given up when its node was lost, whose pod reports success once the node returns, keeps its success:
a job queued again meanwhile is succeeded, a rerun is cancelled; node-lost requeues use none of the job's retries.

The service loop runs on a fake clock against a scripted cluster (what the Kubernetes backend reports:
``lost`` with cause NodeLost, then ``succeeded`` with cause NodeReturned; tests/test_kube_node_returned.py has the
backend's side from watch events)."""

from __future__ import annotations

from flotilla.core.backend import NODE_RETURNED, JobEvent
from flotilla.core.model import ClusterSnapshot, JobState, Node
from flotilla.scheduler import Scheduler
from flotilla.service.jobspec import prepare
from flotilla.service.loop import ServiceLoop
from flotilla.service.settings import from_config
from flotilla.service.store import Store, rebuild_states
from tests.support.service import config, job_file, job as job_item
from dataclasses import replace


class Scripted:
    """One node (absent while ``down``); starts run until told otherwise; events are pushed by the test."""

    name = "c1"

    def __init__(self):
        self.down = False
        self.running: dict = {}
        self.events: list[JobEvent] = []
        self.cancelled: list[str] = []
        self.starts = 0

    def snapshot(self):
        nodes = [] if self.down else [Node("n1", self.name, {"cpu": 8000, "memory": 32 * 2**30})]
        return ClusterSnapshot(self.name, nodes, list(self.running.values()), {})

    def apply(self, decisions):
        for job in list(decisions.preempt) + list(decisions.cancel):
            if self.running.pop(job.id, None) is not None:
                self.cancelled.append(job.id)
                self.events.append(JobEvent(job.id, "cancelled", self.name, "n1", 0.0, "cancelled"))
        for placement in decisions.start:
            self.starts += 1
            self.running[placement.job.id] = replace(placement.job, state=JobState.RUNNING, cluster=self.name,
                                                     node=placement.node)
            self.events.append(JobEvent(placement.job.id, "running", self.name, placement.node, 0.0))

    def poll_events(self):
        out, self.events = self.events, []
        return out

    def lose(self, job_id: str):
        self.running.pop(job_id)
        self.events.append(JobEvent(job_id, "lost", self.name, "n1", 0.0, "node n1 lost: NotReady for 301s "
                                    "(nodeLostTimeout 300s)", cause="NodeLost"))


def setup(tmp_path):
    cfg = config()
    settings = from_config(cfg)
    now = [1_000_000.0]
    store = Store(f"sqlite:///{tmp_path}/late.db")
    store.sync_queues(settings.queues)
    cluster = Scripted()
    loop = ServiceLoop(store, settings, Scheduler(cfg), {"c1": cluster}, clock=lambda: now[0], seed=0)
    _, new = prepare(job_file("A", "s", [job_item()]), settings)
    [job_id] = [s.id for s in store.submit("A", "s", "alice", new, now=now[0])]

    def cycle(times=1):
        for _ in range(times):
            loop.run_cycle()
            now[0] += 1.0
    return store, cluster, job_id, cycle


def kinds(store, job_id):
    return [(e["kind"], e["reason"]) for e in store.events("A", "s") if e["jobId"] == job_id]


def test_a_job_queued_again_after_its_node_was_lost_keeps_the_success_its_pod_reports_later(tmp_path):
    store, cluster, job_id, cycle = setup(tmp_path)
    cycle(2)
    assert store.get_job(job_id)["state"] == "running"
    cluster.down = True     # NotReady: nowhere to run it again
    cluster.lose(job_id)
    cycle(2)
    row = store.get_job(job_id)
    assert (row["state"], row["retries"]) == ("queued", 0)
    cluster.events.append(JobEvent(job_id, "succeeded", "c1", "n1", 0.0,
                                   "succeeded on node n1, reported once the node returned", cause=NODE_RETURNED))
    cluster.down = False
    cycle(2)
    row = store.get_job(job_id)
    assert (row["state"], row["reason"]) == (
        "succeeded", "succeeded on node n1, reported once the node returned (cluster c1)")
    assert cluster.starts == 1
    assert [k for k, _ in kinds(store, job_id)] == [
        "submitted", "queued", "leased", "pending", "running", "lease-expired", "queued", "succeeded"]
    assert rebuild_states(store.all_events()) == store.job_states()


def test_a_rerun_is_cancelled_when_the_first_run_reports_success(tmp_path):
    store, cluster, job_id, cycle = setup(tmp_path)
    cycle(2)
    cluster.lose(job_id)
    cycle(3)
    assert store.get_job(job_id)["state"] == "running" and cluster.starts == 2   # rerun
    cluster.events.append(JobEvent(job_id, "succeeded", "c1", "n1", 0.0,
                                   "succeeded on node n1, reported once the node returned", cause=NODE_RETURNED))
    cycle(2)
    row = store.get_job(job_id)
    assert (row["state"], row["retries"]) == ("succeeded", 0)
    assert row["reason"] == ("succeeded on node n1, reported once the node returned (cluster c1); its rerun is "
                             "cancelled")
    assert cluster.cancelled == [job_id] and not cluster.running
    assert [k for k, _ in kinds(store, job_id)].count("succeeded") == 1
    assert rebuild_states(store.all_events()) == store.job_states()


def test_the_reason_a_pod_waits_on_its_node_is_the_jobs_until_it_runs(tmp_path):
    store, cluster, job_id, cycle = setup(tmp_path)
    cluster.apply_running = cluster.apply
    waiting = 'container main: ImagePullBackOff: Back-off pulling image "registry.example/train:1"'

    def apply(decisions):   # the pod is made but waits on its node: no running event yet
        cluster.apply_running(decisions)
        cluster.events = [ev for ev in cluster.events if ev.kind != "running"]
        for placement in decisions.start:
            cluster.events.append(JobEvent(placement.job.id, "waiting", "c1", "n1", 0.0, waiting))
    cluster.apply = apply
    cycle(2)
    row = store.get_job(job_id)
    assert (row["state"], row["reason"]) == ("pending", waiting)
    cluster.events.append(JobEvent(job_id, "running", "c1", "n1", 0.0))
    cycle(1)
    row = store.get_job(job_id)
    assert (row["state"], row["reason"]) == ("running", "")
