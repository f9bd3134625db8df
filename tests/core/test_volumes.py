"""Persistent volume claims in the core (flotilla.core.volumes): where a job naming claims may go, as
kube-scheduler's VolumeBinding, VolumeZone and VolumeRestrictions plugins decide, on a cluster whose
volumes a fixed view describes (the Kubernetes backend's view is tested on KWOK in test_kwok_volumes.py)."""

from __future__ import annotations

import pytest

from flotilla.config.loader import parse_config
from flotilla.core.model import ClusterSnapshot, Gang, Job, Node, PriorityClass, Queue, Snapshot
from flotilla.core.nodeaffinity import NAME_FIELD, Requirement, Term
from flotilla.core.volumes import RWOP_CONFLICT, Claim, VolumeOption, not_found
from flotilla.scheduler import Scheduler
from tests.support.volumes import pv as _pv
from tests.support.volumes import pvc as _pvc
from tests.support.volumes import storage_class as _sc

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
CONFIG = """
queues: [{name: A}]
"""


def pinned(node: str) -> tuple[Term, ...]:
    return (Term((Requirement(HOST, "In", (node,)),)),)


class View:
    """A cluster's claims as a fixed table (what flotilla.kubernetes.volumes builds from its informers)."""

    def __init__(self, claims: dict[str, Claim], keys=(HOST,)):
        self.table = claims
        self.label_keys = frozenset(keys)

    def claims(self, names):
        return tuple(self.table.get(name) or Claim(name, refusal=not_found(name.split("/")[-1])) for name in names)


def nodes(n=4, zones=None):
    return [Node(f"node-{i}", "c1", {"cpu": 8000}, {HOST: f"node-{i}", **({ZONE: zones[i - 1]} if zones else {})})
            for i in range(1, n + 1)]


def cycle(jobs, view, node_list=None, scheduler=None):
    scheduler = scheduler or Scheduler(parse_config(CONFIG, None))
    snap = Snapshot([ClusterSnapshot("c1", node_list or nodes(), volumes=view)], jobs, [Queue("A")],
                    [PriorityClass("armada-default", 30000, False)], "armada-default")
    decisions = scheduler.run_cycle(snap)
    return {p.job.id: p.node for p in decisions.scheduled}, decisions, {p.job.id: p for p in decisions.scheduled}


def job(name, *claims, gang=None, submitted=0.0):
    return Job(name, "A", requests={"cpu": 1000}, claims=tuple(claims), gang=gang, submitted=submitted)


def test_a_missing_claim_keeps_the_job_off_every_node_with_its_name():
    placed, decisions, _ = cycle([job("a", "ns/does-not-exist"), job("b")], View({}))
    assert placed == {"b": "node-1"}
    assert decisions.reasons["a"] == '0/4 nodes are available: 4 persistentvolumeclaim "does-not-exist" not found'


def test_a_bound_volume_pinned_to_node_4_takes_every_pod_of_its_claim_there():
    view = View({"ns/data": Claim("ns/data", terms=pinned("node-4"))})
    placed, _, _ = cycle([job(f"p{k}", "ns/data", submitted=k) for k in range(3)], view)
    assert placed == {"p0": "node-4", "p1": "node-4", "p2": "node-4"}


def test_volume_zone_keeps_the_job_in_its_volume_zone():
    view = View({"ns/z": Claim("ns/z", zones=((ZONE, frozenset({"b"})),))}, keys=(HOST, ZONE))
    placed, _, _ = cycle([job("a", "ns/z")], view, nodes(4, zones=["a", "a", "b", "b"]))
    assert placed == {"a": "node-3"}


def test_wait_for_first_consumer_takes_the_node_of_its_only_matching_volume_and_names_it():
    view = View({"ns/w": Claim("ns/w", options=(VolumeOption("pv-x", pinned("node-3"), 10),))})
    placed, _, starts = cycle([job("a", "ns/w")], view)
    assert placed == {"a": "node-3"}
    assert starts["a"].volumes == (("ns/w", "pv-x"),)


