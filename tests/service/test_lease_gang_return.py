"""A gang member sent back to the queue by its cluster's report (bind returned, pod lost) takes its active mates
back with it, their pods stopped and their retries kept, so the gang is placed again whole
(flotilla/service/leases.py's module docstring; the in-memory runner's rule, tests/kubernetes/test_kwok_runner.py).
An elastic gang's members and jobs of no gang go back alone."""

from __future__ import annotations

from dataclasses import replace

import pytest

from flotilla.core.backend import ClusterDecisions, JobEvent
from flotilla.service.jobspec import prepare
from flotilla.service.leases import ClusterReport, ingest
from flotilla.service.store import ActiveCopy, rebuild_states
from tests.support.loop import make, run_until
from tests.support.service import STORE_PARAMS, config, job, job_file, make_store, settings

RETURNED = "not bound to node c1-node-0: Insufficient cpu there now"
LOST = "node c1-node-0 lost: NotReady for 301s (nodeLostTimeout 300s)"


@pytest.fixture(params=STORE_PARAMS)
def store(request, tmp_path):
    s = make_store(request.param, tmp_path)
    s.sync_queues(settings().queues)
    yield s
    s.close()


def gang_member(name: str, size: int = 3, minimum: str | None = None, gang: str = "g") -> dict:
    spec = job(name, gang=(gang, size))
    if minimum is not None:
        spec["annotations"]["flotilla.io/gang-min-available"] = minimum
    return spec


def lease_running(store, specs, copy):
    """Submit ``specs``, lease them on c1 (one node each) and report them running: their ids."""
    _, new = prepare(job_file("A", "s1", specs), settings())
    ids = [s.id for s in store.submit("A", "s1", "alice", new, now=10.0)]
    store.record_cycle({i: ("c1", [f"c1-node-{k}"]) for k, i in enumerate(ids)}, {}, now=20.0)
    ingest(store, {"c1": ClusterReport([JobEvent(i, "running", "c1", f"c1-node-{k}", 21.0)
                                        for k, i in enumerate(ids)], set(ids))},
           now=21.0, lease_timeout=60, max_retries=3, copy=copy)
    assert [store.get_job(i)["state"] for i in ids] == ["running"] * len(ids)
    return ids


def after(store, ids, since: float):
    """Each job's events from ``since`` on: (kind, cluster, node, reason)."""
    return {i: [(e["kind"], e["cluster"], e["node"], e["reason"]) for e in store.events("A", "s1")
                if e["jobId"] == i and e["time"] >= since] for i in ids}


def states(store, ids):
    return [(store.get_job(i)["state"], store.get_job(i)["retries"], store.get_job(i)["reason"]) for i in ids]


def test_a_gang_member_returned_at_its_bind_takes_its_two_running_mates_back_to_the_queue(store):
    copy = ActiveCopy()
    ids = lease_running(store, [gang_member(f"m{k}") for k in range(3)], copy)
    assert copy.gangs == {("A", "g"): set(ids)}
    result = ingest(store, {"c1": ClusterReport([JobEvent(ids[0], "returned", "c1", "c1-node-0", 30.0, RETURNED,
                                                          cause="Insufficient")], set(ids[1:]))},
                    now=30.0, lease_timeout=60, max_retries=3, copy=copy)
    mates = f"gang g: {ids[0]} went back to the queue ({RETURNED})"
    assert states(store, ids) == [("queued", 0, RETURNED), ("queued", 0, mates), ("queued", 0, mates)]
    assert {c: [(pod, job.id if job else None) for pod, job in stops] for c, stops in result.stops.items()} == \
        {"c1": [(i, i) for i in sorted(ids[1:])]}   # each once, with its job (for its grace period), mates by id
    assert after(store, ids, 30.0) == {
        ids[0]: [("returned", "c1", "c1-node-0", RETURNED), ("queued", None, None, RETURNED)],
        ids[1]: [("returned", "c1", "c1-node-1", mates), ("queued", None, None, mates)],
        ids[2]: [("returned", "c1", "c1-node-2", mates), ("queued", None, None, mates)]}
    assert result.returned == {("c1", "Insufficient"): 1}     # binds returned: the member's only
    assert copy.jobs == {} and copy.gangs == {} and store.load_active() == {}
    assert rebuild_states(store.all_events()) == store.job_states()


