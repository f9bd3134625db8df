"""The Kubernetes backend's starts waiting for their claims to be bound (flotilla.kubernetes.volumes): a claim's
event looks only at the starts waiting for it, each cycle's pass only at those whose time is up."""

from __future__ import annotations

from tests.support.volumes import pv as _pv
from tests.support.volumes import pvc as _pvc
from tests.support.volumes import storage_class as _sc


class _PatchingClient:
    """Stands for the API server in the backend's volume writes: every patch accepted and kept."""

    def __init__(self):
        self.patches: list[tuple[str, dict]] = []

    def patch(self, path, body, kind=None):
        self.patches.append((path, body))
        return {}

    def end_watches(self, stop):
        pass

    def close(self):
        pass


def _waiting_backend(claims: int):
    """A backend (no informers, no pool work) with ``claims`` free local PVs, claims ``c0``..., and one job per claim
    whose PV write is done and which now waits for its claim to be bound; its pod starts are recorded."""
    from flotilla.core.model import Job
    from flotilla.kubernetes.backend import KubernetesCluster

    now = [1000.0]
    backend = KubernetesCluster("k", client=_PatchingClient(), start=False, workers=1, clock=lambda: now[0],
                                volume_bind_timeout=60.0)
    backend.dispatch.replace("storageclasses", [_sc("local")])
    backend.dispatch.replace("pvs", [_pv(f"pv{i}", node=f"node-{i}") for i in range(claims)])
    backend.dispatch.replace("pvcs", [_pvc(f"c{i}") for i in range(claims)])
    started: list[tuple[str, str]] = []
    backend.starts.start_pod = lambda job, node, *rest: started.append((job.id, node))
    for i in range(claims):
        job = Job(f"job-{i}", "A", requests={"cpu": 100}, claims=(f"ns/c{i}",))
        with backend._lock:
            backend.book.starts[job.id] = 1
            backend.book.inflight[job.id] = job
            backend.volumes.assume(((f"ns/c{i}", f"pv{i}"),), f"node-{i}")
        backend.volume_waits.bind(job, f"node-{i}", 0, None, ((f"ns/c{i}", f"pv{i}"),), 1)
    return backend, started, now


def test_a_claim_seen_bound_starts_only_the_jobs_waiting_for_it_and_looks_at_no_other():
    backend, started, _ = _waiting_backend(50)
    try:
        assert [path for path, _ in backend.client.patches] == [f"/api/v1/persistentvolumes/pv{i}" for i in range(50)]
        assert backend.volumes.written == {f"pv{i}": f"ns/c{i}" for i in range(50)}   # until the PV watch shows them
        assert started == []
        looked = []
        unbound = backend.volumes.unbound
        backend.volumes.unbound = lambda names: looked.append(names) or unbound(names)
        backend.dispatch.on_event("pvcs", "MODIFIED", _pvc("c7", volume="pv7", phase="Bound"))
        assert started == [("job-7", "node-7")]
        assert looked == [("ns/c7",)]          # the claim's own job, not the 49 others
        backend.dispatch.on_event("pvcs", "MODIFIED", _pvc("c8"))   # still pending: nothing starts
        assert started == [("job-7", "node-7")]
        backend.dispatch.on_event("pvcs", "MODIFIED", _pvc("c8", volume="pv8", phase="Bound"))
        assert started == [("job-7", "node-7"), ("job-8", "node-8")]
        assert sorted(backend.volume_waits.waits) == sorted(f"job-{i}" for i in range(50) if i not in (7, 8))
        assert "ns/c7" not in backend.volume_waits.on_claim and backend.volume_waits.on_claim["ns/c9"] == {"job-9"}
    finally:
        backend.close()


def test_a_claim_not_bound_by_the_timeout_returns_its_job_and_the_bound_ones_start():
    """Each cycle's pass looks only at the starts whose time is up."""
    backend, started, now = _waiting_backend(3)
    try:
        backend.dispatch.on_event("pvcs", "MODIFIED", _pvc("c1", volume="pv1", phase="Bound"))
        looked = []
        unbound = backend.volumes.unbound
        backend.volumes.unbound = lambda names: looked.append(names) or unbound(names)
        now[0] += 59.0
        assert backend.poll_events() == [] and looked == []   # the periodic pass reads no claim before its time
        now[0] += 2.0
        events = backend.poll_events()
        assert sorted(looked) == [("ns/c0",), ("ns/c2",)]
        assert started == [("job-1", "node-1")]
        # Returned, no retry used, as kube-scheduler requeues a pod whose volume binding timed out.
        assert sorted((e.job_id, e.kind, e.reason, e.cause) for e in events) == [
            ("job-0", "returned", "binding volumes: claims not bound within volumeBindTimeout 60s: ns/c0",
             "VolumeBinding"),
            ("job-2", "returned", "binding volumes: claims not bound within volumeBindTimeout 60s: ns/c2",
             "VolumeBinding")]
        assert backend.volume_waits.waits == {} and backend.volume_waits.on_claim == {}
        assert backend.volumes.assumed_claims == {} and backend.volumes.assumed_pvs == {}
    finally:
        backend.close()


def test_a_start_placed_again_on_the_pv_already_written_for_it_waits_at_once_without_a_writer():
    """A start given back (say after volumeBindTimeout) and placed again while the PV controller binds: its PV's
    claimRef is written already, so nothing queues for the volume writers and its claim's event starts it."""
    from flotilla.core.backend import ClusterDecisions
    from flotilla.core.decisions import Placement
    from flotilla.core.model import Job
    from flotilla.kubernetes.backend import KubernetesCluster

    backend = KubernetesCluster("k", client=_PatchingClient(), start=False, workers=1, volume_bind_timeout=60.0)
    try:
        backend.dispatch.replace("storageclasses", [_sc("local")])
        backend.dispatch.replace("pvs", [_pv("pv0", node="node-0", claim_ref=("ns", "c0")), _pv("pv1", node="node-1")])
        backend.dispatch.replace("pvcs", [_pvc("c0"), _pvc("c1")])
        started: list[tuple[str, str]] = []
        backend.starts.start_pod = lambda job, node, *rest: started.append((job.id, node))
        again = Job("job-0", "A", requests={"cpu": 100}, claims=("ns/c0",))
        fresh = Job("job-1", "A", requests={"cpu": 100}, claims=("ns/c1",))
        work: list[tuple] = []
        with backend._lock:
            backend._apply(ClusterDecisions(start=[Placement(again, "k", "node-0", (("ns/c0", "pv0"),)),
                                                   Placement(fresh, "k", "node-1", (("ns/c1", "pv1"),))]), work)
        assert [(task[0].__name__, task[1].id) for task in work] == [("bind", "job-1")]
        assert sorted(backend.volume_waits.waits) == ["job-0"] and backend.client.patches == []
        backend.dispatch.on_event("pvcs", "MODIFIED", _pvc("c0", volume="pv0", phase="Bound"))
        assert started == [("job-0", "node-0")]
    finally:
        backend.close()
