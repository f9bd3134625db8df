"""The placement primitive (flotilla.core.placement): every rule, in one order, for every action.

The core refuses a placement that breaks a rule whoever asks (a step name
and a reason), and the reserve action, which fits units on nodes as they
would be once emptied, chooses only nodes the primitive lets the unit use.
"""

from __future__ import annotations

from flotilla.actions.reserve import Reserve
from flotilla.config import load_config
from flotilla.core.model import ClusterSnapshot, Gang, Job, JobState, Node, Queue, Snapshot, Taint
from flotilla.core.placement import Refused
from flotilla.scheduler import Scheduler

PORT = (("TCP", 8080, "0.0.0.0"),)


def open_session(nodes, running=(), queued=(), queues=("A", "B"), limits=None, foreign_ports=None, after=None):
    cfg = load_config(None)
    scheduler = Scheduler(cfg)
    if after is not None:
        scheduler.settings.reservation_after = after
    snapshot = Snapshot([ClusterSnapshot("c1", list(nodes), list(running), foreign_ports=dict(foreign_ports or {}))],
                        list(queued), [Queue(name, limits=(limits or {}).get(name, {})) for name in queues],
                        scheduler.priority_classes(), cfg.default_priority_class, now=3600)
    return scheduler.open_session(snapshot)


def node(name, cpu=4, **kw):
    return Node(name, "c1", {"cpu": cpu * 1000}, **kw)


def job(job_id, queue="A", cpu=1, **kw):
    return Job(job_id, queue, requests={"cpu": cpu * 1000}, **kw)


def running(job_id, node_name, queue="A", cpu=1, **kw):
    return job(job_id, queue, cpu, state=JobState.RUNNING, cluster="c1", node=node_name, **kw)


# -- the primitive, asked directly ---------------------------------------------------------------------------
def test_each_rule_refuses_with_its_step_and_reason():
    tainted = node("tainted", taints=(Taint("gpu", "yes"),))
    labelled = node("plain")
    held = node("held")
    small = node("small", cpu=1)
    jobs = [job("t-1"), job("s-1", node_selector={"disk": "ssd"}), job("l-1", "B", cpu=2), job("p-1", host_ports=PORT),
            job("f-1", cpu=2)]
    session = open_session([tainted, labelled, held, small], running=[running("r-1", "held", host_ports=PORT)],
                           queued=jobs, limits={"B": {"cpu": 0.1}})
    position = session.index.position
    at = {name: position[("c1", name)] for name in ("tainted", "plain", "held", "small")}
    outcomes = {
        "taint": session.place(jobs[0], at["tainted"]),
        "selector": session.place(jobs[1], at["plain"]),
        "limit": session.place(jobs[2], at["plain"]),
        "port": session.place(jobs[3], at["held"]),
        "fit": session.place(jobs[4], at["small"]),
    }
    assert {what: (r.stage, r.reason) for what, r in outcomes.items()} == {
        "taint": ("nodes", "node tainted: node(s) had untolerated taint {gpu: yes}"),
        "selector": ("nodes", "0/4 nodes are available: 3 node(s) didn't match Pod's node affinity/selector, "
                              "1 node(s) had untolerated taint {gpu: yes}"),
        "limit": ("queue", "queue B at its cpu limit 0.1"),
        "port": ("node", "node held: node(s) didn't have free ports for the requested pod ports"),
        "fit": ("fit", "node small: Insufficient cpu"),
    }
    assert all(isinstance(r, Refused) for r in outcomes.values())
    assert session.scheduled == [] and session.index.jobs[at["plain"]] == {}
    # And each goes where the rules allow it.
    assert session.place(jobs[0], at["plain"]) is None
    assert session.place(jobs[3], at["small"]) is None
    assert [(p.job.id, p.node) for p in session.scheduled] == [("t-1", "plain"), ("p-1", "small")]
    again = session.place(jobs[0], at["held"])
    assert (again.stage, again.reason) == ("job", "t-1 is already placed")


def test_a_statement_places_through_the_primitive_and_a_gang_member_goes_with_its_gang():
    gang = Gang("g", 2)
    members = [job("g-1", gang=gang), job("g-2", gang=gang)]
    session = open_session([node("n1"), node("n2", taints=(Taint("gpu", "yes"),))], queued=[*members, job("a-1")])
    stmt = session.statement()
    alone = stmt.allocate(members[0], 0)
    assert (alone.stage, alone.reason) == ("gang", "gang g: its members are placed together")
    assert session.clear_gang(members) is None
    assert [session.clear_member(m) for m in members] == [[0], [0]]
    tainted = stmt.allocate(members[0], 1)
    assert tainted.stage == "nodes"
    assert stmt.allocate(members[0], 0) is None and stmt.allocate(members[1], 0) is None
    stmt.commit()
    assert sorted(p.job.id for p in session.scheduled) == ["g-1", "g-2"]


