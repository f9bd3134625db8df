"""The live check just before a bind and the kubelet's admission refusals return a job to its queue, no retry used.

The backend is driven by watch events as the API server sends them (no cluster; a recording client), the
service by a simulated cluster whose binds are returned the first times (flotilla.kubernetes.admission); KWOK
runs the same beside kube-scheduler in tests/kwok/test_kwok_beside_scheduler.py.
"""

from __future__ import annotations

import threading
import time

from flotilla.core.backend import ClusterDecisions, JobEvent
from flotilla.core.decisions import Placement
from flotilla.core.model import Job
from flotilla.kubernetes import admission
from flotilla.kubernetes.admission import PRESENCE_READ_TRUSTED, SchedulerPresence, admission_rejection, returned_label, shortfall
from flotilla.kubernetes.pods import JOB_ID
from flotilla.scheduler import Scheduler
from flotilla.service.jobspec import prepare
from flotilla.service.loop import ServiceLoop, service_backends
from flotilla.service.settings import from_config
from flotilla.service.store import Store, rebuild_states
from tests.support.service import config, job_file, job as job_item
from tests.support.kube_fakes import backend_with, events, foreign, node, Recorder, start


def test_a_bind_that_no_longer_fits_returns_the_job_and_creates_no_pod():
    backend, client = backend_with(node("n1", "4"), node("n2", "4"))
    try:
        backend.snapshot()   # the decision's view: both nodes empty
        backend.dispatch.on_pod("ADDED", foreign("other", "n1", "3"))   # kube-scheduler binds meanwhile
        start(backend, ("j1", "n1", 2000), ("j2", "n2", 2000), ("j3", "n1", 1000))
        assert [body["metadata"]["name"] for _, body in client.created] == ["flotilla-j2-0", "flotilla-j3-0"]
        assert events(backend) == [
            ("j1", "returned", "not bound to node n1: Insufficient cpu there now (pods bound there since the "
                               "scheduling decision)", "Insufficient cpu")]
        assert backend.counters["returned"] == 1
        # j3's room is reserved until the watch shows its pod: a fourth core-sized bind there is returned too.
        start(backend, ("j4", "n1", 1000))
        assert [ev[:2] for ev in events(backend)] == [("j4", "returned")]
    finally:
        backend._pool.shutdown(wait=False)


class FreshRecorder(Recorder):
    """A Recorder whose consistent lists of pods answer from ``self.listed`` (field selector -> pods)."""

    def __init__(self):
        super().__init__()
        self.listed: dict[str, list[dict]] = {}
        self.lists: list[str] = []

    def get(self, path, fieldSelector="", **_):
        if path != "/api/v1/pods":
            return {}
        self.lists.append(fieldSelector)
        return {"items": self.listed.get(fieldSelector, [])}


WAITING = "spec.nodeName=,spec.schedulerName!=flotilla"   # the list of the pods waiting for other schedulers


def waiting_foreign(name: str, cpu: str) -> dict:
    pod = foreign(name, "", cpu, phase="Pending")
    del pod["spec"]["nodeName"]
    return pod


