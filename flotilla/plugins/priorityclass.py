"""``priorityclass``: priority classes decide who may displace whom.

A running job may be displaced for another only when its class is
preemptible and of lower priority than the other's class, and the other's
class preempts (Kubernetes and Armada semantics; preemption is opt-in; a
class of ``preemptionPolicy: Never`` never displaces anyone). Jobs naming an unknown class are
refused. The allocatable-at-priority bookkeeping itself lives in the node
index, which binds every job at its class's priority.
"""

from __future__ import annotations

from typing import Mapping

from flotilla.core.reasons import make
from flotilla.plugin import hookimpl, take_args


class PriorityClassPlugin:
    def __init__(self, args: Mapping | None = None):
        take_args(args)

    @hookimpl
    def flotilla_session_open(self, session):
        classes = session.priority_classes
        default = session.default_priority_class

        def known(job):
            name = job.priority_class or default
            return None if name in classes else make("unknown_priority_class", name)

        def may_displace(preemptor, victim):
            mine = classes[preemptor.priority_class or default]
            theirs = classes[victim.priority_class or default]
            return mine.preempts and theirs.preemptible and theirs.priority < mine.priority

        # Its answer depends on the priority class alone: allocate need not ask again for a job whose
        # requirements (the class among them) already passed it this cycle.
        known.by_priority_class = True
        session.add_job_valid(known)
        session.add_preemptable(may_displace)
