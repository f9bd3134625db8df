"""The room a preemption frees, on a fake cluster, while its victim's pod terminates.

One 32-core node runs queue A's preemptible jobs ``keep-1`` and ``keep-2`` (8 cores each) and ``victim``
(16 cores, a long grace period); queue B's non-preemptible ``urgent`` (16 cores) arrives. Eviction is on
(``evict.probability`` 1, the default), so every cycle evicts A's jobs and returns those that fit. The
cycle that preempts ``victim`` gives its room to ``urgent``, whose start is held for the node until the
victim's pod is gone. The cycles in between must see the node as the decision left it (urgent and the two
kept jobs, full), not the victim's terminating pod on top: otherwise the kept jobs cannot return from
eviction and are preempted too.

Outcomes are read back from the API server (which pods exist, on which node, which were deleted).
"""

from __future__ import annotations

import time

import pytest

from flotilla.core.model import Job
from flotilla.kubernetes.pods import GRACE_PERIOD
from flotilla.kubernetes.runner import Runner
from tests.support.kwok_backends import CONFIG, close_all, scheduler_and_backends

pytestmark = pytest.mark.kwok


def job(job_id, queue, cpu, submitted, pc="armada-preemptible", **kwargs) -> Job:
    return Job(job_id, queue, job_set="s", priority_class=pc, requests={"cpu": cpu * 1000}, submitted=submitted,
               **kwargs)


def write_config(tmp_path, cluster, extra: str = "") -> str:
    path = tmp_path / "flotilla.yaml"
    path.write_text(CONFIG.format(clusters=f"  - {{name: kwok-a, kind: kubernetes, kubeconfig: {cluster.kubeconfig}, "
                                           f"context: {cluster.context}{extra}}}"))
    return path


def pods_of(pods: list[dict]) -> dict[str, dict]:
    """Flotilla pods by job id (any state, terminating ones included)."""
    return {p["metadata"]["annotations"]["flotilla.io/job-id"]: p for p in pods
            if "flotilla.io/job-id" in (p["metadata"].get("annotations") or {})}


def live(pods: dict[str, dict]) -> dict[str, str]:
    """Job id -> node of the pods not being deleted."""
    return {job_id: p["spec"].get("nodeName") for job_id, p in pods.items()
            if not p["metadata"].get("deletionTimestamp")}


def start_node(runner: Runner, cluster, victim_grace: str) -> dict:
    """node-1 full of A's preemptible jobs; ``urgent`` arrives and preempts ``victim`` (and only it)."""
    runner.submit([job("keep-1", "A", 8, 0.0), job("keep-2", "A", 8, 1.0),
                   job("victim", "A", 16, 2.0, annotations={GRACE_PERIOD: victim_grace})])
    assert runner.run(lambda r: all(rec.state == "running" for rec in r.jobs.values()), timeout=60)
    assert live(pods_of(cluster.pods())) == {"keep-1": "node-1", "keep-2": "node-1", "victim": "node-1"}

    runner.submit([job("urgent", "B", 16, 3.0, pc="armada-default")])
    result = runner.cycle()
    assert [(p.job.id, p.node) for p in result.decisions.scheduled] == [("urgent", "node-1")]
    assert [j.id for j in result.decisions.preempted] == ["victim"]
    pods = cluster.wait_pods(lambda pods: pods_of(pods)["victim"]["metadata"].get("deletionTimestamp"),
                             what="the victim's pod terminating")
    # The pod's own grace period (a job rebuilt from its pod names none of its own).
    assert pods_of(pods)["victim"]["metadata"]["deletionGracePeriodSeconds"] == int(victim_grace)
    return result


