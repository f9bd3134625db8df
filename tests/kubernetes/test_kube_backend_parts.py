"""The Kubernetes backend's parts on their own, without a cluster or the facade: the pod cache's per-node sums, the
held starts' order, the bind guard's verdicts, the kept log tails' bound, what the dispatch does with node and pod
listings, and what a snapshot counts where."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
import structlog

from flotilla.core.backend import ClusterUnavailable
from flotilla.core.model import Job, Node
from flotilla.kubernetes.backend import victimlogs
from flotilla.kubernetes.backend.bindguard import BIND, HOLD, RETURN, YIELD, BindGuard
from flotilla.kubernetes.backend.dispatch import Dispatch, watched
from flotilla.kubernetes.backend.held import HeldStarts
from flotilla.kubernetes.backend.informers import InformerHealth
from flotilla.kubernetes.backend.ledger import Ledger
from flotilla.kubernetes.backend.podcache import CachedPod, PodCache
from flotilla.kubernetes.backend.snapshots import Snapshots
from flotilla.kubernetes.client import KubeError
from flotilla.kubernetes.pods import ATTEMPT, JOB_ID


def job(name: str, cpu: int, node: str = "n1") -> Job:
    return Job(name, "A", requests={"cpu": cpu}, node=node)


def test_the_pod_cache_keeps_each_nodes_foreign_sums_and_our_live_pods_as_pods_come_change_and_go():
    cache = PodCache()
    cache.put(("d", "web"), CachedPod(("d", "web"), "n1", "Running", False, requests={"cpu": 500},
                                      ports=(("TCP", 80, "0.0.0.0"),)))
    cache.put(("d", "db"), CachedPod(("d", "db"), "n1", "Running", False, requests={"cpu": 250}))
    ours = CachedPod(("d", "flotilla-j-0"), "n2", "Running", False, job=job("j", 1000, "n2"))
    cache.put(ours.key, ours)
    nodes = {"n1": None, "n2": None}
    assert cache.foreign_use(nodes) == ({"n1": {"cpu": 750, "pods": 2}}, {"n1": (("TCP", 80, "0.0.0.0"),)})
    assert list(cache.own) == [("d", "flotilla-j-0")]
    assert [pod.key for pod in cache.of_node("n2")] == [("d", "flotilla-j-0")]
    cache.put(("d", "web"), CachedPod(("d", "web"), "n1", "Succeeded", False, requests={"cpu": 500}))  # ended
    assert cache.foreign_use(nodes) == ({"n1": {"cpu": 250, "pods": 1}}, {})
    cache.put(ours.key, CachedPod(ours.key, "n2", "Failed", False, job=ours.job))   # kept for its log
    assert (cache.own, cache.of_node("n2")) == ({}, [])
    assert cache.pop(("d", "db")).requests == {"cpu": 250}
    assert (cache.foreign_use(nodes), cache.foreign_on, cache.on_node) == (({}, {}), {}, {})
    assert set(cache.pods) == {("d", "web"), ("d", "flotilla-j-0")}


def test_held_starts_go_in_order_the_first_that_does_not_fit_keeps_the_rest_and_stale_ones_are_dropped():
    held = HeldStarts()
    node = Node("n1", "c", {"cpu": 4000, "pods": 10})
    a, b, c, stale = job("a", 2000), job("b", 3000), job("c", 1000), job("s", 1000)
    for entry in (stale, a, b, c):
        assert held.hold("n1", entry, 0, None, 1, 100.0, nominate=True) is False   # not in-cluster pods
    starts = {"a": 1, "b": 1, "c": 1, "s": 2}                                    # s started again since
    released = held.release("n1", node, {"cpu": 1000, "pods": 1}, lambda: True, starts)
    assert [entry[0].id for entry in released] == ["a"]    # b does not fit beside a while a pod is leaving; c waits
    # (s's entry is gone; its id stays: its newer start is the one that id now stands for)
    assert held.job_ids() == {"n1": ["b", "c"]} and held.ids == {"b", "c", "s"}
    released = held.release("n1", node, {"cpu": 2000, "pods": 2}, lambda: False, starts)
    assert [entry[0].id for entry in released] == ["b", "c"]   # nothing leaving: handed to the bind's own check
    assert (held.by_node, held.ids, held.since) == ({}, {"s"}, {})


def test_the_bind_guard_binds_what_fits_holds_what_leaving_pods_make_room_for_and_returns_the_rest():
    guard = BindGuard(client=None, cluster="c", scheduler_name="flotilla", clock=lambda: 1000.0)
    node = Node("n1", "c", {"cpu": 4000, "pods": 3})
    clock = lambda: 1000.0   # noqa: E731
    fits = job("fits", 1000)
    assert guard.verdict(fits, "n1", node, {"cpu": 3000}, 2, {}, 0, {}, clock) == (BIND, None)
    assert (guard.admitted, guard.admitted_on) == ({"fits": "n1"}, {"n1": {"fits": {"cpu": 1000}}})
    big = job("big", 2000)
    assert guard.verdict(big, "n1", node, {"cpu": 3000}, 2, {"cpu": 1500}, 1, {}, clock) == (HOLD, None)
    assert guard.verdict(big, "n1", node, {"cpu": 3000}, 2, {"cpu": 500}, 1, {}, clock) == \
        (RETURN, "Insufficient cpu")
    assert guard.verdict(job("third", 100), "n1", node, {"cpu": 100}, 3, {}, 0, {}, clock) == \
        (RETURN, "Too many pods")
    guard.unadmit("fits")
    assert (guard.admitted, guard.admitted_on) == ({}, {})


def test_the_bind_guard_gives_way_to_another_schedulers_pod_not_placed_yet_for_its_window():
    now = [1000.0]
    guard = BindGuard(client=None, cluster="c", scheduler_name="flotilla", clock=lambda: now[0])
    waiting = {"metadata": {"namespace": "d", "name": "theirs"}, "spec": {"schedulerName": "default-scheduler"}}
    assert guard.note_pod(("d", "theirs"), waiting, None, "Pending", False, {"cpu": 2000}, lambda: now[0]) is False
    node = Node("n1", "c", {"cpu": 4000})
    mine = job("mine", 3000)
    now[0] = 1005.0   # its burst over (ARRIVALS_PERIOD 1 s), still within UNDECIDED_WINDOW (10 s)
    assert guard.verdict(mine, "n1", node, {}, 0, {}, 0, {}, lambda: now[0]) == (YIELD, None)
    assert guard.note_pod(("d", "theirs"), {**waiting, "spec": {"nodeName": "n1"}}, "n1", "Running", False,
                          {"cpu": 2000}, lambda: now[0]) is True   # placed: room held for it may go
    assert guard.verdict(mine, "n1", node, {"cpu": 2000}, 1, {}, 0, {}, lambda: now[0]) == \
        (RETURN, "Insufficient cpu")


def test_kept_log_tails_stay_within_their_bound_the_oldest_going_first(monkeypatch):
    monkeypatch.setattr(victimlogs, "VICTIM_LOGS_TOTAL", 10)
    logs = victimlogs.VictimLogs()
    logs.keep("a", 50.0, "d/a-0", {"main": b"aaaa"}, False)
    logs.keep("b", 60.0, "d/b-0", {"main": b"bbbb"}, False)
    logs.keep("c", 70.0, "d/c-0", {"main": b"cccc"}, True)
    assert (list(logs.kept), logs.size) == (["b", "c"], 8)
    assert logs.get("c", 10.0) == ("d/c-0", {"main": b"cccc"}, True)
    logs.expire(60.0)
    assert (list(logs.kept), logs.size, logs.get("c", 70.0)) == (["c"], 4, None)


def node_object(name: str, cpu: str) -> dict:
    return {"metadata": {"name": name, "labels": {}}, "spec": {},
            "status": {"allocatable": {"cpu": cpu}, "conditions": [{"type": "Ready", "status": "True"}]}}


class PodEventsSeen:
    """Stands in for the pod events part: records what the dispatch hands it, and job j's newest attempt then."""

    def __init__(self, book: Ledger):
        self.book = book
        self.seen: list[tuple[str, str, int | None]] = []

    def on_pod_change(self, kind: str, obj: dict) -> None:
        self.seen.append((kind, obj["metadata"]["name"], self.book.attempts.get("j")))


