"""In-cluster pods on a KWOK cluster: pods that name Flotilla as their scheduler, taken in, queued, bound.

The scheduling loop runs in this process against the session's fake
cluster ``a`` (two 32-core nodes); pods are made through its API server as
kubectl would make them, and everything asserted is read back from the API
server (bindings, conditions, Events) or from the store.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from flotilla.kubernetes.client import KubeError, pod_path
from flotilla.scheduler import Scheduler
from flotilla.service.settings import from_config
from flotilla.service.store import Store
from tests.support.incluster import (SERVE_CONFIG, Harness, bound_per_node, condition, ensure_podgroup_crd, fill,
                                     live, make_job, make_namespace, make_pod)

pytestmark = pytest.mark.kwok


def took_over(node: str, victims: list[str]):
    """The seed example's end of preemption: B's 32 bound on ``node``, none of A's ``victims`` left."""
    return lambda pods: bound_per_node(pods, "team-b") == {node: 32} and not any(
        p["metadata"]["name"] in victims for p in pods)


def told_why(count: int):
    """``count`` of B's pods wait unbound, each told why by Flotilla."""
    def holds(pods) -> bool:
        return sum(1 for p in live(pods, "team-b") if not p["spec"].get("nodeName")
                   and (condition(p, "PodScheduled") or {}).get("message", "").startswith("flotilla: ")) == count
    return holds


def placements(victims: list[str]):
    """What a timeout in the seed example reports: A's and B's pods bound per node, the victims still there, and
    B's unbound pods counted by the message they were told."""
    def seen(pods) -> str:
        left = sorted(p["metadata"]["name"] for p in pods if p["metadata"]["name"] in victims)
        waiting = Counter((condition(p, "PodScheduled") or {}).get("message") for p in live(pods, "team-b")
                          if not p["spec"].get("nodeName"))
        return (f"A bound {bound_per_node(pods, 'team-a')}, B bound {bound_per_node(pods, 'team-b')}, "
                f"victims left {left}, B waiting by message {dict(waiting)}")
    return seen