def test_two_claims_never_take_one_volume_and_the_second_waits_with_the_reason():
    only = (VolumeOption("pv-x", pinned("node-3"), 10),)
    view = View({"ns/w1": Claim("ns/w1", options=only), "ns/w2": Claim("ns/w2", options=only)})
    placed, decisions, _ = cycle([job("a", "ns/w1"), job("b", "ns/w2", submitted=1)], view)
    assert placed == {"a": "node-3"}
    # Three nodes have no volume for it, and node-3's went to a.
    assert decisions.reasons["b"] == "0/4 nodes are available: 4 node(s) didn't find available persistent volumes " \
                                     "to bind"


def test_the_smallest_matching_volume_is_taken_and_provisioning_only_when_none_matches():
    options = (VolumeOption("big", pinned("node-2"), 100), VolumeOption("small", pinned("node-2"), 10),
               VolumeOption("", None))
    view = View({f"ns/c{k}": Claim(f"ns/c{k}", options=options) for k in range(4)})
    placed, _, starts = cycle([job(f"j{k}", f"ns/c{k}", submitted=k) for k in range(4)], view,
                              [Node("node-2", "c1", {"cpu": 8000}, {HOST: "node-2"})])
    assert [starts[f"j{k}"].volumes for k in range(4)] == [(("ns/c0", "small"),), (("ns/c1", "big"),),
                                                           (("ns/c2", ""),), (("ns/c3", ""),)]


def test_jobs_sharing_an_unbound_claim_follow_the_first_ones_choice():
    options = (VolumeOption("", None),)   # provisioning anywhere: the first placement picks the node
    view = View({"ns/s": Claim("ns/s", options=options)})
    placed, _, _ = cycle([job(f"p{k}", "ns/s", submitted=k) for k in range(3)], view)
    assert len(set(placed.values())) == 1 and len(placed) == 3


def test_gang_members_take_distinct_volumes_or_wait_together():
    two = (VolumeOption("pv-a", pinned("node-1"), 10), VolumeOption("pv-b", pinned("node-2"), 10))
    claims = {f"ns/m{k}": Claim(f"ns/m{k}", options=two) for k in range(3)}
    view = View(claims)
    gang = Gang("g", 2)
    placed, _, starts = cycle([job("m0", "ns/m0", gang=gang), job("m1", "ns/m1", gang=gang)], view)
    assert placed == {"m0": "node-1", "m1": "node-2"}
    assert {starts["m0"].volumes, starts["m1"].volumes} == {(("ns/m0", "pv-a"),), (("ns/m1", "pv-b"),)}
    # Three members, two volumes: none starts (the gang is placed whole or not at all).
    gang3 = Gang("g3", 3)
    placed, _, _ = cycle([job(f"m{k}", f"ns/m{k}", gang=gang3) for k in range(3)], view)
    assert placed == {}


def test_read_write_once_pod_claims_admit_one_job():
    view = View({"ns/r": Claim("ns/r", rwop=True), "ns/used": Claim("ns/used", rwop=True, refusal=(
        "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"))})
    placed, decisions, _ = cycle([job("a", "ns/r"), job("b", "ns/r", submitted=1), job("c", "ns/used")], view)
    assert placed == {"a": "node-1"}
    assert "ReadWriteOncePod" in decisions.reasons["c"]


def test_a_cluster_without_volumes_keeps_jobs_naming_claims_waiting():
    placed, decisions, _ = cycle([job("a", "ns/x")], None)
    assert placed == {}
    assert "cluster has no persistent volume claims" in decisions.reasons["a"]


