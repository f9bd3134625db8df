"""The Kubernetes backend on real fake clusters: a kube-apiserver and etcd, kwok-controller as the kubelets.

Every outcome is read back from the API server (pods and the nodes they are
bound to, pods deleted), not from Flotilla's own view. The two clusters are
started once per session (``kwok_fixtures.kwok_clusters``) and reset to two
empty 32-core nodes before each test.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from tests.support.kwok import flotilla_pods_by_node, natural

from flotilla.core.backend import ClusterDecisions
from flotilla.core.decisions import Placement
from flotilla.core.model import Gang
from flotilla.kubernetes.backend import KubernetesCluster
from flotilla.kubernetes.runner import Runner
from tests.support.kwok_backends import close_all, job, scheduler_and_backends, wait_idle, write_config

pytestmark = pytest.mark.kwok

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_two_queue_preemption_matches_schedule_once(kwok, tmp_path):
    """The seed's example on two 32-core KWOK nodes: same placements and preemptions as schedule-once."""
    from flotilla.scheduler_main import main

    predicted = CliRunner().invoke(main, ["schedule-once", "--state", str(EXAMPLES / "two-queues.yaml")])
    assert predicted.exit_code == 0, predicted.output
    predicted = json.loads(predicted.stdout)

    state = yaml.safe_load((EXAMPLES / "two-queues.yaml").read_text())
    config_path = write_config(tmp_path, kwok, names=("a",), rename={"a": "sim"})
    config, scheduler, backends = scheduler_and_backends(config_path)
    backend = backends["sim"]
    try:
        # A's 40 jobs running as in the state file (32 on node-1, 8 on node-2), as pods on the API server.
        running = [s for s in state["jobs"] if s.get("state") == "running"]
        starts = [Placement(job(s["id"], s["queue"], submitted=s["submitted"], pc=s["priorityClass"]), "sim", s["node"])
                  for s in running]
        backend.apply(ClusterDecisions(start=starts))
        kwok["a"].wait_pods(lambda pods: sum(p["status"].get("phase") == "Running" for p in pods) == 40,
                            what="A's 40 pods running")
        wait_idle(backends)
        assert {n: len(ids) for n, ids in flotilla_pods_by_node(kwok["a"].pods()).items()} == {"node-1": 32,
                                                                                                "node-2": 8}
        backend.poll_events()

        # B's 50 jobs arrive; one cycle of the real scheduler against the snapshot read from the API server.
        seen = []  # every job event the backend reports, whoever polls it
        poll = backend.poll_events
        backend.poll_events = lambda: (lambda events: seen.extend(events) or events)(poll())
        runner = Runner(scheduler, backends)
        runner.submit(job(s["id"], s["queue"], submitted=s["submitted"], pc=s["priorityClass"])
                      for s in state["jobs"] if s.get("state", "queued") == "queued")
        result = runner.cycle()
        assert result.available == ["sim"]
        decided = result.decisions.to_dict()
        assert decided["scheduled"] == predicted["scheduled"]
        assert decided["preempted"] == predicted["preempted"]

        # Read back from the API server: who runs where, and which pods were deleted.
        expected = {}
        for node in ("node-1", "node-2"):
            expected[node] = sorted([s["id"] for s in running if s["node"] == node
                                     and s["id"] not in predicted["preempted"]]
                                    + [p["job"] for p in predicted["scheduled"] if p["node"] == node], key=natural)
        # The preempted pods go once their grace period (1s) is over: wait for them to be gone.
        pods = kwok["a"].wait_pods(lambda pods: flotilla_pods_by_node(pods) == expected and len(pods) == 64
                                   and all(p["status"].get("phase") == "Running" for p in pods),
                                   what="the predicted placement")
        live_ids = {p["metadata"]["annotations"]["flotilla.io/job-id"] for p in pods}
        assert live_ids.isdisjoint(predicted["preempted"])
        assert expected == {"node-1": [f"a-{i}" for i in range(1, 33)], "node-2": [f"b-{i}" for i in range(1, 33)]}
        wait_idle(backends, runner)
        events = {(e.job_id, e.kind) for e in seen}
        assert {(job_id, "preempted") for job_id in predicted["preempted"]} <= events
        assert not any(kind == "preempted" and not job_id.startswith("a-") for job_id, kind in events)
        assert sorted((r.job.id for r in runner.jobs.values() if r.state == "queued"), key=natural) == \
            predicted["queued"]
    finally:
        close_all(backends)