def test_other_jobs_keep_their_room_while_a_preempted_pod_terminates(kwok, tmp_path):
    cluster = kwok["a"]
    cluster.reset(nodes=1)
    config, scheduler, backends = scheduler_and_backends(write_config(tmp_path, cluster))
    backend = backends["kwok-a"]
    try:
        runner = Runner(scheduler, backends)
        start_node(runner, cluster, victim_grace="8")
        assert backend.held() == {"node-1": ["urgent"]}

        preempted, scheduled = [], []
        cycles_while_terminating = 0
        victim_gone = urgent_created = None
        t0 = time.monotonic()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            result = runner.cycle()
            preempted += [j.id for j in result.decisions.preempted]
            scheduled += [(p.job.id, p.node) for p in result.decisions.scheduled]
            pods = pods_of(cluster.pods())
            if "victim" in pods:
                assert pods["victim"]["metadata"].get("deletionTimestamp")
                assert "urgent" not in pods, "the preemptor's pod was made while its victim's pod was there"
                assert live(pods) == {"keep-1": "node-1", "keep-2": "node-1"}, (preempted, scheduled)
                assert backend.held() == {"node-1": ["urgent"]}
                cycles_while_terminating += 1
            elif victim_gone is None:
                victim_gone = time.monotonic()
            if "urgent" in pods and urgent_created is None:
                urgent_created = time.monotonic()
            if urgent_created is not None and pods["urgent"]["status"].get("phase") == "Running":
                break
            time.sleep(0.2)
        # Many cycles ran while the victim's pod terminated, and none took anything from the node.
        assert cycles_while_terminating >= 5, (cycles_while_terminating, victim_gone - t0)
        assert preempted == [] and scheduled == []
        assert victim_gone is not None and urgent_created is not None and urgent_created >= victim_gone
        for _ in range(3):
            result = runner.cycle()
            assert result.decisions.preempted == [] and result.decisions.scheduled == []
            time.sleep(0.2)
        runner.pump_events()
        assert live(pods_of(cluster.pods())) == {"keep-1": "node-1", "keep-2": "node-1", "urgent": "node-1"}
        assert {job_id: (rec.state, rec.node, rec.preemptions) for job_id, rec in runner.jobs.items()} == {
            "keep-1": ("running", "node-1", 0), "keep-2": ("running", "node-1", 0),
            "urgent": ("running", "node-1", 0), "victim": ("queued", None, 1)}
        assert not [p for p in cluster.pods() if p["status"].get("reason", "").startswith("OutOf")]
    finally:
        close_all(backends)


def test_a_preempted_pod_that_does_not_go_counts_again_after_stuck_pod_expiry(kwok, tmp_path):
    """The victim's pod stays (a grace period far past ``stuckPodExpiry``): for ``stuckPodExpiry`` the node
    is as the preemption left it; then the held start is given up (``lost``, retried) and the pod's room
    counts again, so the retried start has to make room of its own."""
    cluster = kwok["a"]
    cluster.reset(nodes=1)
    config, scheduler, backends = scheduler_and_backends(write_config(tmp_path, cluster, ", stuckPodExpiry: 5s"))
    backend = backends["kwok-a"]
    try:
        now = [time.time()]
        backend.clock = lambda: now[0]   # the backend's own clock, moved by hand: stuckPodExpiry counts on it
        runner = Runner(scheduler, backends)
        start_node(runner, cluster, victim_grace="120")
        assert backend.held() == {"node-1": ["urgent"]}
        victim_pod = pods_of(cluster.pods())["victim"]["metadata"]["name"]

        # For stuckPodExpiry after the victim's delete, nothing is decided on the node.
        for second in range(5):
            now[0] += 1.0 if second else 0.0
            result = runner.cycle()
            assert result.decisions.preempted == [] and result.decisions.scheduled == [], second
            assert backend.held() == {"node-1": ["urgent"]}
            assert live(pods_of(cluster.pods())) == {"keep-1": "node-1", "keep-2": "node-1"}
            time.sleep(0.2)
        # Then the held start is given up (lost: queued again) and, in the same cycle, the node is seen with the
        # stuck pod's room taken: the retried start preempts the kept jobs for room of its own.
        now[0] += 1.0
        result = runner.cycle()
        urgent = runner.jobs["urgent"]
        assert [state for _, state, _, _ in urgent.history] == ["submitted", "leased", "queued", "leased"]
        assert urgent.reason == (f"lost on cluster kwok-a: node node-1 has no room for the pod: victim's pod has been "
                                 f"terminating for stuckPodExpiry 5s (default/{victim_pod}) (retry 1 of 3)")
        assert [(p.job.id, p.node) for p in result.decisions.scheduled] == [("urgent", "node-1")]
        assert sorted(j.id for j in result.decisions.preempted) == ["keep-1", "keep-2"]
        assert backend.snapshot().foreign == {"node-1": {"cpu": 16000, "pods": 1}}
        assert runner.run(lambda r: r.jobs["urgent"].state == "running", timeout=60)
        pods = pods_of(cluster.pods())
        assert live(pods) == {"urgent": "node-1"}
        assert pods["victim"]["metadata"].get("deletionTimestamp")
        assert {job_id: (rec.state, rec.preemptions) for job_id, rec in runner.jobs.items()} == {
            "keep-1": ("queued", 1), "keep-2": ("queued", 1), "urgent": ("running", 0), "victim": ("queued", 1)}
        assert not [p for p in cluster.pods() if p["status"].get("reason", "").startswith("OutOf")]
    finally:
        close_all(backends)