def test_a_gang_member_lost_with_its_node_takes_its_mates_back_and_nobody_uses_a_retry(store):
    copy = ActiveCopy()
    ids = lease_running(store, [gang_member(f"m{k}") for k in range(3)], copy)
    result = ingest(store, {"c1": ClusterReport([JobEvent(ids[1], "lost", "c1", "c1-node-1", 30.0, LOST,
                                                          cause="NodeLost")], {ids[0], ids[2]})},
                    now=30.0, lease_timeout=60, max_retries=3, copy=copy)
    lost = f"lost on cluster c1: {LOST}"
    mates = f"gang g: {ids[1]} went back to the queue ({lost})"
    assert states(store, ids) == [("queued", 0, mates), ("queued", 0, lost), ("queued", 0, mates)]
    assert {c: [pod for pod, _ in stops] for c, stops in result.stops.items()} == {"c1": [ids[1], *sorted([ids[0], ids[2]])]}
    assert after(store, ids, 30.0)[ids[1]] == [("lease-expired", "c1", "c1-node-1", lost),
                                               ("queued", None, None, lost)]
    assert after(store, ids, 30.0)[ids[2]] == [("returned", "c1", "c1-node-2", mates), ("queued", None, None, mates)]
    assert copy.gangs == {} and rebuild_states(store.all_events()) == store.job_states()


def test_a_gang_member_lost_and_retried_takes_its_mates_back_without_using_their_retries(store):
    """As the runner: a lost pod queued again with a retry (not lost with its node) takes the gang back too."""
    copy = ActiveCopy()
    ids = lease_running(store, [gang_member(f"m{k}") for k in range(3)], copy)
    ingest(store, {"c1": ClusterReport([JobEvent(ids[2], "lost", "c1", "c1-node-2", 30.0, "pod deleted")],
                                       {ids[0], ids[1]})}, now=30.0, lease_timeout=60, max_retries=3, copy=copy)
    lost = "lost on cluster c1: pod deleted (retry 1 of 3)"
    mates = f"gang g: {ids[2]} went back to the queue ({lost})"
    assert states(store, ids) == [("queued", 0, mates), ("queued", 0, mates), ("queued", 1, lost)]


def test_a_gang_member_that_failed_and_is_retried_takes_its_mates_back_without_using_their_retries(store):
    """A member's own failure (its exit code) that its retry policy retries: it runs again, and so must the whole
    gang; a member that fails for good (no policy retries an exit code by default) leaves its mates running."""
    def retried(name: str) -> dict:
        return {**gang_member(name), "retryPolicy": [{"exitCodes": [1], "action": "retry", "limit": 2}]}

    copy = ActiveCopy()
    ids = lease_running(store, [retried(f"m{k}") for k in range(3)], copy)
    ingest(store, {"c1": ClusterReport([JobEvent(ids[0], "failed", "c1", "c1-node-0", 30.0, "exit code 1",
                                                 exit_code=1)], {ids[1], ids[2]})},
           now=30.0, lease_timeout=60, max_retries=3, copy=copy)
    failed = "exit code 1 (job retryPolicy rule 1 (exit 1: retry, limit 2): retry 1 of 2)"
    mates = f"gang g: {ids[0]} went back to the queue ({failed})"
    assert states(store, ids) == [("queued", 1, failed), ("queued", 0, mates), ("queued", 0, mates)]
    assert copy.gangs == {} and rebuild_states(store.all_events()) == store.job_states()

    copy = ActiveCopy()
    ids = lease_running(store, [gang_member(f"n{k}", gang="h") for k in range(3)], copy)
    ingest(store, {"c1": ClusterReport([JobEvent(ids[0], "failed", "c1", "c1-node-0", 40.0, "exit code 1",
                                                 exit_code=1)], {ids[1], ids[2]})},
           now=40.0, lease_timeout=60, max_retries=3, copy=copy)
    assert [s for s, _, _ in states(store, ids)] == ["failed", "running", "running"]


