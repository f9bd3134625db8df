"""Every command block of deploy/README.md is run by a real-node test: the sections that hold ``sh`` blocks are
exactly the three that tests/support/readme.py names, which tests/realnode/test_realnode_readme.py and
test_realnode_helm_ha.py run verbatim. A new section with commands and no test fails here."""

from __future__ import annotations

import re

from tests.support.readme import HA_BUNDLED, PLAIN, README, WALK


def test_only_the_sections_the_real_node_tests_run_hold_command_blocks():
    text = README.read_text()
    sections = re.split(r"^(?=## )", text, flags=re.M)
    with_commands = [section.splitlines()[0] for section in sections if re.search(r"^```(sh|bash|console)$", section,
                                                                                  flags=re.M)]
    assert with_commands == [WALK, HA_BUNDLED, PLAIN]
