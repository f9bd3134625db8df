"""``flotilla simulate`` run in-process on a written config and state, for the simulation tests."""

import textwrap
from pathlib import Path
from flotilla.config import load_config
from flotilla.simulate import Simulation, check_invariants, load_workload


def config_yaml(queues: str = "[{name: A, weight: 1}, {name: B, weight: 1}]", fairness: str = "- name: assetfairness",
                nodes: str = "- {count: 2, namePrefix: node, resources: {cpu: 32, memory: 128Gi}}",
                extra: str = "") -> str:
    return textwrap.dedent("""\
        actions: [evict, allocate, preempt, lease]
        plugins:
          {fairness}
          - name: bestfit
          - name: gang
          - name: priorityclass
          - name: predicates
        priorityClasses:
          - {{name: armada-default, priority: 30000, preemptible: false}}
          - {{name: armada-preemptible, priority: 20000, preemptible: true}}
        defaultPriorityClass: armada-default
        queues: {queues}
        cycle: {{period: 1s}}
        clusters:
          - name: sim
            kind: simulated
            nodes:
              {nodes}
        """).format(fairness=fairness, queues=queues, nodes=nodes) + textwrap.dedent(extra)


def setup(tmp_path: Path, config_text: str | None, workload_text: str):
    config = None
    if config_text is not None:
        (tmp_path / "flotilla.yaml").write_text(config_text)
        config = load_config(tmp_path / "flotilla.yaml")
    else:
        config = load_config(None)
    (tmp_path / "workload.yaml").write_text(textwrap.dedent(workload_text))
    return config, load_workload(tmp_path / "workload.yaml", config)


class Watch:
    """Checks the invariants after every cycle and keeps what the tests look at."""

    def __init__(self):
        self.cycles = []     # (time, decisions, {queue: share}, {queue: jobs queued after the cycle})

    def __call__(self, sim, info):
        check_invariants(sim, info)
        stats = sim.recorder.queues
        shares = {name: s.cost / sim.recorder.pool_cost for name, s in stats.items()}
        waiting = {name: s.queued for name, s in stats.items()}
        self.cycles.append((info.time, info.decisions, shares, waiting))


def simulate(config, workload, seed: int = 0, **kwargs):
    watch = Watch()
    sim = Simulation(config, workload, seed=seed, on_cycle=watch, **kwargs)
    return sim, sim.run(), watch