# -- reserve: only nodes the unit may use ------------------------------------------------------------------
def reserve_once(session):
    Reserve().execute(session)
    return {job_id: str(session.failures[job_id]) for job_id in session.set_aside}   # the words of each reason


def test_reserve_never_reserves_a_node_whose_host_port_is_held():
    """node-1 runs the least (1 cpu) but its job holds the unit's host port: the unit reserves node-2."""
    session = open_session([node("node-1"), node("node-2")],
                           running=[running("r-1", "node-1", host_ports=PORT), running("r-2", "node-2", cpu=2)],
                           queued=[job("u-1", "B", cpu=4, host_ports=PORT)], after=600)
    assert reserve_once(session) == {"u-1": "waiting for 1 reserved node (node-2)"}


def test_reserve_never_reserves_a_node_whose_port_another_scheduler_holds():
    session = open_session([node("node-1"), node("node-2")], running=[running("r-2", "node-2", cpu=2)],
                           queued=[job("u-1", "B", cpu=4, host_ports=PORT)], foreign_ports={"node-1": PORT},
                           after=600)
    assert reserve_once(session) == {"u-1": "waiting for 1 reserved node (node-2)"}


def test_reserve_never_reserves_a_node_a_node_filter_refuses():
    session = open_session([node("node-1"), node("node-2")],
                           running=[running("r-1", "node-1"), running("r-2", "node-2", cpu=2)],
                           queued=[job("u-1", "B", cpu=4)], after=600)
    session.add_node_filter(lambda j, i: session.index.nodes[i].name != "node-1")
    assert reserve_once(session) == {"u-1": "waiting for 1 reserved node (node-2)"}


def test_reserve_never_reserves_a_node_the_unit_may_not_use():
    """A taint the unit does not tolerate keeps node-1 out, however empty it is."""
    session = open_session([node("node-1", taints=(Taint("gpu", "yes"),)), node("node-2")],
                           running=[running("r-2", "node-2", cpu=2)], queued=[job("u-1", "B", cpu=4)], after=600)
    assert reserve_once(session) == {"u-1": "waiting for 1 reserved node (node-2)"}


def test_a_gang_whose_members_bind_one_host_port_reserves_a_node_per_member():
    """Both members fit node-1's room once emptied, but they bind one host port: one node each."""
    gang = Gang("g", 2)
    members = [job(f"g-{k}", "B", cpu=2, gang=gang, host_ports=PORT) for k in (1, 2)]
    session = open_session([node("node-1"), node("node-2"), node("node-3")],
                           running=[running("r-1", "node-1", cpu=3), running("r-2", "node-2", cpu=3),
                                    running("r-3", "node-3", cpu=4)],
                           queued=members, after=600)
    assert reserve_once(session) == {"g-1": "waiting for 2 reserved nodes (node-1, node-2)",
                                     "g-2": "waiting for 2 reserved nodes (node-1, node-2)"}


def test_a_reserved_node_is_taken_over_backfill_and_the_port_holder_goes():
    """The unit's reserved node runs backfill: the holder of its host port is preempted with the room it needs."""
    session = open_session([node("node-1")],
                           running=[running("b-1", "node-1", priority_class="armada-preemptible", host_ports=PORT),
                                    running("b-2", "node-1", cpu=2, priority_class="armada-preemptible")],
                           queued=[job("u-1", "B", cpu=2, host_ports=PORT)], after=600)
    action = Reserve()
    action.reservations = {"u-1": [("c1", "node-1")]}
    action.execute(session)
    assert [(p.job.id, p.node) for p in session.scheduled] == [("u-1", "node-1")]
    assert sorted(session.preempted) == ["b-1"]


def test_a_gang_cleared_in_part_is_refused():
    gang = Gang("g", 3)
    members = [job(f"g-{k}", gang=gang) for k in (1, 2, 3)]
    session = open_session([node("n1")], queued=members)
    refused = session.clear_gang(members[:2])
    assert (refused.stage, refused.reason) == ("gang", "gang g: its members are placed together (3 to place, 2 given)")
    assert session.clear_member(members[0]).stage == "gang"
    assert session.clear_gang([members[0], job("a-1")]).reason == "the jobs given are not one gang's members"
    assert session.clear_gang(members) is None