def test_gang_lands_entirely_on_one_cluster(kwok, tmp_path):
    """Cluster a has 2+2 cores free, b 4+4: a 4 x 2-core gang goes whole to b (per job, a would take two)."""
    for node in ("node-1", "node-2"):
        kwok["a"].create_foreign_pod(f"other-{node}", node, "30")
        kwok["b"].create_foreign_pod(f"other-{node}", node, "28")
    config, scheduler, backends = scheduler_and_backends(write_config(tmp_path, kwok))
    try:
        for backend in backends.values():
            deadline = time.monotonic() + 10
            while sum(len(v) for v in backend.snapshot().foreign.values()) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
        runner = Runner(scheduler, backends)
        runner.submit(job(f"g-{i}", "A", cpu=2, submitted=i, gang=Gang("g", 4)) for i in range(1, 5))
        runner.submit(job(f"h-{i}", "B", cpu=1, submitted=10 + i, gang=Gang("h", 4)) for i in range(1, 5))
        result = runner.cycle()
        assert len(result.decisions.scheduled) == 8
        wait_idle(backends, runner)
        on_a = flotilla_pods_by_node(kwok["a"].wait_pods(
            lambda pods: all(p["status"].get("phase") == "Running" for p in pods), what="a's pods running"))
        on_b = flotilla_pods_by_node(kwok["b"].wait_pods(
            lambda pods: all(p["status"].get("phase") == "Running" for p in pods), what="b's pods running"))
        ids_a = {i for ids in on_a.values() for i in ids}
        ids_b = {i for ids in on_b.values() for i in ids}
        assert ids_b >= {"g-1", "g-2", "g-3", "g-4"}, (on_a, on_b)
        assert {node: sum(i.startswith("g-") for i in ids) for node, ids in on_b.items()} == {"node-1": 2,
                                                                                               "node-2": 2}
        for gang in ("g", "h"):
            members = {f"{gang}-{i}" for i in range(1, 5)}
            assert members <= ids_a or members <= ids_b, (gang, on_a, on_b)
        assert len(ids_a) + len(ids_b) == 8
    finally:
        close_all(backends)


def test_foreign_pod_taking_half_a_node_is_respected(kwok, tmp_path):
    kwok["a"].create_foreign_pod("someone-elses", "node-1", "16")
    config, scheduler, backends = scheduler_and_backends(write_config(tmp_path, kwok, names=("a",)))
    try:
        backend = backends["kwok-a"]
        deadline = time.monotonic() + 10
        while not backend.snapshot().foreign and time.monotonic() < deadline:
            time.sleep(0.05)
        assert backend.snapshot().foreign == {"node-1": {"cpu": 16000, "pods": 1}}   # a slot of the node's pods too
        runner = Runner(scheduler, backends)
        runner.submit(job(f"a-{i}", "A", submitted=i) for i in range(1, 65))
        runner.cycle()
        wait_idle(backends, runner)
        runner.cycle()  # a second cycle must not squeeze anything more in
        wait_idle(backends, runner)
        pods = kwok["a"].wait_pods(lambda pods: all(p["status"].get("phase") == "Running" for p in pods),
                                   what="pods running")
        by_node = flotilla_pods_by_node(pods)
        assert {node: len(ids) for node, ids in by_node.items()} == {"node-1": 16, "node-2": 32}
        for node in ("node-1", "node-2"):
            used = sum(int(p["spec"]["containers"][0]["resources"]["requests"]["cpu"]) for p in pods
                       if p["spec"]["nodeName"] == node)
            assert used == 32, node
        assert runner.counts() == {"running": 48, "queued": 16}
    finally:
        close_all(backends)


