"""On KWOK: the service's loop with a gang of three API jobs running; the kubelet refuses one member's pod
(``OutOfcpu``, written through the status subresource as a kubelet writes it: KWOK's fake kubelet admits every
pod). The member goes back to the queue and takes its two running mates with it, their pods deleted; the gang is
placed again whole, each member on a new pod, none of them using a retry (flotilla/service/leases.py)."""

from __future__ import annotations

import time

import pytest

from flotilla.kubernetes.client import pod_path
from flotilla.service.jobspec import prepare
from tests.support.incluster import Harness, live
from tests.support.service import job, job_file

pytestmark = pytest.mark.kwok

MESSAGE = "Node didn't have enough resource: cpu, requested: 1000, used: 32000, capacity: 32000"


def running(pods, names):
    phase = {p["metadata"]["name"]: p["status"].get("phase") for p in live(pods, "flotilla-jobs")}
    return all(phase.get(name) == "Running" for name in names)


def cycle_until(h, check, what: str, cycles: int = 200) -> None:
    """Run the loop's cycles until ``check()`` (liveness only: the cluster's watch takes its time)."""
    for _ in range(cycles):
        h.cycle()
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_member_refused_by_the_kubelet_takes_its_running_gang_back_to_the_queue_whole(kwok, tmp_path):
    cluster = kwok["a"]
    cluster.create_namespace("flotilla-jobs")
    h = Harness(tmp_path, cluster)
    try:
        _, new = prepare(job_file("A", "gang", [job(f"m{k}", gang=("g", 3)) for k in range(3)]), h.settings)
        ids = [s.id for s in h.store.submit("A", "gang", "alice", new)]
        first = [f"flotilla-{i}-0" for i in ids]
        pods = h.settle(lambda pods: running(pods, first), "the gang's first pods running", cycles=5)
        node = next(p["spec"]["nodeName"] for p in pods if p["metadata"]["name"] == first[0])
        cycle_until(h, lambda: all(h.store.get_job(i)["state"] == "running" for i in ids), "the gang running")
        cluster.client.patch(pod_path("flotilla-jobs", first[0]) + "/status",
                             {"status": {"phase": "Failed", "reason": "OutOfcpu", "message": MESSAGE}},
                             kind="application/merge-patch+json")
        again = [f"flotilla-{i}-1" for i in ids]
        pods = h.settle(lambda pods: running(pods, again), "the gang's second pods running", cycles=20)
        assert not any(p["metadata"]["name"] in first[1:] for p in live(pods, "flotilla-jobs"))
        cycle_until(h, lambda: all(h.store.get_job(i)["state"] == "running" for i in ids), "the gang running again")
        reason = f"refused by the kubelet of node {node}: OutOfcpu: {MESSAGE}"
        mates = f"gang g: {ids[0]} went back to the queue ({reason})"
        kinds = {i: [(e["kind"], e["reason"]) for e in h.store.events("A", "gang") if e["jobId"] == i
                     and e["kind"] in ("returned", "queued", "leased", "running", "failed", "cancelled")]
                 for i in ids}
        placed = [("queued", ""), ("leased", ""), ("running", "")]
        assert kinds == {ids[0]: placed + [("returned", reason), ("queued", reason)] + placed[1:],
                         ids[1]: placed + [("returned", mates), ("queued", mates)] + placed[1:],
                         ids[2]: placed + [("returned", mates), ("queued", mates)] + placed[1:]}
        assert [h.store.get_job(i)["retries"] for i in ids] == [0, 0, 0]
    finally:
        h.close()