def test_a_member_whose_lease_expired_on_a_cluster_that_answers_takes_its_mates_back(store):
    """Its cluster stopped listing it: it uses a retry (an expiry), its mates still listed there none."""
    copy = ActiveCopy()
    ids = lease_running(store, [gang_member(f"m{k}") for k in range(3)], copy)
    for now in (25.0, 32.0):
        result = ingest(store, {"c1": ClusterReport([], set(ids[1:]))}, now=now, lease_timeout=10, max_retries=3,
                        copy=copy)
    expired = "lease on cluster c1 not renewed for 11s (timeout 10s) (retry 1 of 3)"
    mates = f"gang g: {ids[0]} went back to the queue ({expired})"
    assert states(store, ids) == [("queued", 1, expired), ("queued", 0, mates), ("queued", 0, mates)]
    assert {c: [pod for pod, _ in stops] for c, stops in result.stops.items()} == {"c1": [ids[0], *sorted(ids[1:])]}
    assert [k for k, *_ in after(store, ids, 32.0)[ids[1]]] == ["returned", "queued"]


def test_a_cluster_silent_past_the_timeout_has_each_members_lease_expire_on_its_own(store):
    copy = ActiveCopy()
    ids = lease_running(store, [gang_member(f"m{k}") for k in range(3)], copy)
    ingest(store, {}, now=32.0, lease_timeout=10, max_retries=3, copy=copy)
    assert [(j["state"], j["retries"]) for j in map(store.get_job, ids)] == [("queued", 1)] * 3
    assert {i: [k for k, *_ in events] for i, events in after(store, ids, 32.0).items()} == \
        {i: ["lease-expired", "queued"] for i in ids}


def test_a_cancelled_mate_is_finished_and_a_mate_on_a_stopping_deadline_uses_a_retry(store):
    """Mates asked to stop go the way a returned job asked to stop goes (the rest of return_to_queue's rule)."""
    copy = ActiveCopy()
    ids = lease_running(store, [gang_member(f"m{k}") for k in range(3)], copy)
    store.cancel("A", job_ids=[ids[1]], now=25.0)
    ingest(store, {"c1": ClusterReport([JobEvent(ids[0], "returned", "c1", "c1-node-0", 30.0, RETURNED)],
                                       set(ids[1:]))}, now=30.0, lease_timeout=60, max_retries=3, copy=copy)
    mates = f"gang g: {ids[0]} went back to the queue ({RETURNED})"
    assert [store.get_job(i)["state"] for i in ids] == ["queued", "cancelled", "queued"]
    assert after(store, ids, 30.0)[ids[1]] == [("returned", "c1", "c1-node-1", mates),
                                               ("cancelled", None, None, "cancelled")]


def test_an_elastic_gangs_member_and_a_job_of_no_gang_go_back_alone(store):
    copy = ActiveCopy()
    ids = lease_running(store, [gang_member(f"e{k}", 3, minimum="2") for k in range(3)] + [job("solo"), job("x")],
                        copy)
    assert copy.gangs == {}
    result = ingest(store, {"c1": ClusterReport([JobEvent(ids[0], "returned", "c1", "c1-node-0", 30.0, RETURNED),
                                                 JobEvent(ids[3], "returned", "c1", "c1-node-3", 30.0, RETURNED)],
                                                {ids[1], ids[2], ids[4]})},
                    now=30.0, lease_timeout=60, max_retries=3, copy=copy)
    assert [store.get_job(i)["state"] for i in ids] == ["queued", "running", "running", "queued", "running"]
    assert result.stops == {}
    assert set(copy.jobs) == {ids[1], ids[2], ids[4]} and copy.jobs == store.load_active()