def dispatch_alone(held: HeldStarts, told: list) -> tuple[Dispatch, dict, Ledger, PodEventsSeen]:
    nodes: dict = {}
    book = Ledger("c", lambda: 0.0)
    pods = PodEventsSeen(book)
    volumes = SimpleNamespace(on_pod=lambda key, obj, live: None)
    intake = SimpleNamespace(replace_pods=lambda uids: told.append(("uids", sorted(uids))))
    dispatch = Dispatch("c", nodes, PodCache(), book, health=None, intake=intake, namespaces=None,
                        priority_classes=None, volumes=volumes, volume_waits=None, held=held, pod_events=pods,
                        node_changed=lambda name, deleted, ready: told.append(("node", name, deleted, ready)),
                        release_held=lambda name: told.append(("release", name)))
    return dispatch, nodes, book, pods


def test_the_dispatch_replaces_every_node_in_place_deletes_the_missing_and_releases_the_held_starts_of_a_changed_one():
    held, told = HeldStarts(), []
    dispatch, nodes, _, _ = dispatch_alone(held, told)
    dispatch.replace_nodes([node_object("n1", "2"), node_object("n2", "4")])
    held.hold("n2", job("a", 1000, "n2"), 0, None, 1, 0.0, nominate=True)
    kept = nodes
    dispatch.replace_nodes([node_object("n2", "8")])   # n1 gone; n2 resized, a start held there
    assert kept is dispatch.nodes and {name: n.resources["cpu"] for name, n in nodes.items()} == {"n2": 8000}
    assert told == [("node", "n1", False, True), ("node", "n2", False, True), ("node", "n2", False, True),
                    ("release", "n2"), ("node", "n1", True, False)]