SERVE_CONFIG = """
priorityClasses:
  - {name: armada-default, priority: 30000, preemptible: false}
  - {name: armada-preemptible, priority: 20000, preemptible: true}
defaultPriorityClass: armada-default
queues:
  - {name: A, weight: 1, owners: [alice]}
  - {name: B, weight: 1, owners: [bob]}
evict: {probability: 1.0}
lease: {timeout: 20s}
cycle: {period: 0.2s}
server: {listen: "127.0.0.1:PORT"}
store: {url: "sqlite:///DB"}
auth:
  tokens:
    - {token: alice-token, user: alice}
    - {token: bob-token, user: bob}
clusters:
"""


def test_the_service_preempts_only_the_victim_while_its_pod_terminates(kwok, tmp_path):
    """The same node through ``flotilla serve`` (its loop, store and leases): the service builds its snapshot from
    its store's leases and the backend's foreign usage, and preempts nothing more while the victim terminates."""
    import json

    from tests.support.serve import Server, cli, wait_for, write_file
    from tests.support.service import job as job_entry

    cluster = kwok["a"]
    cluster.reset(nodes=1)
    srv = Server(tmp_path, SERVE_CONFIG + f"  - {{name: kwok-a, kind: kubernetes, kubeconfig: {cluster.kubeconfig}, "
                                          f"context: {cluster.context}}}\n").start()

    def submit(user, queue, name, **spec) -> str:
        path = write_file(tmp_path, f"{name}.yaml", {"queue": queue, "jobSetId": name,
                                                     "jobs": [job_entry(name, **spec)]})
        out = cli(srv, user, "submit", str(path), "--output", "json")
        assert out.returncode == 0, out.stderr
        [submitted] = json.loads(out.stdout)["jobs"]
        return submitted["id"]

    try:
        ids = {}
        for name in ("keep-1", "keep-2"):
            ids[name] = submit("alice", "A", name, cpu="8", pc="armada-preemptible")
            wait_for(lambda: pods_of(cluster.pods()).get(ids[name], {}).get("status", {}).get("phase") == "Running",
                     timeout=60)
        ids["victim"] = submit("alice", "A", "victim", cpu="16", pc="armada-preemptible",
                               terminationGracePeriodSeconds=8)
        wait_for(lambda: pods_of(cluster.pods()).get(ids["victim"], {}).get("status", {}).get("phase") == "Running",
                 timeout=60)
        names = {job_id: name for name, job_id in ids.items()}
        ids["urgent"] = submit("bob", "B", "urgent", cpu="16")
        names[ids["urgent"]] = "urgent"

        pods = wait_for(lambda: (lambda pods: pods if pods[ids["victim"]]["metadata"].get("deletionTimestamp")
                                 else None)(pods_of(cluster.pods())), timeout=60)
        assert pods[ids["victim"]]["metadata"]["deletionGracePeriodSeconds"] == 8
        while ids["victim"] in pods:
            # While the victim's pod terminates (the service cycling every 0.2 s): the kept jobs keep their pods,
            # the preemptor has none yet.
            assert {names[job_id]: node for job_id, node in live(pods).items()} == {"keep-1": "node-1",
                                                                                    "keep-2": "node-1"}
            time.sleep(0.2)
            pods = pods_of(cluster.pods())
        wait_for(lambda: pods_of(cluster.pods()).get(ids["urgent"], {}).get("status", {}).get("phase") == "Running",
                 timeout=60)
        time.sleep(1.0)   # five more cycles
        assert {names[job_id]: node for job_id, node in live(pods_of(cluster.pods())).items()} == {
            "keep-1": "node-1", "keep-2": "node-1", "urgent": "node-1"}
    finally:
        srv.kill()
    store = srv.store()
    try:
        assert [names[e["jobId"]] for e in store.all_events() if e["kind"] == "preempted"] == ["victim"]
        states = store.job_states()
        assert {name: states[job_id] for name, job_id in ids.items()} == {
            "keep-1": "running", "keep-2": "running", "urgent": "running", "victim": "preempted"}
    finally:
        store.close()