def test_a_gang_whose_minimum_is_its_size_runs_all_together(store):
    copy = ActiveCopy()
    ids = lease_running(store, [gang_member(f"m{k}", 2, minimum="2") for k in range(2)], copy)
    assert copy.gangs == {("A", "g"): set(ids)}
    ingest(store, {"c1": ClusterReport([JobEvent(ids[1], "returned", "c1", "c1-node-1", 30.0, RETURNED)],
                                       {ids[0]})}, now=30.0, lease_timeout=60, max_retries=3, copy=copy)
    assert [store.get_job(i)["state"] for i in ids] == ["queued", "queued"]


def test_the_gang_index_follows_a_copy_read_from_the_store_and_changes_put_into_it(store):
    """The index is kept by the copy's put and drop; a full read builds the same."""
    copy = ActiveCopy()
    ids = lease_running(store, [gang_member(f"m{k}") for k in range(3)], copy)
    ingest(store, {"c1": ClusterReport([JobEvent(ids[0], "succeeded", "c1", "c1-node-0", 30.0)], set(ids[1:]))},
           now=30.0, lease_timeout=60, max_retries=3, copy=copy)
    assert copy.gangs == {("A", "g"): {ids[1], ids[2]}}
    fresh = ActiveCopy()
    fresh.load(store.load_active(), {})
    assert fresh.gangs == copy.gangs
    fresh.put(replace(fresh.jobs[ids[1]], state="running"))
    fresh.drop(ids[2])
    assert fresh.gangs == {("A", "g"): {ids[1]}}


def test_in_the_service_a_gang_returned_in_part_at_its_bind_is_placed_again_whole_and_succeeds(tmp_path):
    """c1 returns the first bind of one member (no room there any more); the gang is queued again whole, placed
    whole, and all three succeed, none of them using a retry."""
    cfg = config()
    settings_, store, loop, clock = make(tmp_path, cfg)
    _, new = prepare(job_file("A", "s1", [gang_member(f"m{k}") | {"annotations": {
        **gang_member(f"m{k}")["annotations"], "flotilla.io/simulated-duration": "30s"}} for k in range(3)]),
        settings_)
    ids = [s.id for s in store.submit("A", "s1", "alice", new, now=clock.now)]
    returned = []
    for backend in loop.backends.values():
        def apply(decisions: ClusterDecisions, backend=backend, original=backend.apply):
            starts = [p for p in decisions.start if p.job.id != ids[1] or returned]
            if len(starts) < len(decisions.start):
                placement = next(p for p in decisions.start if p.job.id == ids[1])
                returned.append((backend.name, placement.node))
                backend._events.append(JobEvent(ids[1], "returned", backend.name, placement.node, clock.now,
                                                f"not bound to node {placement.node}: Insufficient cpu there now",
                                                cause="Insufficient"))
            original(replace(decisions, start=starts))
        backend.apply = apply
    run_until(loop, clock, lambda: all(store.get_job(i)["state"] == "succeeded" for i in ids))
    [(cluster, node)] = returned
    reason = f"not bound to node {node}: Insufficient cpu there now"
    mates = f"gang g: {ids[1]} went back to the queue ({reason})"
    kinds = {i: [(e["kind"], e["reason"]) for e in store.events("A", "s1") if e["jobId"] == i
                 and e["kind"] in ("leased", "returned", "queued", "succeeded")] for i in ids}
    first = [("queued", ""), ("leased", "")]
    again = [("leased", ""), ("succeeded", "")]
    assert kinds == {ids[0]: first + [("returned", mates), ("queued", mates)] + again,
                     ids[1]: first + [("returned", reason), ("queued", reason)] + again,
                     ids[2]: first + [("returned", mates), ("queued", mates)] + again}
    assert [store.get_job(i)["retries"] for i in ids] == [0, 0, 0]
    assert {store.get_job(i)["cluster"] for i in ids} == {cluster}
    assert rebuild_states(store.all_events()) == store.job_states()