def test_the_dispatch_learns_each_jobs_newest_attempt_from_a_pod_listing_before_its_pods_and_deletes_the_unlisted():
    told = []
    dispatch, _, _, pods = dispatch_alone(HeldStarts(), told)
    gone = CachedPod(("d", "gone"), "n1", "Running", False, requests={"cpu": 1})
    dispatch.cache.put(gone.key, gone)

    def ours(name: str, attempt: int) -> dict:
        return {"metadata": {"namespace": "d", "name": name, "uid": f"u-{name}", "labels": {JOB_ID: "j"},
                             "annotations": {ATTEMPT: str(attempt)}}, "spec": {}, "status": {"phase": "Running"}}

    dispatch.replace_pods([ours("j-0", 0), ours("j-1", 1)])
    assert pods.seen == [("MODIFIED", "j-0", 1), ("MODIFIED", "j-1", 1), ("DELETED", "gone", 1)]
    assert told == [("uids", ["u-j-0", "u-j-1"])]


def test_watched_kinds_name_the_node_selector_and_the_spread_selectors_only_when_asked():
    plain = watched(None, False)
    assert [kind for kind, _, _ in plain[:7]] == ["nodes", "pods", "namespaces", "podgroups", "priorityclasses",
                                                  "jobs", "jobsets"]
    assert plain[0] == ("nodes", "/api/v1/nodes", {})
    assert watched("pool=batch", False)[0] == ("nodes", "/api/v1/nodes", {"labelSelector": "pool=batch"})
    assert len(watched(None, True)) > len(plain) and watched(None, True)[:len(plain)] == plain


def test_a_snapshot_counts_our_pods_as_running_jobs_and_the_rest_as_foreign_use_leaving_stopped_pods_out():
    nodes = {"n1": Node("n1", "c", {"cpu": 8000}), "n2": Node("n2", "c", {"cpu": 8000})}
    cache, book = PodCache(), Ledger("c", lambda: 0.0)
    health = SimpleNamespace(available=True, error="", side_errors={})
    snapshots = Snapshots("c", threading.RLock(), nodes, cache, book, health=health,
                          volumes=SimpleNamespace(view=lambda errors: None), namespaces=SimpleNamespace(labels={}))
    for name, node, phase in (("run", "n1", "Running"), ("old", "n1", "Running"), ("stop", "n2", "Running"),
                              ("done", "n2", "Succeeded"), ("away", "gone", "Running")):
        pod = CachedPod(("d", name), node, phase, False, job=job(name, 1000, node))
        cache.put(pod.key, pod)
        book.job_pod[name] = pod.key
    cache.put(("d", "web"), CachedPod(("d", "web"), "n2", "Running", False, requests={"cpu": 500}))
    book.reported[("d", "old")] = "lost"                           # given up: held until gone
    book.stopping["stop"], book.stopped[("d", "stop")] = "preempted", 0.0   # stopped by a decision
    book.inflight["new"] = job("new", 2000, "n2")                   # pod not seen yet
    snap = snapshots.take()
    assert [j.id for j in snap.running] == ["run", "new"]
    assert snap.foreign == {"n1": {"cpu": 1000, "pods": 1}, "n2": {"cpu": 500, "pods": 1}}
    assert [n.name for n in snap.nodes] == ["n1", "n2"]
    health.available, health.error = False, "pods: connection refused"
    with pytest.raises(ClusterUnavailable, match="cluster c: pods: connection refused"):
        snapshots.take()


def test_an_outage_is_said_once_per_distinct_error_of_each_required_informer_however_their_retries_alternate():
    health = InformerHealth("c", threading.RLock())
    health.synced = {"nodes": True, "pods": True}
    with structlog.testing.capture_logs() as logs:
        for kind in ("nodes", "pods"):   # both watches break as the API server goes
            health.failed(kind, KubeError(f"watch /api/v1/{kind}: connection refused"))
        for _ in range(3):               # then each relist fails, the two kinds' retries alternating
            for kind in ("pods", "nodes"):
                health.failed(kind, KubeError(f"GET /api/v1/{kind}: connection refused"))
        health.synced["nodes"] = True    # the nodes listed again, then out again with the same error: said again
        health.failed("nodes", KubeError("GET /api/v1/nodes: connection refused"))
    assert [log["error"] for log in logs] == ["watch /api/v1/nodes: connection refused",
                                              "watch /api/v1/pods: connection refused",
                                              "GET /api/v1/pods: connection refused",
                                              "GET /api/v1/nodes: connection refused",
                                              "GET /api/v1/nodes: connection refused"]
    assert {log["event"] for log in logs} == {"kubernetes.unavailable"}
    assert (health.available, health.error) == (False, "nodes: GET /api/v1/nodes: connection refused")