def test_api_server_outage_leaves_other_cluster_scheduling_and_loses_no_job(kwok, tmp_path):
    from flotilla.kwok.cluster import start, stop_component

    config, scheduler, backends = scheduler_and_backends(write_config(tmp_path, kwok))
    runner = Runner(scheduler, backends, lease_timeout=60)
    annotations = {"flotilla.io/simulated-duration": "3s"}
    try:
        # 100 three-second jobs over 2 x 64 cores: both clusters get some.
        runner.submit(job(f"a-{i}", "A", submitted=i, annotations=annotations) for i in range(1, 101))
        runner.cycle()
        on = {name: sum(1 for r in runner.jobs.values() if r.cluster == name) for name in backends}
        assert on["kwok-a"] > 0 and on["kwok-b"] > 0 and sum(on.values()) == 100, on
        wait_idle(backends, runner)
        leased_on_a = {r.job.id for r in runner.jobs.values() if r.cluster == "kwok-a"}

        # kwok-a's API server goes away mid-run; more work arrives.
        assert stop_component(kwok["a"].name, "kube-apiserver", timeout=1)
        # Its informers see it gone once their streams end and a reconnect is refused: a cycle before that still
        # reads kwok-a (its creates fail as unreachable, their jobs go elsewhere), so the outage starts there.
        seen_gone = time.monotonic() + 30
        while backends["kwok-a"].available and time.monotonic() < seen_gone:
            time.sleep(0.05)
        assert not backends["kwok-a"].available
        runner.submit(job(f"b-{i}", "B", submitted=200 + i, annotations=annotations) for i in range(1, 61))
        outage_cycles = []
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            outage_cycles.append(runner.cycle())
            time.sleep(0.2)
        assert any(c.unavailable == ["kwok-a"] for c in outage_cycles)
        assert all("kwok-a" not in c.available for c in outage_cycles[-5:])
        placed_during_outage = [p for c in outage_cycles if c.decisions for p in c.decisions.scheduled]
        assert placed_during_outage and all(p.cluster == "kwok-b" for p in placed_during_outage)
        assert any(p.job.id.startswith("b-") for p in placed_during_outage)
        # kwok-a's jobs keep their leases (lease timeout not reached): none requeued, none elsewhere.
        for job_id in leased_on_a:
            assert runner.jobs[job_id].cluster == "kwok-a" and runner.jobs[job_id].state in ("leased", "running")

        start(kwok["a"].name)
        # kwok-a's kube-controller-manager watched through the outage: its informers list again only after their
        # back-off (tens of seconds), and meanwhile its Job controller acts on the pods it saw before. A pod it
        # creates and first sees already terminating never counts as created, so that Job makes no pod for the
        # 5 minutes its expectations live. Started again, it lists afresh: the next tests' Jobs work.
        assert stop_component(kwok["a"].name, "kube-controller-manager")
        start(kwok["a"].name)
        assert runner.run(lambda r: r.done(), timeout=60, period=0.2), runner.counts()
        assert runner.counts() == {"succeeded": 160}
        for job_id in leased_on_a:
            assert [h[1] for h in runner.jobs[job_id].history].count("leased") == 1
        assert all(r.cluster == "kwok-a" for j, r in runner.jobs.items() if j in leased_on_a)
    finally:
        close_all(backends)


def test_simulate_real_time_plays_a_workload_and_reports_like_the_simulator(kwok, tmp_path):
    """`flotilla simulate --real-time` on a KWOK cluster: every job finishes, report keys as spec section 4."""
    from flotilla.scheduler_main import main

    config = write_config(tmp_path, kwok, names=("a",))
    config.write_text(config.read_text().replace("lease: {timeout: 60s}", "lease: {timeout: 60s}\ncycle: {period: 1s}"))
    workload = tmp_path / "w.yaml"
    workload.write_text("""
submissions:
  - {at: 0s, queue: A, count: 48, jobSet: a, priorityClass: armada-preemptible, requests: {cpu: 1}, duration: 20s}
  - {at: 10s, queue: B, count: 32, jobSet: b, priorityClass: armada-preemptible, requests: {cpu: 1}, duration: 20s}
  - {at: 10s, queue: B, count: 8, jobSet: g, requests: {cpu: 2}, duration: 10s, gang: {cardinality: 4}}
""")
    out = tmp_path / "real.json"
    result = CliRunner().invoke(main, ["simulate", "--real-time", "--speed", "5", "--config", str(config),
                                       "--workload", str(workload), "--json", str(out), "--plot",
                                       str(tmp_path / "real.png"), "--quiet"])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["realTime"] is True and report["speed"] == 5
    assert {name: q["finished"] for name, q in report["queues"].items()} == {"A": 48, "B": 40}
    assert report["queues"]["B"]["waitMean"] >= 0 and report["cycles"] > 3
    assert 0 < report["utilisation"] <= 1
    assert report["simulatedSeconds"] >= 30  # workload seconds: B's jobs start at 10s and run 20s
    assert (tmp_path / "real.png").stat().st_size > 0
    assert not [p for p in kwok["a"].pods() if "flotilla.io/job-id" in p["metadata"].get("labels", {})
                and p["status"].get("phase") in ("Pending", "Running")]