def test_beside_an_active_scheduler_a_bind_reads_the_node_afresh_and_counts_what_the_watch_lags_on():
    backend, client = backend_with(node("n1", "4"), node("n2", "4"), client=FreshRecorder())
    try:
        backend.snapshot()
        start(backend, ("j0", "n2", 1000))
        # No other scheduler seen: the cycle's one read of the pods waiting for others shows none, so the watch's
        # view alone.
        assert client.lists == [WAITING] and len(client.created) == 1
        client.lists.clear()
        # kube-scheduler's pod seen waiting, then placed; the arrival is over by the binds below.
        backend.dispatch.on_pod("ADDED", waiting_foreign("seen", "1"))
        backend.dispatch.on_pod("MODIFIED", foreign("seen", "n2", "1"))
        backend.guard.arrivals.clear()
        # The API server already holds a pod the watch has not shown: 3 cores on n1.
        client.listed["spec.nodeName=n1"] = [foreign("unseen", "n1", "3")]
        start(backend, ("j1", "n1", 2000))
        assert client.lists == ["spec.nodeName=n1", WAITING]
        assert events(backend) == [("j1", "returned", "not bound to node n1: Insufficient cpu there now (pods bound "
                                                      "there since the scheduling decision)", "Insufficient cpu")]
        # A pod waiting for kube-scheduler that the watch has not shown: its burst goes first, the bind is held.
        client.listed["spec.nodeName=n1"] = []
        client.listed["spec.nodeName=,spec.schedulerName!=flotilla"] = [waiting_foreign("coming", "1")]
        start(backend, ("j2", "n1", 1000))
        assert len(client.created) == 1 and backend.held() == {"n1": ["j2"]}
        # It is placed elsewhere and nothing else arrives: the held bind is tried again once the burst's moment is
        # over, with no pod event to prompt it, and goes.
        client.listed["spec.nodeName=,spec.schedulerName!=flotilla"] = []
        deadline = time.monotonic() + 10   # the retry comes from a timer about a second on
        while len(client.created) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [body["metadata"]["name"] for _, body in client.created] == ["flotilla-j0-0", "flotilla-j2-0"]
        assert backend.held() == {} and events(backend) == []
    finally:
        backend._stop.set()
        backend._pool.shutdown(wait=False)


def test_a_read_that_found_no_other_scheduler_vouches_for_a_short_time_only():
    now = [100.0]
    presence = SchedulerPresence(lambda: now[0], "flotilla")
    reads = []
    answers = [[], [], [waiting_foreign("burst", "1")]]

    def read():
        reads.append(now[0])
        return answers[len(reads) - 1]

    presence.new_cycle()
    assert presence.active(read) is False                      # the cycle's first bind reads: none waits
    now[0] += PRESENCE_READ_TRUSTED / 2
    assert presence.active(read) is False and reads == [100.0]  # a bind soon after trusts that read
    now[0] += PRESENCE_READ_TRUSTED                               # a bind of the same cycle, later: a new read
    assert presence.active(read) is False and len(reads) == 2
    presence.new_cycle()                                          # a new cycle reads again, however soon
    assert presence.active(read) is True and len(reads) == 3   # kube-scheduler's burst has started
    now[0] += 1
    assert presence.active(read) is True and len(reads) == 3   # active: the watch and fresh reads take over


def test_until_another_scheduler_is_seen_each_cycle_of_starts_reads_once_whether_one_waits(monkeypatch):
    monkeypatch.setattr(admission, "PRESENCE_READ_TRUSTED", 3600.0)   # the binds of one cycle, however slow here
    backend, client = backend_with(node("n1", "4"), node("n2", "4"), client=FreshRecorder())
    try:
        backend.snapshot()
        # Alone on the cluster (an unschedulable and a gated pod of kube-scheduler's wait, undecided by none):
        # one read per cycle of starts, not one per bind.
        unschedulable = waiting_foreign("unschedulable", "1")
        unschedulable["status"]["conditions"] = [{"type": "PodScheduled", "status": "False"}]
        gated = waiting_foreign("gated", "1")
        gated["spec"]["schedulingGates"] = [{"name": "example.com/gate"}]
        client.listed[WAITING] = [unschedulable, gated]
        start(backend, ("j1", "n1", 1000), ("j2", "n1", 1000), ("j3", "n2", 1000))
        start(backend, ("j4", "n2", 1000), ("j5", "n2", 1000))
        assert client.lists == [WAITING, WAITING]
        assert [body["metadata"]["name"] for _, body in client.created] == [
            "flotilla-j1-0", "flotilla-j2-0", "flotilla-j3-0", "flotilla-j4-0", "flotilla-j5-0"]
        # kube-scheduler's pod is created before the watch shows it: the cycle's read finds it, so another
        # scheduler is active, the bind reads its node afresh, and waits for that burst (held).
        client.lists.clear()
        client.listed[WAITING] = [unschedulable, waiting_foreign("coming", "1")]
        start(backend, ("j6", "n1", 1000), ("j7", "n1", 1000))
        assert client.lists == [WAITING, "spec.nodeName=n1", WAITING, "spec.nodeName=n1", WAITING]
        assert len(client.created) == 5 and backend.held() == {"n1": ["j6", "j7"]}
        assert events(backend) == []
        # Active now: the next cycle's bind reads its node afresh, with no cycle read first (still three).
        assert backend.guard.presence.reads == 3
        start(backend, ("j8", "n2", 1000))
        assert backend.guard.presence.reads == 3 and "spec.nodeName=n2" in client.lists
    finally:
        backend._stop.set()
        backend._pool.shutdown(wait=False)


