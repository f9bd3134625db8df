"""The scheduling loop in-process on a fake clock: the example job files run to completion, multi-pod
jobs and gangs land on one cluster, cancels stop running jobs, deadlines fail jobs, events rebuild state."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flotilla.config import load_config
from flotilla.service.jobspec import prepare
from flotilla.service.settings import from_config
from flotilla.service.store import rebuild_states
from tests.support.service import config as service_config, job, job_file
from tests.support.loop import make, run_until

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_every_example_job_file_runs_to_completion(tmp_path):
    cfg = load_config(EXAMPLES / "serve.yaml")
    settings, store, loop, clock = make(tmp_path, cfg)
    owners = {"A": "alice", "B": "bob"}
    files = sorted((EXAMPLES / "jobs").glob("*.yaml"))
    assert len(files) >= 4
    for path in files:
        raw = yaml.safe_load(path.read_text())
        file, new = prepare(raw, settings)
        store.submit(file.queue, file.jobSetId, owners[file.queue], new, now=clock.now)
    total = store.count_jobs()
    run_until(loop, clock, lambda: store.count_jobs(["succeeded"]) == total, step=5.0)
    gang = store.list_jobs("A", "gang")
    assert len({j["cluster"] for j in gang}) == 1
    events = store.all_events()
    gang_ids = {j["id"] for j in gang}
    assert len({e["time"] for e in events if e["kind"] == "leased" and e["jobId"] in gang_ids}) == 1
    (multi,) = store.list_jobs("B", "multi")
    assert len(multi["node"].split(",")) >= 1 and multi["cluster"]
    assert rebuild_states(events) == store.job_states()
    store.close()


def test_cancel_stops_a_running_job_on_its_cluster_and_deadlines_fail_jobs(tmp_path):
    settings, store, loop, clock = make(tmp_path, service_config())
    _, new = prepare(job_file("A", "s", [job("long"), job("short-deadline", activeDeadlineSeconds=3),
                                         job("other", duration="100s")]), settings)
    ids = [s.id for s in store.submit("A", "s", "alice", new, now=clock.now)]
    run_until(loop, clock, lambda: all(store.get_job(i)["state"] == "running" for i in ids))
    store.cancel("A", job_ids=[ids[0]], by="alice", now=clock.now)
    assert store.get_job(ids[0])["state"] == "running"
    loop.run_cycle()
    assert store.get_job(ids[0])["state"] == "running"     # stop handed over this cycle...
    clock.now += 1
    loop.run_cycle()
    assert store.get_job(ids[0])["state"] == "cancelled"   # ...confirmed by the cluster the next
    assert not any(j.id == ids[0] for b in loop.backends.values() for j in b.running_jobs())
    run_until(loop, clock, lambda: store.get_job(ids[1])["state"] == "failed")
    assert store.get_job(ids[1])["reason"] == "active deadline exceeded"
    assert store.get_job(ids[2])["state"] == "running"
    assert rebuild_states(store.all_events()) == store.job_states()
    store.close()


def test_on_a_cluster_that_enforces_deadlines_the_services_deadline_is_a_backstop(tmp_path):
    """A kubelet fails a pod past activeDeadlineSeconds with its own reason; the service stops the job only
    10 s after the deadline and the grace period, if the cluster has not."""
    # These simulated clusters enforce no deadline by themselves: the backstop is what acts.
    settings, store, loop, clock = make(tmp_path, service_config(), enforces_deadlines=True)
    _, new = prepare(job_file("A", "s", [job("d", activeDeadlineSeconds=3, terminationGracePeriodSeconds=2)]),
                     settings)
    [job_id] = [s.id for s in store.submit("A", "s", "alice", new, now=clock.now)]
    run_until(loop, clock, lambda: store.get_job(job_id)["state"] == "running", step=0.5)
    started = store.get_job(job_id)["started"]
    run_until(loop, clock, lambda: store.get_job(job_id)["state"] == "failed", step=0.5)
    stopped = next(e["time"] for e in store.all_events() if e["jobId"] == job_id and e["kind"] == "failed")
    # Stopped once past 3 + 2 + 10 s after it started (a cycle each half second), never before.
    assert 15 < stopped - started <= 16
    assert store.get_job(job_id)["reason"] == "active deadline exceeded"
    store.close()


def test_lease_expiry_requeues_then_fails_after_max_retries(tmp_path):
    settings, store, loop, clock = make(tmp_path, service_config())
    _, new = prepare(job_file("A", "s", [job("x", duration="1h")]), settings)
    (job_id,) = [s.id for s in store.submit("A", "s", "alice", new, now=clock.now)]
    for backend in loop.backends.values():
        backend.available = True
    run_until(loop, clock, lambda: store.get_job(job_id)["state"] == "running")
    expiries = 0
    while store.get_job(job_id)["state"] != "failed":
        cluster = store.get_job(job_id)["cluster"]
        if cluster:
            loop.backends[cluster].available = False
        clock.now += 1
        loop.run_cycle()
        for backend in loop.backends.values():
            backend.available = backend.name != cluster or store.get_job(job_id)["cluster"] is None
        expiries = sum(e["kind"] == "lease-expired" for e in store.events("A", "s"))
        assert expiries <= 4
    assert expiries == 4
    record = store.get_job(job_id)
    assert "gave up after 3 retries" in record["reason"]
    store.close()


@pytest.mark.parametrize("pods", [2, 3])
def test_a_multi_pod_job_lands_on_one_cluster(tmp_path, pods):
    settings, store, loop, clock = make(tmp_path, service_config())
    spec = {"clientId": "mp", "podSpecs": [job(cpu="6")["podSpec"] for _ in range(pods)],
            "annotations": {"flotilla.io/simulated-duration": "2s"}}
    _, new = prepare(job_file("A", "s", [spec]), settings)
    (job_id,) = [s.id for s in store.submit("A", "s", "alice", new, now=clock.now)]
    loop.run_cycle()
    record = store.get_job(job_id)
    if pods == 2:
        assert record["state"] == "pending" and len(record["node"].split(",")) == 2
    else:   # 3 x 6 cpu does not fit one 2 x 8-cpu cluster: it waits rather than spanning clusters
        assert record["state"] == "queued"
    store.close()


def test_owner_fair_share_interleaves_submitting_users_in_one_queue(tmp_path):
    """The service stamps each job's submitter; ownerfairshare gives carol's 10 jobs their share of queue A."""
    from tests.support.scenario import PLUGINS

    cfg = service_config(PLUGINS + "  - name: ownerfairshare\n")
    settings, store, loop, clock = make(tmp_path, cfg)
    _, new = prepare(job_file("A", "big", [job(f"a{i}", duration="1h") for i in range(40)]), settings)
    alice = [s.id for s in store.submit("A", "big", "alice", new, now=clock.now)]
    clock.now += 1
    _, new = prepare(job_file("A", "small", [job(f"c{i}", duration="1h") for i in range(10)]), settings)
    carol = [s.id for s in store.submit("A", "small", "carol", new, now=clock.now)]
    loop.run_cycle()
    leased = {job_id for job_id in alice + carol if store.get_job(job_id)["state"] != "queued"}
    # 32 cores: alice's and carol's jobs alternate (keys 1, 1, 2, 2, ...) until carol's 10 are placed.
    assert leased == set(carol) | set(alice[:22])
    assert store.get_job(carol[0])["annotations"]["flotilla.io/owner"] == "carol"
    store.close()


def test_an_elastic_gang_starts_with_its_minimum_in_the_service(tmp_path):
    """flotilla.io/gang-min-available on a submitted gang: 4 of 6 start on c1 (room for 4 there)."""
    settings, store, loop, clock = make(tmp_path, service_config())
    # c2 (16 cores) is full of bob's long jobs; c1 has 16 cores, 12 of them taken.
    _, fill = prepare(job_file("B", "fill", [job(f"f{i}", cpu="4", duration="1h") for i in range(7)]), settings)
    store.submit("B", "fill", "bob", fill, now=clock.now)
    loop.run_cycle()
    members = []
    for i in range(6):
        spec = job(f"g{i}", cpu="1", duration="1h", gang=("g", 6))
        spec["annotations"]["flotilla.io/gang-min-available"] = "4"
        members.append(spec)
    _, new = prepare(job_file("A", "gang", members), settings)
    ids = [s.id for s in store.submit("A", "gang", "alice", new, now=clock.now)]
    clock.now += 1
    loop.run_cycle()
    started = [store.get_job(i) for i in ids if store.get_job(i)["state"] != "queued"]
    assert len(started) == 4 and {j["cluster"] for j in started} == {"c1"}


def test_a_minimum_above_the_gang_size_is_refused(tmp_path):
    from flotilla.service.jobspec import SubmissionRejected

    settings = from_config(service_config())
    spec = job("g0", gang=("g", 1))
    spec["annotations"]["flotilla.io/gang-min-available"] = "3"
    with pytest.raises(SubmissionRejected) as caught:
        prepare(job_file("A", "gang", [spec]), settings)
    assert [(r.field, r.message) for r in caught.value.rejections] == [
        ("annotations.flotilla.io/gang-min-available",
         "expected a whole number from 1 to the gang's cardinality 1, got '3'")]