def test_pod_lifecycle_events_duration_deadline_grace_and_binding(kwok):
    """Succeeded after the duration, DeadlineExceeded after activeDeadlineSeconds, gone after the grace period."""
    from flotilla.kubernetes.pods import PodSettings

    backends = {}
    try:
        for bind in ("node-name", "binding"):
            kwok["a"].create_namespace(f"ns-{bind}")
            backends[bind] = KubernetesCluster(f"c-{bind}", kubeconfig=kwok["a"].kubeconfig, context=kwok["a"].context,
                                               settings=PodSettings(namespace=f"ns-{bind}",
                                                                    name_prefix=f"{bind[0]}-"),
                                               priority_classes=[("armada-default", 30000, False)], bind=bind)
        for backend in backends.values():
            assert backend.wait_synced(30)
        short = job("short", "A", annotations={"flotilla.io/simulated-duration": "1s"})
        doomed = job("doomed", "A", annotations={"flotilla.io/active-deadline": "1"})
        victim = job("victim", "A", annotations={"flotilla.io/grace-period": "2"})
        b = backends["node-name"]
        b.apply(ClusterDecisions(start=[Placement(short, b.name, "node-1"), Placement(doomed, b.name, "node-1"),
                                        Placement(victim, b.name, "node-2")]))
        bound = backends["binding"]
        late = job("late-binder", "B", pc="armada-default")
        bound.apply(ClusterDecisions(start=[Placement(late, bound.name, "node-2")]))
        events = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not {("short", "succeeded"), ("doomed", "failed")} <= \
                {(e.job_id, e.kind) for e in events}:
            events += b.poll_events()
            time.sleep(0.1)
        kinds = {(e.job_id, e.kind): e for e in events}
        assert ("short", "running") in kinds and ("short", "succeeded") in kinds
        assert kinds[("doomed", "failed")].reason == ("DeadlineExceeded: Pod was active on the node longer than the "
                                                     "specified deadline; container job exited 137 (Error)")
        assert ("victim", "running") in kinds

        pods = {p["metadata"]["annotations"]["flotilla.io/job-id"]: p for p in kwok["a"].pods()
                if "flotilla.io/job-id" in p["metadata"].get("labels", {})}
        assert pods["victim"]["spec"]["terminationGracePeriodSeconds"] == 2
        assert pods["late-binder"]["spec"]["nodeName"] == "node-2"
        assert pods["late-binder"]["spec"]["priorityClassName"] == "armada-default"
        assert pods["late-binder"]["metadata"]["namespace"] == "ns-binding"
        assert "short" not in pods or pods["short"]["status"]["phase"] == "Succeeded"  # finished pods are removed

        b.apply(ClusterDecisions(preempt=[victim]))
        assert all(j.id != "victim" for j in b.snapshot().running)  # counted out at once
        stopped = time.monotonic()
        kwok["a"].wait_pods(lambda pods: not any(p["metadata"]["name"].startswith("n-victim") for p in pods),
                            timeout=10, what="the victim's pod gone")
        assert 1.0 <= time.monotonic() - stopped <= 6.0  # its 2 s grace period, give or take kwok's reaction
        assert ("victim", "preempted") in {(e.job_id, e.kind) for e in b.poll_events()}
    finally:
        for backend in backends.values():
            backend.close()


def test_finished_pods_stay_for_finished_pod_retention_then_go(kwok):
    """A finished pod is kept (holding nothing) for finishedPodRetention on the backend's clock, then deleted."""
    from flotilla.kubernetes.pods import PodSettings

    now = [1000.0]
    backend = KubernetesCluster("keep", kubeconfig=kwok["a"].kubeconfig, context=kwok["a"].context,
                                settings=PodSettings(name_prefix="keep-"), finished_pod_retention=60,
                                clock=lambda: now[0])
    try:
        assert backend.wait_synced(30)
        done = job("done", "A", annotations={"flotilla.io/simulated-duration": "0s"})
        backend.apply(ClusterDecisions(start=[Placement(done, backend.name, "node-1")]))
        events = []
        deadline = time.monotonic() + 20
        while ("done", "succeeded") not in {(e.job_id, e.kind) for e in events} and time.monotonic() < deadline:
            events += backend.poll_events()
            time.sleep(0.1)
        assert [(e.job_id, e.kind) for e in events] == [("done", "running"), ("done", "succeeded")]
        names = lambda: sorted(p["metadata"]["name"] for p in kwok["a"].pods())   # noqa: E731
        now[0] += 59
        backend.poll_events()
        assert backend.wait_idle(10) and names() == ["keep-done-0"]
        assert backend.snapshot().running == []                # kept, holding nothing
        now[0] += 1
        assert backend.poll_events() == []
        kwok["a"].wait_pods(lambda pods: not pods, timeout=10, what="the finished pod deleted")
        assert backend.poll_events() == []                     # its deletion is no news about the job
    finally:
        backend.close()


