"""``gang``: all or nothing (``armadaproject.io/gangId`` / ``gangCardinality``).

A gang is placed only when all of its ``cardinality`` members are queued
together (or evicted together), all at once, on one cluster. An elastic gang
(annotation ``flotilla.io/gang-min-available``) needs all its members known;
its minimum is placed all at once on one cluster, the rest one by one on that
cluster as room appears (allocate). A gang that
cannot be placed is passed over like any job that does not fit, so it never
blocks a smaller job behind it. A topology gang (annotation
``armadaproject.io/gangNodeUniformityLabel``) is placed within one domain of
that node label by the actions (:mod:`flotilla.core.topology`); this plugin
only says when a gang is complete.
"""

from __future__ import annotations

from typing import Mapping

from flotilla.core.reasons import make
from flotilla.plugin import hookimpl, take_args


class Gang:
    def __init__(self, args: Mapping | None = None):
        take_args(args)

    @hookimpl
    def flotilla_session_open(self, session):
        def complete(gang, members):
            if gang.min_available:
                known = len(session.gangs[gang.id])
                if known != gang.cardinality:
                    return make("gang_queued", gang.id, known, gang.cardinality)
                return None
            if len(members) != gang.cardinality:
                return make("gang_queued", gang.id, len(members), gang.cardinality)
            return None

        session.add_gang_ready(complete)
