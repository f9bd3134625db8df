"""``flotilla simulate``: the real scheduler on a simulated clock.

* :mod:`~flotilla.simulate.workload`: the workload file (pydantic), checked against the config;
* :mod:`~flotilla.simulate.engine`: the clock and the cycle loop over simulated clusters;
* :mod:`~flotilla.simulate.report`: the figures (JSON report, terminal table), shared with wall-clock players;
* :mod:`~flotilla.simulate.plot`: the PNG; :mod:`~flotilla.simulate.policies`: ``--compare``;
* :mod:`~flotilla.simulate.cli`: the command.

Internal: not part of the plugin API (:mod:`flotilla.plugin`, :mod:`flotilla.testing`); may change in any release.
"""

from flotilla.simulate.engine import CycleInfo, NoProgress, SchedulerBug, Simulation, SimulationError, check_invariants
from flotilla.simulate.report import Recorder
from flotilla.simulate.workload import Workload, load_workload, parse_workload

__all__ = ["CycleInfo", "NoProgress", "Recorder", "SchedulerBug", "Simulation", "SimulationError",
           "Workload", "check_invariants", "load_workload", "parse_workload"]