class LandingServer(FreshRecorder):
    """A FreshRecorder whose pod creations wait for the test (``landing[name]``: set when that pod may land) and
    whose node lists show the pods created so far; ``on_land`` runs as a pod lands (what the cluster does then)."""

    def __init__(self):
        super().__init__()
        self.landing: dict[str, threading.Event] = {}
        self.arrived: dict[str, threading.Event] = {}
        self.on_land = lambda name: None

    def create_pod(self, namespace, body):
        name = body["metadata"]["name"]
        self.arrived.setdefault(name, threading.Event()).set()
        assert self.landing.setdefault(name, threading.Event()).wait(10)
        pod = {**body, "status": {"phase": "Pending"}}
        self.listed.setdefault(f"spec.nodeName={body['spec']['nodeName']}", []).append(pod)
        self.created.append((namespace, body))
        self.lists.append(f"created {name}")
        self.on_land(name)


def test_beside_an_active_scheduler_binds_to_one_node_go_one_at_a_time_each_reading_after_the_last_landed():
    backend, client = backend_with(node("n1", "4"), client=LandingServer(), workers=4)
    try:
        backend.snapshot()
        backend.dispatch.on_pod("ADDED", waiting_foreign("seen", "1"))        # kube-scheduler is active ...
        backend.dispatch.on_pod("MODIFIED", foreign("seen", "n1", "1"))       # ... its pod placed, its burst over
        backend.guard.arrivals.clear()
        backend.guard.settle_delay = lambda now: 3600.0   # the held binds are not tried again within this test
        client.lists.clear()
        # kube-scheduler's next burst is created the moment Flotilla's first pod lands (under load, binds decided
        # together land a second apart): the binds after it read it waiting and give way, not bind beside it.
        client.on_land = lambda name: client.listed.__setitem__(WAITING, [waiting_foreign("burst", "1")])
        work: list[tuple] = []
        decisions = ClusterDecisions(start=[Placement(Job(j, "q", requests={"cpu": 1000, "memory": 2**30}), "c", "n1")
                                            for j in ("j1", "j2", "j3")])
        with backend._lock:
            backend._apply(decisions, work)
        first = threading.Thread(target=work[0][0], args=work[0][1:])
        first.start()
        assert client.arrived.setdefault("flotilla-j1-0", threading.Event()).wait(10)   # j1's pod on its way
        others = [threading.Thread(target=task[0], args=task[1:]) for task in work[1:]]
        for thread in others:
            thread.start()
        client.landing.setdefault("flotilla-j1-0", threading.Event()).set()
        for thread in [first, *others]:
            thread.join(10)
        assert [body["metadata"]["name"] for _, body in client.created] == ["flotilla-j1-0"]
        assert sorted(backend.held()["n1"]) == ["j2", "j3"]
        # j1 read, bound, landed; only then did j2 and j3 read (each its node and the waiting pods), one at a time.
        assert client.lists == ["spec.nodeName=n1", WAITING, "created flotilla-j1-0"] + \
            ["spec.nodeName=n1", WAITING] * 2
        assert events(backend) == []
    finally:
        backend._stop.set()
        backend.starts.close(0)   # its settle timer, set for an hour, cancelled
        backend._pool.shutdown(wait=False)


