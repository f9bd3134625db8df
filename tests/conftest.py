"""Fixtures shared across test modules.

The fake clusters are session-scoped, so they must be defined once: a
fixture imported into two test modules is two fixtures, and each would
start its own clusters under the same names.
"""

from kwok_fixtures import kwok, kwok_clusters  # noqa: F401 - fixtures
from realnode_fixtures import real_node, real_node_cluster  # noqa: F401 - fixtures
