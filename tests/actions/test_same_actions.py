"""``schedule-once``, ``serve`` and ``simulate`` run the same action sequence for one config.

Each entry point's cycles are watched where they run (``Scheduler._run_cycle``) and the names of the actions
each cycle ran are compared: all three run the config's actions in its order, ``lease`` included; what the lease
hands the decisions to (its sink) is what differs: none for schedule-once, the store then the clusters for the
service, the simulated clusters for simulate.
"""

from __future__ import annotations

import textwrap

import pytest
from click.testing import CliRunner

from flotilla.config import parse_config
from flotilla.scheduler import Scheduler
from flotilla.scheduler_main import main
from flotilla.service.loop import ServiceLoop, service_backends
from flotilla.service.settings import from_config
from flotilla.service.store import Store
from flotilla.simulate import Simulation, load_workload

CONFIG = textwrap.dedent("""\
    actions: [{name: evict, args: {}}, allocate, preempt, lease]
    priorityClasses:
      - {name: armada-default, priority: 30000, preemptible: false}
      - {name: armada-preemptible, priority: 20000, preemptible: true}
    defaultPriorityClass: armada-preemptible
    queues: [{name: A, weight: 1}, {name: B, weight: 1}]
    clusters:
      - name: c1
        kind: simulated
        nodes: [{count: 1, namePrefix: node, resources: {cpu: 4, memory: 8Gi}}]
    """)
STATE = "jobs:\n  - {id: a-1, queue: A, requests: {cpu: 1}}\n"
WORKLOAD = "submissions:\n  - {at: 0s, queue: A, count: 1, requests: {cpu: 1}, duration: 1m}\n"


@pytest.fixture
def ran(monkeypatch):
    """The action names of every cycle run, in order."""
    cycles: list[list[str]] = []
    real = Scheduler._run_cycle

    def watched(self, snapshot, rng, sink, actions, *rest, **kw):
        cycles.append([action.name for action in (actions if actions is not None else self.actions)]
                      + [f"sink:{type(sink).__name__}"])
        return real(self, snapshot, rng, sink, actions, *rest, **kw)

    monkeypatch.setattr(Scheduler, "_run_cycle", watched)
    return cycles


@pytest.mark.parametrize("extra, deciding", [
    ("", ["evict", "allocate", "preempt"]),
    ("preempt: {enabled: false}\n", ["evict", "allocate"]),
], ids=["default", "preempt-off"])
def test_the_three_entry_points_run_one_action_sequence(tmp_path, ran, extra, deciding):
    text = CONFIG + extra
    (tmp_path / "flotilla.yaml").write_text(text)
    (tmp_path / "state.yaml").write_text(STATE)
    (tmp_path / "workload.yaml").write_text(WORKLOAD)

    result = CliRunner().invoke(main, ["schedule-once", "--config", str(tmp_path / "flotilla.yaml"),
                                       "--state", str(tmp_path / "state.yaml")])
    assert result.exit_code == 0, result.stderr
    once = ran[:]
    ran.clear()

    cfg = parse_config(text, "flotilla.yaml")
    settings = from_config(cfg)
    store = Store(f"sqlite:///{tmp_path}/loop.db")
    store.sync_queues(settings.queues)
    ServiceLoop(store, settings, Scheduler(cfg), dict(service_backends(cfg)), seed=0).run_cycle()
    store.close()
    served = ran[:]
    ran.clear()

    sim_cfg = parse_config(text, "flotilla.yaml")
    report = Simulation(sim_cfg, load_workload(tmp_path / "workload.yaml", sim_cfg)).run()
    simulated = ran[:]

    assert once == [deciding + ["lease", "sink:NoneType"]]
    assert served == [deciding + ["lease", "sink:StoreSink"]]
    assert report["queues"]["A"]["finished"] == 1
    assert simulated == [deciding + ["lease", "sink:BackendSink"]] * report["cycles"]
