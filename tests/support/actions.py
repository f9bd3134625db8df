"""Third-party action fixtures and priority-class configs shared by the action and preemption tests."""

import sys
import pytest
from tests.support.scenario import config, install_distribution


THREE_CLASSES = """
priorityClasses:
  - {name: armada-default, priority: 30000, preemptible: false}
  - {name: armada-high, priority: 25000, preemptible: true}
  - {name: armada-preemptible, priority: 20000, preemptible: true}
defaultPriorityClass: armada-default
"""


def with_classes(extra: str = "") -> str:
    return config(extra=extra).replace(
        "priorityClasses:\n  - {name: armada-default, priority: 30000, preemptible: false}\n"
        "  - {name: armada-preemptible, priority: 20000, preemptible: true}\ndefaultPriorityClass: armada-default\n",
        THREE_CLASSES)


ACTION_MODULE = '''
"""A third-party action: places every queued job of queue B on the first node, whatever fairness says."""


class FirstNode:
    name = "firstnode"

    def execute(self, session):
        stmt = session.statement()
        for job in session.queues["B"].queued:
            stmt.allocate(job, 0)
        stmt.commit()
'''


@pytest.fixture
def installed_action(tmp_path, monkeypatch):
    """A real distribution on sys.path whose entry point registers the action ``firstnode``."""
    install_distribution(tmp_path / "site", "firstnode_action", ACTION_MODULE, "flotilla.actions",
                         "firstnode = firstnode_action:FirstNode")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    yield
    sys.modules.pop("firstnode_action", None)


ACTION_STATE = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 4}}
      - {name: node-2, resources: {cpu: 4}}
jobs:
  - {id: a-1, queue: A, requests: {cpu: 1}, submitted: 1}
  - {id: b-1, queue: B, requests: {cpu: 1}, submitted: 2}
  - {id: b-2, queue: B, requests: {cpu: 1}, submitted: 3}
"""


LOW = with_classes("evict: {probability: 0}").replace(
    "  - {name: armada-preemptible, priority: 20000, preemptible: true}\n",
    "  - {name: armada-preemptible, priority: 20000, preemptible: true}\n"
    "  - {name: armada-low, priority: 10000, preemptible: true}\n")
