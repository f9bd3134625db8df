"""Every hook and extension point is documented, registrable and exercised (datasette's rule)."""

from __future__ import annotations

import inspect

from flotilla.core import hookspecs
from flotilla.core.session import Session


def test_every_hook_has_the_prefix_and_a_contract():
    hooks = [name for name, obj in vars(hookspecs).items() if callable(obj) and name.startswith("flotilla_")]
    assert sorted(hooks) == ["flotilla_cluster_backend", "flotilla_session_close", "flotilla_session_open"]
    for name in hooks:
        doc = inspect.getdoc(getattr(hookspecs, name))
        assert doc and len(doc) > 60, name


def test_every_extension_point_names_its_register_method_and_combine_rule():
    names = [point.name for point in hookspecs.EXTENSION_POINTS]
    assert len(names) == len(set(names))
    for point in hookspecs.EXTENSION_POINTS:
        assert callable(getattr(Session, point.register)), point.register
        assert point.combine and point.contract and point.signature


def test_every_extension_point_is_called_in_a_cycle(tmp_path):
    """A plugin that registers every point sees each one called on the seed's two-queue example."""
    from pathlib import Path

    from flotilla.config import load_config, load_state
    from flotilla.core.cycle import Scheduler
    from flotilla.core.plugins import new_plugin_manager

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
            session.add_gang_ready(mark("gang_ready", None))
            session.add_preemptable(mark("preemptable", True))
            session.add_victim_order(mark("victim_order", ()))
            session.add_job_valid(mark("job_valid", None))
            session.add_event_handler(on_allocate=mark("on_allocate", None), on_evict=mark("on_evict", None))
            base = session.queue_cost_fns[0]
            session.queue_cost_fns[0] = lambda queue, extra: (called.add("queue_cost"), base(queue, extra))[1]

        @hookspecs.hookimpl
        def flotilla_session_close(self, session, decisions):
            called.add("session_close")

    examples = Path(__file__).resolve().parent.parent / "examples"
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
    expected = {point.name for point in hookspecs.EXTENSION_POINTS} | {"session_close"}
    assert called == expected