def test_alone_on_a_cluster_binds_to_one_node_go_in_parallel():
    backend, client = backend_with(node("n1", "4"), client=LandingServer(), workers=4)
    try:
        backend.snapshot()
        work: list[tuple] = []
        decisions = ClusterDecisions(start=[Placement(Job(j, "q", requests={"cpu": 1000, "memory": 2**30}), "c", "n1")
                                            for j in ("j1", "j2")])
        with backend._lock:
            backend._apply(decisions, work)
        threads = [threading.Thread(target=task[0], args=task[1:]) for task in work]
        for thread in threads:
            thread.start()
        # Both pods are on their way at once (neither has landed): no turn, and the cycle's one read only.
        for name in ("flotilla-j1-0", "flotilla-j2-0"):
            assert client.arrived.setdefault(name, threading.Event()).wait(10)
        assert client.lists == [WAITING]
        for name in ("flotilla-j1-0", "flotilla-j2-0"):
            client.landing.setdefault(name, threading.Event()).set()
        for thread in threads:
            thread.join(10)
        assert sorted(body["metadata"]["name"] for _, body in client.created) == ["flotilla-j1-0", "flotilla-j2-0"]
    finally:
        backend._stop.set()
        backend._pool.shutdown(wait=False)


def test_pod_slots_of_the_node_count_every_pod():
    backend, client = backend_with(node("n1", "32", pods=2))
    try:
        backend.dispatch.on_pod("ADDED", foreign("a", "n1", "100m"))
        start(backend, ("j1", "n1", 1000), ("j2", "n1", 1000))
        assert [body["metadata"]["name"] for _, body in client.created] == ["flotilla-j1-0"]
        assert [(ev[0], ev[1], ev[3]) for ev in events(backend)] == [("j2", "returned", "Too many pods")]
    finally:
        backend._pool.shutdown(wait=False)


def test_room_that_comes_once_a_leaving_pod_is_gone_holds_the_start():
    backend, client = backend_with(node("n1", "4"))
    try:
        backend.dispatch.on_pod("ADDED", foreign("old", "n1", "1"))
        leaving = foreign("old", "n1", "1")
        leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"

        def meanwhile():   # a pod bound by someone else, and the old pod being deleted
            backend.dispatch.on_pod("ADDED", foreign("new", "n1", "2"))
            backend.dispatch.on_pod("MODIFIED", leaving)

        start(backend, ("j1", "n1", 2000), meanwhile=meanwhile)
        assert backend.held() == {"n1": ["j1"]} and not client.created
        backend.dispatch.on_pod("DELETED", {"metadata": {"namespace": "default", "name": "old"}})
        backend._pool.shutdown(wait=True)
        assert [body["metadata"]["name"] for _, body in client.created] == ["flotilla-j1-0"]
        assert events(backend) == []
    finally:
        backend._pool.shutdown(wait=False)