def test_kept_finished_pods_end_their_retention_across_a_restart(kwok):
    """Kept pods are counted from their own end (the pod's finishedAt), not from when a process first saw them:
    a backend started 61 s after they ended, with a 60 s retention, deletes them at its first poll. An earlier
    attempt's kept pod, listed again, says nothing about the job's newer pod (its failure is old news)."""
    from flotilla.kubernetes.pods import PodSettings

    def backend_at(offset: float) -> KubernetesCluster:
        return KubernetesCluster("keep", kubeconfig=kwok["a"].kubeconfig, context=kwok["a"].context,
                                 settings=PodSettings(name_prefix="again-"), finished_pod_retention=60,
                                 clock=lambda: time.time() + offset)

    def events_until(backend, wanted, seconds=20):
        events, deadline = [], time.monotonic() + seconds
        while not wanted <= {(e.job_id, e.kind) for e in events} and time.monotonic() < deadline:
            events += backend.poll_events()
            time.sleep(0.1)
        return [(e.job_id, e.kind) for e in events]

    names = lambda: sorted(p["metadata"]["name"] for p in kwok["a"].pods())   # noqa: E731
    first = backend_at(0)
    try:
        assert first.wait_synced(30)
        done = job("done", "A", annotations={"flotilla.io/simulated-duration": "0s"})
        failing = job("retry", "A", annotations={"flotilla.io/simulated-duration": "0s",
                                                 "kwok.flotilla.io/exit-code": "3"})
        first.apply(ClusterDecisions(start=[Placement(done, "keep", "node-1"), Placement(failing, "keep", "node-1")]))
        ends = events_until(first, {("done", "succeeded"), ("retry", "failed")})
        # (Whether the watch saw the failing pod Running before it failed is kwok's timing.)
        assert sorted(e for e in ends if e[1] != "running") == [("done", "succeeded"), ("retry", "failed")]
        again = job("retry", "A", annotations={"flotilla.io/simulated-duration": "600s"})
        first.apply(ClusterDecisions(start=[Placement(again, "keep", "node-1")]))
        assert events_until(first, {("retry", "running")}) == [("retry", "running")]
        assert first.wait_idle(10) and names() == ["again-done-0", "again-retry-0", "again-retry-1"]
    finally:
        first.close()
    second = backend_at(61)
    try:
        assert second.wait_synced(30)
        assert sorted(events_until(second, {("retry", "running"), ("done", "succeeded")}, 5)) == [
            ("done", "running"), ("done", "succeeded"), ("retry", "running")]
        kwok["a"].wait_pods(lambda pods: [p["metadata"]["name"] for p in pods] == ["again-retry-1"], timeout=10,
                            what="the kept pods deleted, the running one left")
        assert second.poll_events() == []
        assert [j.id for j in second.snapshot().running] == ["retry"]
    finally:
        second.close()


def test_kwok_up_and_down_commands(tmp_path):
    """`flotilla kwok up` prints the context and makes N fake nodes from a template; `down` removes it all."""
    from flotilla.kwok.cluster import _components, workdir
    from flotilla.kubernetes.client import KubeClient
    from flotilla.scheduler_main import main
    from tests.support.kwok import _toolchain

    _toolchain()
    name = f"fltest-{os.getpid()}-cli"
    kubeconfig = tmp_path / "kubeconfig"
    template = tmp_path / "node.yaml"
    template.write_text("namePrefix: gpu\nresources: {cpu: 8, nvidia.com/gpu: 2}\nlabels: {pool: gpu}\n")
    try:
        result = CliRunner().invoke(main, ["kwok", "up", "--name", name, "--nodes", "3", "--node-template",
                                           str(template), "--kubeconfig", str(kubeconfig)])
        assert result.exit_code == 0, result.output
        assert result.stdout.strip() == f"kwok-{name}"
        client = KubeClient.from_kubeconfig(str(kubeconfig), f"kwok-{name}")
        nodes = client.get("/api/v1/nodes")["items"]
        assert sorted(n["metadata"]["name"] for n in nodes) == ["gpu-1", "gpu-2", "gpu-3"]
        assert all(n["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake" for n in nodes)
        assert all(n["status"]["allocatable"]["nvidia.com/gpu"] == "2" for n in nodes)
        client.close()
        # The default cluster runs no controller-manager: ServiceAccount admission and TaintNodesByCondition off.
        [apiserver] = [c["args"] for c in _components(name) if c["name"] == "kube-apiserver"]
        assert [a for a in apiserver if a.startswith("--disable-admission-plugins")] == [
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition"]
    finally:
        result = CliRunner().invoke(main, ["kwok", "down", "--name", name, "--kubeconfig", str(kubeconfig)])
    assert result.exit_code == 0, result.output
    assert not workdir(name).exists()
    assert f"kwok-{name}" not in kubeconfig.read_text()
