"""Every hook and extension point is documented, registrable and exercised (datasette's rule)."""

from __future__ import annotations

import inspect

import pytest

from flotilla.core import hookspecs
from flotilla.core.extensions import EXTENSION_POINTS
from flotilla.core.session import Session


def test_every_hook_has_the_prefix_and_a_contract():
    hooks = [name for name, obj in vars(hookspecs).items() if callable(obj) and name.startswith("flotilla_")]
    assert sorted(hooks) == ["flotilla_cluster_backend", "flotilla_session_close", "flotilla_session_open"]
    for name in hooks:
        doc = inspect.getdoc(getattr(hookspecs, name))
        assert doc and len(doc) > 60, name


def test_every_extension_point_names_its_register_method_and_combine_rule():
    names = [point.name for point in EXTENSION_POINTS]
    assert len(names) == len(set(names))
    for point in EXTENSION_POINTS:
        assert callable(getattr(Session, point.register)), point.register
        assert point.combine and point.contract and point.signature


def test_the_session_registers_each_point_with_its_declared_type():
    # The registration methods take their parameter types from flotilla.core.extensions (annotations as written).
    for point in EXTENSION_POINTS:
        annotations = getattr(Session, point.register).__annotations__
        declared = {name: kind for name, kind in annotations.items() if name != "return"}
        assert point.protocol.__name__ in {kind.removesuffix(" | None") for kind in declared.values()}, point.name


def test_every_extension_point_is_called_in_a_cycle(tmp_path):
    """A plugin that registers every point sees each one called on the seed's two-queue example."""
    from pathlib import Path

    from flotilla.config import load_config, load_state
    from flotilla.scheduler import Scheduler

    called: set[str] = set()

    class Everything:
        @hookspecs.hookimpl(trylast=True)
        def flotilla_session_open(self, session):
            def mark(name, answer):
                def fn(*args):
                    called.add(name)
                    return answer
                return fn
            session.add_job_order(mark("job_order", ()))
            session.add_predicate(mark("predicate", None))
            session.add_queue_admit(mark("queue_admit", None))
            session.set_node_tiers(mark("node_tiers", ("own", "unused", "used")))
            session.add_node_score(mark("node_score", 0.0))
            session.add_node_filter(mark("node_filter", True))
            session.add_gang_ready(mark("gang_ready", None))
            session.add_preemptable(mark("preemptable", True))
            session.add_victim_order(mark("victim_order", ()))
            session.add_reclaimable(mark("reclaimable", True))
            session.add_reclaim_order(mark("reclaim_order", ()))
            session.add_preempt_queue_order(mark("preempt_queue_order", 0.0))
            session.add_job_valid(mark("job_valid", None))
            session.add_event_handler(on_allocate=mark("on_allocate", None), on_evict=mark("on_evict", None))
            base = session.queue_order_fns[0]
            session.queue_order_fns[0] = lambda queue, extra: (called.add("queue_order"), base(queue, extra))[1]

        @hookspecs.hookimpl
        def flotilla_session_close(self, session, decisions):
            called.add("session_close")

    examples = Path(__file__).resolve().parents[2] / "examples"
    state = examples / "two-queues.yaml"
    gang_and_urgent = tmp_path / "extra.yaml"
    gang_and_urgent.write_text(state.read_text() + (
        "  - {id: g-1, queue: B, requests: {cpu: 1}, submitted: 500, gang: {id: g, cardinality: 2}}\n"
        "  - {id: g-2, queue: B, requests: {cpu: 1}, submitted: 500, gang: {id: g, cardinality: 2}}\n"
        "  - {id: u-1, queue: B, priorityClass: armada-default, requests: {cpu: 1}, submitted: 0}\n"))
    cfg = load_config(None)
    scheduler = Scheduler(cfg)
    scheduler.pm.register(Everything(), name="everything")
    scheduler.run_cycle(load_state(gang_and_urgent, cfg))
    expected = {point.name for point in EXTENSION_POINTS} | {"session_close"}
    assert called == expected


BACKEND_CONFIG = """
queues: [{name: A, weight: 1}]
clusters:
  - name: west
    kind: simulated
    nodes: [{count: 2, resources: {cpu: 4, memory: 16Gi}}]
  - name: east
    kind: kubernetes
    kubeconfig: /nonexistent/kubeconfig
    context: east
"""


class StandIn:
    """A third-party backend plugin: serves ``kind: kubernetes`` clusters from memory (one 8-core node each)."""

    def __init__(self):
        self.asked: list[str] = []

    @hookspecs.hookimpl
    def flotilla_cluster_backend(self, cluster_config, options):
        from flotilla.core.backend import SimulatedCluster
        from flotilla.core.model import Node

        self.asked.append(cluster_config.name)
        if cluster_config.kind != "kubernetes":
            return None
        return SimulatedCluster(cluster_config.name, [Node("big-1", cluster_config.name, {"cpu": 8000})],
                                clock=options["clock"])


def test_cluster_backend_hook_builds_the_simulated_clusters_with_the_callers_options():
    from flotilla.config.loader import parse_config
    from flotilla.core.backend import SimulatedCluster
    from flotilla.plugin_manager import make_backends

    cfg = parse_config(BACKEND_CONFIG, "backends.yaml")
    backends = make_backends(cfg, kinds=("simulated",), clock=lambda: 42.0)
    assert list(backends) == ["west"]
    west = backends["west"]
    assert isinstance(west, SimulatedCluster)
    assert sorted(west.nodes) == ["node-1", "node-2"]
    assert west.nodes["node-1"].resources == {"cpu": 4000, "memory": 16 * 2**30}
    assert west.clock() == 42.0


def test_a_config_plugin_answers_the_cluster_backend_hook_before_the_built_in_backends():
    """The scheduler's plugins are asked first: a package serves ``kind: kubernetes`` its own way."""
    from flotilla.config.loader import parse_config
    from flotilla.core.backend import SimulatedCluster
    from flotilla.plugin_manager import make_backends
    from flotilla.scheduler import Scheduler
    from flotilla.core.model import Job, Snapshot

    cfg = parse_config(BACKEND_CONFIG, "backends.yaml")
    scheduler = Scheduler(cfg)
    stand_in = StandIn()
    scheduler.pm.register(stand_in, name="stand-in")
    backends = make_backends(cfg, scheduler.pm, clock=lambda: 7.0)
    assert stand_in.asked == ["west", "east"]  # asked for both, answered for east only
    assert type(backends["west"]) is SimulatedCluster and sorted(backends["west"].nodes) == ["node-1", "node-2"]
    assert sorted(backends["east"].nodes) == ["big-1"]

    # The stand-in is a real backend: a cycle through it places the 6-core job on its node.
    jobs = [Job("j-1", "A", priority_class="armada-default", requests={"cpu": 6000}, submitted=1.0)]
    snapshot = Snapshot([b.snapshot() for b in backends.values()], jobs, scheduler.queues(),
                        scheduler.priority_classes(), cfg.default_priority_class, now=7.0)
    decisions = scheduler.run_cycle(snapshot, backends=backends)
    assert [(p.job.id, p.cluster, p.node) for p in decisions.scheduled] == [("j-1", "east", "big-1")]
    assert [job.id for job in backends["east"].running_jobs()] == ["j-1"]


def test_a_cluster_nobody_serves_is_an_error_naming_it():
    from types import SimpleNamespace

    from flotilla.plugin_manager import make_backends

    config = SimpleNamespace(clusters=[SimpleNamespace(name="far", kind="slurm")])
    with pytest.raises(ValueError, match="cluster 'far': no plugin provides a backend of kind 'slurm'"):
        make_backends(config)