def test_api_jobs_name_their_claims_and_only_simulated_clusters_refuse_them_with_the_path():
    from flotilla.service.jobspec import prepare
    from flotilla.service.settings import ClusterSpec
    from flotilla.service.store import SubmissionRejected
    from tests.support.service import job, job_file, settings

    spec = job("j")
    spec["namespace"] = "team-a"
    spec["podSpec"]["volumes"] = [{"name": "scratch", "emptyDir": {}},
                                  {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    kube = settings()
    kube = type(kube)(**{**{f: getattr(kube, f) for f in kube.__dataclass_fields__},
                         "clusters": (ClusterSpec("k", "kubernetes"),)})
    _, (new,) = prepare(job_file("A", "s", [spec]), kube)
    assert new.pods[0].claims == ["team-a/data"]
    simulated = type(kube)(**{**{f: getattr(kube, f) for f in kube.__dataclass_fields__},
                              "clusters": (ClusterSpec("s", "simulated"),)})
    with pytest.raises(SubmissionRejected) as refused:
        prepare(job_file("A", "s", [spec]), simulated)
    assert str(refused.value) == ("job 0 (clientId 'j'): podSpec.volumes[1].persistentVolumeClaim: the service's "
                                  "clusters are all simulated, and simulated clusters have no volumes: a job naming "
                                  "a claim could never run")


# -- the Kubernetes backend's view (flotilla.kubernetes.volumes), from API objects -------------------------------

def _state(pvs=(), pvcs=(), classes=()):
    from flotilla.kubernetes.volumes import VolumeState

    state = VolumeState("ns")
    state.replace("pvs", list(pvs))
    state.replace("pvcs", list(pvcs))
    state.replace("storageclasses", list(classes))
    return state


def test_the_view_resolves_claims_as_kube_schedulers_volume_binding_reads_them():
    state = _state(
        pvs=[_pv("small", "node-1", size="100Mi"), _pv("fits", "node-2", size="2Gi"), _pv("exact", "node-3"),
             _pv("other-class", "node-4", sc="fast"), _pv("rwx-only", "node-4", modes=("ReadWriteMany",)),
             _pv("taken", "node-4", claim_ref=("ns", "someone"), phase="Bound"),
             _pv("bound-pv", "node-4", labels={ZONE: "z1__z2"}, claim_ref=("ns", "bound"), phase="Bound"),
             _pv("labelled", "node-1", labels={"tier": "gold"})],
        pvcs=[_pvc("wffc"), _pvc("bound", volume="bound-pv", phase="Bound"), _pvc("lost", phase="Lost", volume="x"),
              _pvc("going", deleting=True), _pvc("now", sc="immediate"), _pvc("nosuch", sc="nope"),
              _pvc("picky", selector={"matchLabels": {"tier": "gold"}}),
              _pvc("dyn", sc="dynamic"), _pvc("chosen", sc="dynamic", annotations={
                  "volume.kubernetes.io/selected-node": "node-2"}),
              _pvc("orphan", volume="gone", phase="Bound"), _pvc("solo", modes=("ReadWriteOncePod",))],
        classes=[_sc("local"), _sc("immediate", mode="Immediate"), _sc("fast"),
                 _sc("dynamic", provisioner="example.com/csi", topology=["z1"])])
    view = state.view()
    claim = view.claim
    assert [(o.pv, o.size) for o in claim("wffc").options] == [("fits", 2 * 2**30), ("exact", 2**30),
                                                              ("labelled", 2**30)]
    assert claim("ns/wffc") == claim("wffc")
    bound = claim("bound")
    assert bound.options is None and bound.terms[0].matches({HOST: "node-4"})
    assert bound.zones == ((ZONE, frozenset({"z1", "z2"})),)
    assert claim("lost").refusal == 'persistentvolumeclaim "lost" bound to non-existent persistentvolume "x"'
    assert claim("going").refusal == 'persistentvolumeclaim "going" is being deleted'
    assert claim("now").refusal == "pod has unbound immediate PersistentVolumeClaims"
    assert claim("nosuch").refusal == 'storageclass.storage.k8s.io "nope" not found'
    assert claim("missing").refusal == 'persistentvolumeclaim "missing" not found'
    assert [o.pv for o in claim("picky").options] == ["labelled"]
    (dynamic,) = claim("dyn").options
    assert dynamic.pv == "" and dynamic.allows({ZONE: "z1"}) and not dynamic.allows({ZONE: "z2"})
    (chosen,) = claim("chosen").options
    assert chosen.allows({NAME_FIELD: "node-2"}) and not chosen.allows({NAME_FIELD: "node-1"})
    assert str(claim("orphan").refusal) == "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
    assert claim("orphan").refusal.code == "volumes"
    assert claim("solo").rwop and claim("solo").refusal == ""
    assert {HOST, ZONE, NAME_FIELD} <= view.label_keys


def test_read_write_once_pod_claims_in_use_and_assumed_choices_change_the_view():
    state = _state(pvs=[_pv("a", "node-1"), _pv("b", "node-2")], pvcs=[_pvc("one"), _pvc("two"),
                                                                      _pvc("solo", modes=("ReadWriteOncePod",))],
                   classes=[_sc("local")])
    user = {"metadata": {"namespace": "ns", "name": "p"},
            "spec": {"nodeName": "node-1", "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "solo"}}]}}
    state.on_pod(("ns", "p"), user, True)
    view = state.view()
    assert view.claim("solo").refusal == RWOP_CONFLICT
    state.on_pod(("ns", "p"), None, False)
    assert state.view().claim("solo").refusal == ""
    # A placement chose PV a for claim one: the next cycles see a taken and one pinned to it.
    state.assume((("ns/one", "a"),), "node-1")
    view = state.view()
    assert [o.pv for o in view.claim("two").options] == ["b"]
    assert [o.pv for o in view.claim("one").options] == ["a"]
    assert state.bind_requests((("ns/one", "a"),), "node-1") == [("/api/v1/persistentvolumes/a", {
        "metadata": {"annotations": {"pv.kubernetes.io/bound-by-controller": "yes"}, "resourceVersion": "7"},
        "spec": {"claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": "ns",
                              "name": "one", "uid": "uid-one", "resourceVersion": "3"}}})]
    assert state.bind_requests((("ns/two", ""),), "node-2") == [(
        "/api/v1/namespaces/ns/persistentvolumeclaims/two",
        {"metadata": {"annotations": {"volume.kubernetes.io/selected-node": "node-2"}}})]
    # The PV controller binds it: the assumption goes.
    state.on_event("pvcs", "MODIFIED", _pvc("one", volume="a", phase="Bound"))
    assert state.assumed_claims == {} and state.assumed_pvs == {} and state.unbound(("one", "ns/two")) == ["ns/two"]


def test_a_written_claim_ref_keeps_its_pv_taken_until_the_pv_informer_shows_it():
    """The claim's watch may show the binding before the PV's watch shows the claimRef written; a PV chosen again
    meanwhile would be written with the informer's old resourceVersion (409 Conflict) for another claim."""
    state = _state(pvs=[_pv("a", "node-1"), _pv("b", "node-2")], pvcs=[_pvc("one"), _pvc("two")],
                   classes=[_sc("local")])
    state.assume((("ns/one", "a"),), "node-1")
    state.wrote("a", "ns/one")
    state.on_event("pvcs", "MODIFIED", _pvc("one", volume="a", phase="Bound"))   # the PV's event not seen yet
    assert state.assumed_pvs == {} and state.written == {"a": "ns/one"}
    assert [o.pv for o in state.view().claim("two").options] == ["b"]
    state.on_event("pvs", "MODIFIED", _pv("a", "node-1", claim_ref=("ns", "one"), phase="Bound"))
    assert state.written == {}
    assert [o.pv for o in state.view().claim("two").options] == ["b"]


def test_a_start_given_up_after_its_write_leaves_the_claim_its_pv_and_writes_nothing_again():
    state = _state(pvs=[_pv("a", "node-1"), _pv("b", "node-2")], pvcs=[_pvc("one"), _pvc("two")],
                   classes=[_sc("local")])
    state.assume((("ns/one", "a"),), "node-1")
    state.wrote("a", "ns/one")
    state.forget((("ns/one", "a"),))   # its wait timed out before the PV's watch showed the claimRef
    view = state.view()
    assert [o.pv for o in view.claim("one").options] == ["a"]
    assert [o.pv for o in view.claim("two").options] == ["b"]
    assert state.bind_requests((("ns/one", "a"),), "node-1") == []
    state.on_event("pvs", "DELETED", _pv("a", "node-1"))
    assert state.written == {}


def test_a_pv_made_bound_to_a_claim_not_yet_written_bound_is_that_claims_only_option():
    """The PV controller writes the PV's phase Bound before the claim's volumeName: kube-scheduler's
    IsVolumeBoundToClaim takes such a PV (name, namespace, and uid when set) in any phase."""
    mine = _pv("a", "node-1", claim_ref=("ns", "one"), phase="Bound")
    mine["spec"]["claimRef"]["uid"] = "uid-one"
    other = _pv("c", "node-3", claim_ref=("ns", "two"), phase="Bound")
    other["spec"]["claimRef"]["uid"] = "uid-of-an-earlier-two"
    state = _state(pvs=[mine, _pv("b", "node-2"), other], pvcs=[_pvc("one"), _pvc("two")], classes=[_sc("local")])
    view = state.view()
    assert [o.pv for o in view.claim("one").options] == ["a"]
    assert state.bind_requests((("ns/one", "a"),), "node-1") == []
    assert [o.pv for o in view.claim("two").options] == ["b"]


def test_jobs_whose_claims_pin_their_node_are_placed_and_refused_as_a_pass_over_every_node_would():
    """Claims pinned to a node by a label (a bound local PV, a pre-bound one) are looked up by that label's value
    rather than tried on every node type; where none passes, the reason still counts every node."""
    from flotilla.core.volumes import VolumePicks

    def run():
        view = View({"ns/bound": Claim("ns/bound", terms=pinned("node-3")),
                     "ns/pre": Claim("ns/pre", options=(VolumeOption("pv-2", pinned("node-2"), 1),))})
        jobs = [job("a", "ns/bound"), job("b", "ns/pre", submitted=1.0),
                Job("big", "A", requests={"cpu": 9000}, claims=("ns/bound",), submitted=2.0),
                Job("sel", "A", requests={"cpu": 1000}, claims=("ns/pre",), node_selector={HOST: "node-1"},
                    submitted=3.0)]
        placed, decisions, _ = cycle(jobs, view)
        return placed, {k: str(v) for k, v in decisions.reasons.items()}

    looked = []
    candidate_types = VolumePicks.candidate_types
    VolumePicks.candidate_types = lambda self, *a: looked.append(a[0]) or candidate_types(self, *a)
    try:
        narrowed = run()
        VolumePicks.candidate_types = lambda self, *a: None   # every node type tried
        full = run()
    finally:
        VolumePicks.candidate_types = candidate_types
    assert ("ns/bound",) in looked and ("ns/pre",) in looked
    assert narrowed == full
    placed, reasons = narrowed
    assert placed == {"a": "node-3", "b": "node-2"}
    assert reasons == {"big": "0/4 nodes are available: 3 node(s) had volume node affinity conflict, 1 Insufficient cpu",
                       "sel": "0/4 nodes are available: 3 node(s) didn't match Pod's node affinity/selector, "
                              "1 node(s) didn't find available persistent volumes to bind"}


def test_the_views_label_keys_follow_each_change_as_reading_every_object_would():
    """The node label keys the volumes read are kept per object as events come, not read from every PV per view."""
    from flotilla.kubernetes.volumes import KubeVolumes
    from flotilla.core.volumes import ZONE_KEYS

    state = _state(pvs=[_pv("a", "node-1"), _pv("z", "node-2", labels={ZONE: "z1"})],
                   pvcs=[_pvc("one"), _pvc("dyn", sc="dynamic",
                                            annotations={"volume.kubernetes.io/selected-node": "node-2"})],
                   classes=[_sc("local"), _sc("dynamic", provisioner="example.com/csi", topology=["z1"])])

    def keys():
        view = state.view()
        scratch = KubeVolumes("ns", view.pvcs, view.pvs, view.classes, view.rwop_users, view.assumed_claims,
                              view.assumed_pvs).label_keys
        assert view.label_keys == scratch
        return view.label_keys

    assert keys() == {HOST, NAME_FIELD, *ZONE_KEYS}
    state.on_event("pvs", "DELETED", _pv("z", "node-2", labels={ZONE: "z1"}))
    assert keys() == {HOST, NAME_FIELD, ZONE}                      # the class's topology still reads the zone
    state.on_event("storageclasses", "DELETED", _sc("dynamic", provisioner="example.com/csi", topology=["z1"]))
    assert keys() == {HOST, NAME_FIELD}
    state.on_event("pvcs", "MODIFIED", _pvc("dyn", sc="dynamic", volume="made", phase="Bound",
                                            annotations={"volume.kubernetes.io/selected-node": "node-2"}))
    assert keys() == {HOST}
    state.on_event("pvs", "MODIFIED", _pv("a", "node-1", labels={ZONE: "z2"}))
    assert keys() == {HOST, *ZONE_KEYS}
    state.replace("pvs", [])
    assert keys() == frozenset()
