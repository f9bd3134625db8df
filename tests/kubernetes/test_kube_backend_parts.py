"""The Kubernetes backend's parts on their own, without a cluster or the facade: the pod cache's per-node sums, the
held starts' order, the bind guard's verdicts and the kept log tails' bound."""

from __future__ import annotations

from flotilla.core.model import Job, Node
from flotilla.kubernetes.backend import victimlogs
from flotilla.kubernetes.backend.bindguard import BIND, HOLD, RETURN, YIELD, BindGuard
from flotilla.kubernetes.backend.held import HeldStarts
from flotilla.kubernetes.backend.podcache import CachedPod, PodCache


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
