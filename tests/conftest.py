"""Fixtures shared across test modules; the layout rule is tests/README.md's.

Test modules sit in one folder per layer (tests/core, tests/service, tests/kwok, ...) and import helpers only
from tests/support, never from another test module (tests/core/test_test_layout.py checks both). A fixture that modules of more than one
file use is imported here, once, from the tests/support module that defines it.

The fake clusters are session-scoped, so they must be defined once: a
fixture imported into two test modules is two fixtures, and each would
start its own clusters under the same names.
"""

from tests.support.actions import installed_action  # noqa: F401 - fixtures
from tests.support.incluster import harness  # noqa: F401 - fixtures
from tests.support.kwok import kwok, kwok_clusters  # noqa: F401 - fixtures
from tests.support.realnode import real_node, real_node_cluster  # noqa: F401 - fixtures