class PodRecorder:
    """Every condition of type ``kind`` any pod showed, by pod name, from a watch (the pods may be gone since)."""

    def __init__(self, cluster, kind: str):
        self.cluster = cluster
        self.kind = kind
        self.seen: dict[str, dict] = {}
        self._stop = threading.Event()
        rv = cluster.client.get("/api/v1/pods")["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._run, args=(rv,), daemon=True)
        self._thread.start()

    def _run(self, rv):
        while not self._stop.is_set():
            try:
                for event in self.cluster.client.watch("/api/v1/pods", rv, 30, self._stop):
                    obj = event.get("object") or {}
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    if event["type"] == "BOOKMARK":
                        continue
                    found = condition(obj, self.kind)
                    if found is not None:
                        self.seen.setdefault(obj["metadata"]["name"], found)
            except KubeError:
                time.sleep(0.1)

    def stop(self):
        self._stop.set()


def test_the_seed_two_queue_example_through_pods(harness):
    """Armada's example: A's 40 preemptible pods run 32 + 8; B's 50 arrive: A keeps 32, its 8 on the second node
    are told DisruptionTarget and deleted, B runs 32 there, 18 of B wait told why."""
    c = harness.cluster
    for i in range(40):
        make_pod(c, "team-a", f"a-{i}", labels={"flotilla.io/job-set": "job-a"}, priority_class="armada-preemptible")
    harness.seen(40)
    for _ in range(3):
        harness.cycle()
        pods = c.pods()
        if sum(bound_per_node(pods, "team-a").values()) == 40:
            break
    assert sorted(bound_per_node(c.pods(), "team-a").values()) == [8, 32]
    full = next(node for node, n in bound_per_node(c.pods(), "team-a").items() if n == 32)
    other = "node-2" if full == "node-1" else "node-1"
    # The store knows them as jobs of source cluster, one per pod, keyed by the pod's uid.
    jobs = harness.store.list_jobs(queue="A")
    assert len(jobs) == 40 and {j["source"] for j in jobs} == {"cluster"}
    assert {j["jobSet"] for j in jobs} == {"job-a"}
    assert sorted(j["pod"]["name"] for j in jobs) == sorted(f"a-{i}" for i in range(40))

    recorder = PodRecorder(c, "DisruptionTarget")
    try:
        for i in range(50):
            make_pod(c, "team-b", f"b-{i}", priority_class="armada-preemptible")
        harness.seen(50)
        victims = sorted(p["metadata"]["name"] for p in live(c.pods(), "team-a") if p["spec"]["nodeName"] == other)
        assert len(victims) == 8
        seen = placements(victims)
        pods = harness.settle(took_over(other, victims), "B bound, victims gone", cycles=3,   # within three cycles
                              seen=seen)
        assert bound_per_node(pods, "team-a") == {full: 32}
        assert bound_per_node(pods, "team-b") == {other: 32}
        assert sorted(name for name in recorder.seen if name.startswith("a-")) == victims
        assert {(v["status"], v["reason"]) for v in recorder.seen.values()} == {("True", "PreemptionByScheduler")}
        # The 18 of B left wait, told why by Flotilla.
        pods = harness.settle(told_why(18), "18 pods told why", seen=seen)
        waiting = [p for p in live(pods, "team-b") if not p["spec"].get("nodeName")]
        assert len(waiting) == 18
        assert {condition(p, "PodScheduled")["message"] for p in waiting} == {"flotilla: 0/2 nodes are available: 2 Insufficient cpu"}
        assert {(condition(p, "PodScheduled")["status"], condition(p, "PodScheduled")["reason"]) for p in waiting} \
            == {("False", "Unschedulable")}
    finally:
        recorder.stop()
    states = {}
    for j in harness.store.list_jobs():
        states.setdefault((j["queue"], j["state"]), 0)
        states[(j["queue"], j["state"])] += 1
    assert states[("A", "preempted")] == 8 and states[("B", "queued")] == 18


def test_api_jobs_and_pods_share_the_cluster_by_queue_weights(kwok, tmp_path):
    """Queue A (weight 1) fed through the API, queue B (weight 3) through pods: 16 and 48 of the 64 cores."""
    from flotilla.service.jobspec import prepare
    from tests.support.service import job, job_file

    cluster = kwok["a"]
    make_namespace(cluster, "team-b", "B")
    cluster.create_namespace("flotilla-jobs")
    h = Harness(tmp_path, cluster)
    h.cfg.queues[1].weight = 3.0
    h.settings = from_config(h.cfg)
    h.store.sync_queues(h.settings.queues)
    h.loop.reconfigure(Scheduler(h.cfg), h.settings)
    try:
        _, new = prepare(job_file("A", "api", [job(f"j{i}") for i in range(64)]), h.settings)
        h.store.submit("A", "api", "alice", new)
        for i in range(64):
            make_pod(cluster, "team-b", f"b-{i}", priority_class="armada-default")   # the API jobs' class
        h.seen(64)
        for _ in range(3):
            h.cycle()
        pods = h.settle(lambda pods: len([p for p in live(pods) if p["spec"].get("nodeName")]) == 64, "64 bound")
        api_pods = [p for p in live(pods, "flotilla-jobs") if p["spec"].get("nodeName")]
        in_cluster = [p for p in live(pods, "team-b") if p["spec"].get("nodeName")]
        assert (len(api_pods), len(in_cluster)) == (16, 48)
        counts = {(j["queue"], j["source"], j["state"]) for j in h.store.list_jobs(states=["queued"])}
        assert counts == {("A", "api", "queued"), ("B", "cluster", "queued")}
        assert len(h.store.list_jobs(queue="A", states=["queued"])) == 48
        assert len(h.store.list_jobs(queue="B", states=["queued"])) == 16
    finally:
        h.close()


def test_a_gang_of_four_pods_by_annotations_is_bound_all_or_nothing(harness):
    c = harness.cluster
    fill(c, {"node-1": 0, "node-2": 2})   # 2 free cores
    gang = {"armadaproject.io/gangId": "g", "armadaproject.io/gangCardinality": "4"}
    for i in range(3):
        make_pod(c, "team-b", f"g-{i}", annotations=gang)
    harness.seen(3)
    harness.cycle()
    pods = harness.settle(lambda pods: all((condition(p, "PodScheduled") or {}).get("message") ==
                                           "flotilla: gang 'g': 3 of its 4 pods waiting"
                                           for p in live(pods, "team-b")), "incomplete gang told")
    assert harness.store.list_jobs(queue="B") == []
    make_pod(c, "team-b", "g-3", annotations=gang)
    harness.seen(4)
    for _ in range(2):
        harness.cycle()
    assert bound_per_node(c.pods(), "team-b") == {}
    jobs = harness.store.list_jobs(queue="B")
    assert len(jobs) == 4 and {j["state"] for j in jobs} == {"queued"}
    assert {j["gang"]["id"] for j in jobs} == {"team-b/g"}
    # Room for four on node-2 (its two spare cores freed): all four bound there, in one cycle.
    harness.settle(lambda pods: {(condition(p, "PodScheduled") or {}).get("message") for p in live(pods, "team-b")}
                   == {"flotilla: gang B/team-b/g: 2 of 4 members fit"}, "the gang told why")
    for name in ("spare-node-2-0", "spare-node-2-1"):
        c.client.delete(pod_path("default", name), {"gracePeriodSeconds": 0})
    harness.settle(lambda pods: not any(p["metadata"]["name"].startswith("spare-node-2") for p in pods), "freed")
    time.sleep(0.5)   # the backend's watch sees the room before the next cycle
    harness.cycle()
    pods = harness.settle(lambda pods: bound_per_node(pods, "team-b") == {"node-2": 4}, "gang bound")
    assert bound_per_node(pods, "team-b") == {"node-2": 4}


def test_a_volcano_podgroup_with_min_member_3_over_5_pods(kwok, tmp_path):
    cluster = kwok["a"]
    ensure_podgroup_crd(cluster)
    make_namespace(cluster, "team-b", "B")
    h = Harness(tmp_path, cluster)
    try:
        cluster.client.post("/apis/scheduling.volcano.sh/v1beta1/namespaces/team-b/podgroups", {
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "pg", "namespace": "team-b"}, "spec": {"minMember": 3}})
        fill(cluster, {"node-1": 1, "node-2": 1})   # 2 free cores: fewer than the minimum
        for i in range(5):
            make_pod(cluster, "team-b", f"v-{i}", annotations={"scheduling.k8s.io/group-name": "pg"})
        h.seen(5)
        for _ in range(2):
            h.cycle()
        assert bound_per_node(cluster.pods(), "team-b") == {}
        jobs = h.store.list_jobs(queue="B")
        assert len(jobs) == 5 and {j["gang"]["id"] for j in jobs} == {"podgroup/team-b/pg"}
        # Four free cores on node-1: the minimum of three at once, then one more as room allows; the fifth waits.
        for name in ("spare-node-1-0", "spare-node-1-1"):
            cluster.client.delete(pod_path("default", name), {"gracePeriodSeconds": 0})
        h.settle(lambda pods: not any(p["metadata"]["name"].startswith("spare-node-1") for p in pods), "freed")
        time.sleep(0.5)
        for _ in range(3):
            h.cycle()
        pods = h.settle(lambda pods: sum(bound_per_node(pods, "team-b").values()) == 4, "4 bound")
        assert bound_per_node(pods, "team-b") == {"node-1": 3, "node-2": 1}
    finally:
        h.close()