def our_pod(job_id: str, node_name: str, phase: str, reason: str = "", message: str = "") -> dict:
    status = {"phase": phase}
    if reason:
        status.update(reason=reason, message=message)
    return {"metadata": {"namespace": "default", "name": f"flotilla-{job_id}-0", "uid": f"uid-{job_id}",
                         "labels": {JOB_ID: job_id}, "annotations": {JOB_ID: job_id}},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": status}


def test_a_kubelet_admission_refusal_returns_the_job():
    backend, _ = backend_with(node("n1", "4"))
    try:
        refusal = "Node didn't have enough resource: cpu, requested: 1000, used: 3500, capacity: 4000"
        backend.dispatch.on_pod("ADDED", our_pod("j1", "n1", "Failed", "OutOfcpu", refusal))
        backend.dispatch.on_pod("ADDED", our_pod("j2", "n1", "Failed", "NodePorts", "Predicate NodePorts failed"))
        backend.dispatch.on_pod("ADDED", our_pod("j3", "n1", "Failed", "Evicted", "The node was low on resource: memory."))
        assert events(backend) == [
            ("j1", "returned", f"refused by the kubelet of node n1: OutOfcpu: {refusal}", "OutOfcpu"),
            ("j2", "returned", "refused by the kubelet of node n1: NodePorts: Predicate NodePorts failed",
             "NodePorts"),
            ("j3", "lost", "Evicted: The node was low on resource: memory.", "Evicted")]
    finally:
        backend._pool.shutdown(wait=False)


def test_admission_reasons_and_labels():
    assert [r for r in ("OutOfcpu", "OutOfpods", "OutOfnvidia.com/gpu", "NodeAffinity", "UnexpectedAdmissionError",
                        "OutOf", "Evicted", "DeadlineExceeded", "SysctlForbidden") if admission_rejection(r)] == \
        ["OutOfcpu", "OutOfpods", "OutOfnvidia.com/gpu", "NodeAffinity", "UnexpectedAdmissionError"]
    assert [returned_label(r, {"cpu": 1, "memory": 1}) for r in
            ("OutOfcpu", "OutOfpods", "OutOfexample.com/x", "Insufficient memory", "Too many pods", "NodeName",
             "whatever")] == ["OutOfcpu", "OutOfpods", "Other", "Insufficient memory", "Too many pods", "NodeName",
                              "Other"]
    assert shortfall({"cpu": 1000}, {"cpu": 3000}, {"cpu": 4000}, 5, 6) is None
    assert shortfall({"cpu": 1001}, {"cpu": 3000}, {"cpu": 4000}, 5, 6) == "Insufficient cpu"
    assert shortfall({"cpu": 1000}, {"cpu": 3000}, {"cpu": 4000}, 6, 6) == "Too many pods"


class ReturningCluster:
    """A simulated cluster whose first ``times`` binds of every job are returned instead of run."""

    def __init__(self, inner, times: int):
        self.inner = inner
        self.name = inner.name
        self.times = times
        self.returned: dict[str, int] = {}
        self.pending: list[JobEvent] = []

    def __getattr__(self, attr):
        return getattr(self.inner, attr)

    def apply(self, decisions: ClusterDecisions) -> None:
        kept = []
        for placement in decisions.start:
            done = self.returned.get(placement.job.id, 0)
            if done < self.times:
                self.returned[placement.job.id] = done + 1
                self.pending.append(JobEvent(placement.job.id, "returned", self.name, placement.node, 0.0,
                                             f"not bound to node {placement.node}: Insufficient cpu there now",
                                             cause="Insufficient cpu"))
            else:
                kept.append(placement)
        self.inner.apply(ClusterDecisions(kept, decisions.preempt, decisions.cancel, decisions.templates))

    def poll_events(self):
        out, self.pending = self.pending + self.inner.poll_events(), []
        return out


def test_returned_binds_use_no_retry_and_are_counted(tmp_path):
    cfg = config()
    settings = from_config(cfg)
    now = [1_000_000.0]
    clock = lambda: now[0]  # noqa: E731
    store = Store(f"sqlite:///{tmp_path}/returned.db")
    store.sync_queues(settings.queues)
    backends = service_backends(cfg, clock=clock)
    backends = {name: ReturningCluster(b, 5) for name, b in backends.items()}   # more than lease.maxRetries (3)
    loop = ServiceLoop(store, settings, Scheduler(cfg), backends, clock=clock, seed=0)
    _, new = prepare(job_file("A", "s", [job_item(duration="2s")]), settings)
    [job_id] = [s.id for s in store.submit("A", "s", "alice", new, now=now[0])]
    returned: dict = {}
    for _ in range(60):
        report = loop.run_cycle()
        for key, count in report.returned.items():
            returned[key] = returned.get(key, 0) + count
        if store.get_job(job_id)["state"] == "succeeded":
            break
        now[0] += 1.0
    row = store.get_job(job_id)
    assert (row["state"], row["retries"]) == ("succeeded", 0)
    kinds = [e["kind"] for e in store.events("A", "s") if e["jobId"] == job_id]
    assert kinds.count("returned") == 5 and "lease-expired" not in kinds and "failed" not in kinds
    assert sum(returned.values()) == 5 and {reason for _, reason in returned} == {"Insufficient cpu"}
    assert rebuild_states(store.all_events()) == store.job_states()