def test_pods_refused_are_never_bound_and_told_why(harness):
    c = harness.cluster
    make_pod(c, "team-c", "wrong-namespace")                       # team-c says queue B; B does not list it
    make_pod(c, "team-b2", "no-queue")                             # listed by B, but nothing names a queue
    # (A class neither Flotilla nor the cluster knows cannot be given: admission refuses the pod.)
    make_pod(c, "team-b2", "labelled", labels={"flotilla.io/queue": "B"})   # the pod's own label: fine
    make_pod(c, "team-b", "other-scheduler", scheduler="default-scheduler-x")
    harness.seen(3)
    for _ in range(3):
        harness.cycle()
    expected = {
        "wrong-namespace": "flotilla: namespace 'team-c' may not use queue 'B' (the queue's namespaces: "
                           "team-b, team-b2)",
        "no-queue": "flotilla: no queue: label the pod, its Job or its namespace 'team-b2' with flotilla.io/queue",
    }
    pods = harness.settle(lambda pods: {p["metadata"]["name"]: (condition(p, "PodScheduled") or {}).get("message")
                                        for p in pods if p["metadata"]["name"] in expected} == expected,
                          "refusals told")
    by_name = {p["metadata"]["name"]: p for p in pods}
    assert {name for name, p in by_name.items() if p["spec"].get("nodeName")} == {"labelled"}
    assert condition(by_name["other-scheduler"], "PodScheduled") is None
    assert [j["pod"]["name"] for j in harness.store.list_jobs()] == ["labelled"]
    # A FailedScheduling Event tells `kubectl describe pod` the same.
    events = c.client.get("/api/v1/namespaces/team-c/events")["items"]
    assert [(e["reason"], e["message"]) for e in events if e["involvedObject"]["name"] == "wrong-namespace"] == \
        [("FailedScheduling", expected["wrong-namespace"])]
    # The queue's namespaces changed through the API: the pod is looked at again and bound.
    spec = harness.store.get_queue("B")
    from dataclasses import replace
    harness.store.update_queue(replace(spec, namespaces=(*spec.namespaces, "team-c")))
    harness.cycle()
    harness.cycle()
    pods = harness.settle(lambda pods: any(p["metadata"]["name"] == "wrong-namespace" and p["spec"].get("nodeName")
                                           for p in pods), "bound once allowed")


def _health(url: str) -> bool:
    import httpx
    try:
        return httpx.get(f"{url}/v1/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_status_watch_dashboard_metrics_and_logs_show_in_cluster_jobs(kwok, tmp_path):
    import json
    import re

    from tests.support.serve import ORDER, Server, cli, wait_for

    cluster = kwok["a"]
    make_namespace(cluster, "team-b", "B")
    class InfoServer(Server):
        """``flotilla --log-level info serve``: the cycle's log lines are what is asserted last."""

        def start(self):
            import subprocess

            from tests.support.serve import FLOTILLA, REPO, env_for
            self.proc = subprocess.Popen([*FLOTILLA, "--log-level", "info", "serve", "--config", str(self.config)],
                                         cwd=REPO, env=env_for(), stdout=subprocess.DEVNULL,
                                         stderr=open(self.log, "ab"))
            try:
                wait_for(lambda: self.proc.poll() is None and _health(self.url), timeout=60)
            except BaseException:
                self.proc.kill()   # never left running: it would bind later tests' pods
                self.proc.wait(30)
                raise
            return self

    srv = InfoServer(tmp_path, SERVE_CONFIG + f"  - {{name: a, kind: kubernetes, kubeconfig: {cluster.kubeconfig}, "
                                          f"context: {cluster.context}}}\n").start()
    try:
        for i in range(4):   # done 2 s after they start (kwok's completion stage)
            make_pod(cluster, "team-b", f"short-{i}", labels={"flotilla.io/job-set": "short"},
                     annotations={"pod-complete.stage.kwok.x-k8s.io/delay": "2000ms"})
        for i in range(6):
            make_pod(cluster, "team-b", f"long-{i}", labels={"flotilla.io/job-set": "long"})
        watched = cli(srv, "root", "watch", "B", "short", "--until-done", "--output", "json", timeout=120)
        assert watched.returncode == 0, watched.stderr
        per_job: dict[str, list[str]] = {}
        for event in map(json.loads, watched.stdout.splitlines()):
            per_job.setdefault(event["jobId"], []).append(event["kind"])
        assert len(per_job) == 4 and all(kinds == ORDER for kinds in per_job.values()), per_job

        def long_running():
            out = cli(srv, "root", "status", "--job-set", "B", "long", "--output", "json")
            jobs = json.loads(out.stdout)["jobs"] if out.returncode == 0 else []
            return jobs if len(jobs) == 6 and {j["state"] for j in jobs} == {"running"} else None
        jobs = wait_for(long_running, timeout=60)
        assert sorted(j["pod"]["name"] for j in jobs) == [f"long-{i}" for i in range(6)]
        assert {(j["source"], j["pod"]["namespace"], j["owner"]) for j in jobs} == {("cluster", "team-b", "team-b")}
        one = next(j for j in jobs if j["pod"]["name"] == "long-0")
        pod = next(p for p in cluster.pods() if p["metadata"]["name"] == "long-0")
        assert one["id"] == pod["metadata"]["uid"].replace("-", "")
        assert one["node"] == pod["spec"]["nodeName"]

        with srv.http("root") as root:
            root.cookies.set("flotilla_token", "admin-token")
            page = root.get(f"/ui/jobs/{one['id']}")
            assert page.status_code == 200
            assert re.search(r'<td id="pod">team-b/long-0 \(uid ' + pod["metadata"]["uid"] + r'\)</td>', page.text)

            def scraped():
                text = root.get("/metrics").text
                running = re.search(r'^flotilla_queue_jobs\{queue="B",state="running"\} (\S+)$', text, re.M)
                return text if running and running.group(1) == "6.0" else None
            wait_for(scraped, timeout=30)
        log = srv.log.read_text()
        assert sum(int(n) for n in re.findall(r"intake\.pods +cluster=a .*stored=(\d+)", log)) == 10, log[-3000:]
    finally:
        srv.kill()


HA_CONFIG = """
priorityClasses:
  - {name: armada-default, priority: 30000, preemptible: false}
defaultPriorityClass: armada-default
queues:
  - {name: B, weight: 1, namespaces: [team-b]}
evict: {probability: 0}
lease: {timeout: 8s, maxRetries: 5}
leaderElection: {leaseDuration: 2s, renewPeriod: 0.3s}
cycle: {period: 0.2s}
clusters:
"""


@pytest.mark.postgres
def test_the_leader_killed_during_intake_binds_no_pod_twice_and_loses_none(kwok, tmp_path):
    """Two schedulers on PostgreSQL; the leader is killed with SIGKILL while pods arrive: the other takes over,
    and every pod is stored once, leased once and bound (to the node its one lease names)."""
    from tests.support.service import POSTGRES_URL, reset_postgres
    if not POSTGRES_URL:
        pytest.skip("FLOTILLA_TEST_POSTGRES_URL is not set")
    from tests.support.serve import wait_for
    from tests.support.ha import Role

    cluster = kwok["a"]
    make_namespace(cluster, "team-b", "B")
    reset_postgres(POSTGRES_URL)
    config = tmp_path / "ha.yaml"
    config.write_text(HA_CONFIG + f"  - {{name: a, kind: kubernetes, kubeconfig: {cluster.kubeconfig}, "
                                  f"context: {cluster.context}}}\n")
    schedulers = [Role(tmp_path, config, "scheduler", f"sched-{i}") for i in (1, 2)]
    store = Store(POSTGRES_URL)
    try:
        for s in schedulers:
            s.ready()
        leader = wait_for(lambda: next((s for s in schedulers if s.leads()), None), timeout=15)
        other = next(s for s in schedulers if s is not leader)
        for i in range(30):
            make_pod(cluster, "team-b", f"p-{i}")
        # Killed as soon as it has stored some of them (the rest are on their way in, or leased, or binding).
        wait_for(lambda: len(store.list_jobs(queue="B")) > 0, timeout=60, step=0.02)
        leader.proc.kill()
        leader.proc.wait(10)
        for i in range(30, 60):
            make_pod(cluster, "team-b", f"p-{i}")
        wait_for(other.leads, timeout=30)
        pods = cluster.wait_pods(lambda pods: sum(1 for p in live(pods, "team-b") if p["spec"].get("nodeName")) == 60,
                                 timeout=120, what="60 pods bound")
        uids = {p["metadata"]["name"]: p["metadata"]["uid"].replace("-", "") for p in live(pods, "team-b")}
        assert len(uids) == 60
        for p in live(pods, "team-b"):   # bound by Flotilla: its Binding's annotation names the pod's own job
            assert p["metadata"]["annotations"]["flotilla.io/job-id"] == uids[p["metadata"]["name"]]
        jobs = store.list_jobs(queue="B")
        assert sorted(j["id"] for j in jobs) == sorted(uids.values())
        wait_for(lambda: {j["state"] for j in store.list_jobs(queue="B")} == {"running"}, timeout=60)
        events = store.all_events()
        per_job: dict[str, list[str]] = {}
        for e in events:
            per_job.setdefault(e["jobId"], []).append(e["kind"])
        for job_id, kinds in per_job.items():
            assert kinds.count("submitted") == 1, kinds
            assert "failed" not in kinds and "cancelled" not in kinds, kinds
            # Never leased twice without going back to the queue in between.
            state = None
            for kind in kinds:
                if kind == "leased":
                    assert state != "leased", kinds
                    state = "leased"
                elif kind == "queued":
                    state = "queued"
        last_lease = {}
        for e in events:
            if e["kind"] == "leased":
                last_lease[e["jobId"]] = e["node"]
        assert {uids[p["metadata"]["name"]]: p["spec"]["nodeName"] for p in live(pods, "team-b")} == last_lease
    finally:
        for s in schedulers:
            s.stop()
        store.close()


@pytest.mark.skipif(not hasattr(__import__("flotilla.kwok.cluster", fromlist=["x"]), "JOB_CONTROLLERS"),
                    reason="the KWOK fixtures run no Job controller here")
def test_the_seed_two_queue_example_through_batch_jobs(harness):
    """The seed's example with real Jobs: Job A (40, queue A) runs 32 + 8; Job B (50, queue B) arrives: within three
    cycles A keeps 32, its 8 on the second node are told DisruptionTarget and deleted, B runs 32 there, and 18 of B
    wait told why. A's Job does not count the 8 as failures (podFailurePolicy on DisruptionTarget)."""
    c = harness.cluster
    make_job(c, "team-a", "job-a", 40, priority_class="armada-preemptible")
    harness.seen(40)
    for _ in range(3):
        harness.cycle()
        if sum(bound_per_node(c.pods(), "team-a").values()) == 40:
            break
    assert sorted(bound_per_node(c.pods(), "team-a").values()) == [8, 32]
    full = next(node for node, n in bound_per_node(c.pods(), "team-a").items() if n == 32)
    other = "node-2" if full == "node-1" else "node-1"
    assert {j["jobSet"] for j in harness.store.list_jobs(queue="A")} == {"job-a"}   # the owning Job's name

    recorder = PodRecorder(c, "DisruptionTarget")
    try:
        victims = sorted(p["metadata"]["name"] for p in live(c.pods(), "team-a") if p["spec"]["nodeName"] == other)
        assert len(victims) == 8
        make_job(c, "team-b", "job-b", 50, priority_class="armada-preemptible")
        harness.seen(50)
        seen = placements(victims)
        pods = harness.settle(took_over(other, victims), "B bound, victims gone", cycles=3,   # within three cycles
                              seen=seen)
        assert bound_per_node(pods, "team-a") == {full: 32}
        assert sorted(name for name in recorder.seen if name.startswith("job-a-")) == victims
        assert {(v["status"], v["reason"]) for v in recorder.seen.values()} == {("True", "PreemptionByScheduler")}
        pods = harness.settle(told_why(18), "18 pods told why", seen=seen)
        assert len([p for p in live(pods, "team-b") if not p["spec"].get("nodeName")]) == 18
    finally:
        recorder.stop()
    harness.cycle()
    jobs = harness.store.list_jobs(queue="A")
    states = sorted(j["state"] for j in jobs)
    assert states.count("preempted") == 8 and states.count("running") == 32
    job_a = c.client.get("/apis/batch/v1/namespaces/team-a/jobs/job-a")
    # The preemptions were ignored by its podFailurePolicy: none counts as a failure. (The controller makes their
    # replacements after its pod-failure backoff, minutes here; each is a new pod, so a new job, see the docs.)
    assert (job_a["status"].get("failed", 0), job_a["status"]["active"]) == (0, 32)


def test_a_pod_deleted_or_bound_by_someone_else_while_queued_leaves_its_queue(harness):
    c = harness.cluster
    for name in ("gone", "taken"):   # too big for any node: they stay queued
        make_pod(c, "team-b", name, cpu="40")
    harness.seen(2)
    harness.cycle()
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in live(c.pods(), "team-b")}
    assert {j["pod"]["name"]: j["state"] for j in harness.store.list_jobs(queue="B")} == \
        {"gone": "queued", "taken": "queued"}
    c.client.delete(pod_path("team-b", "gone"), {"gracePeriodSeconds": 0})
    c.client.post(pod_path("team-b", "taken") + "/binding", {   # someone else's binding (no Flotilla annotation)
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "taken", "namespace": "team-b"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"}}, parse=False)
    deadline = time.monotonic() + 60
    while harness.backend.waiting_pods():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    harness.cycle()
    got = {j["pod"]["name"]: (j["state"], j["reason"]) for j in harness.store.list_jobs(queue="B")}
    assert got == {"gone": ("cancelled", "pod deleted while queued"),
                   "taken": ("cancelled", "pod bound to node node-1 by someone else")}
    assert sorted(j["id"] for j in harness.store.list_jobs(queue="B")) == \
        sorted(uid.replace("-", "") for uid in uids.values())


def test_a_pod_made_again_under_the_same_name_is_never_bound_for_the_old_one(harness):
    from flotilla.core.model import Job
    from flotilla.kubernetes.intake import POD_NAME, POD_NAMESPACE, POD_UID, job_id_of

    c = harness.cluster
    old = make_pod(c, "team-b", "again")["metadata"]["uid"]
    c.client.delete(pod_path("team-b", "again"), {"gracePeriodSeconds": 0})
    harness.settle(lambda pods: not any(p["metadata"].get("uid") == old for p in pods), "old pod gone")
    new = make_pod(c, "team-b", "again")["metadata"]["uid"]
    job = Job(job_id_of(old), "B", "s", annotations={POD_UID: old, POD_NAMESPACE: "team-b", POD_NAME: "again"})
    harness.backend.starts.bind(job, "node-1")     # the start a cycle would hand over for the old pod
    pod = next(p for p in c.pods() if p["metadata"]["name"] == "again")
    assert (pod["metadata"]["uid"], pod["spec"].get("nodeName")) == (new, None)
    events = harness.backend.poll_events()
    assert [(e.job_id, e.kind) for e in events] == [(job_id_of(old), "failed")]
    assert events[0].reason.startswith("pod team-b/again not bound: it was deleted, replaced or bound since it was "
                                       "queued (")
