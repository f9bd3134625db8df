"""``nominalquota``: what a queue holds within its nominal quota is never reclaimed (a worked policy plugin).

Kueue's nominal quota, on Flotilla's preemption points: each queue may be
given a quota per resource; preemption to fair share (the ``evict``
action) may take a queue's jobs only while the queue keeps at least its
quota of every resource quoted. A queue within its quota keeps every job;
a queue above it may lose what it holds beyond, down to the quota and no
further. It registers one extension point, ``reclaimable`` (all plugins
must agree, after the core's own floor, ``protectedFractionOfFairShare``),
which is asked once per victim at risk with what its queue would hold
without it.

    plugins:
      - name: nominalquota
        args: {quotas: {research: {cpu: 20}, batch: {cpu: 4, nvidia.com/gpu: 1}}}

cpu is in cores, other resources in their base units (bytes, devices).
A queue may be kept above its fair share this way; pair it with
``evict: {protectedFractionOfFairShare: 0}`` for the quotas alone to
protect, or keep the core's floor too (both then must agree).
"""

from __future__ import annotations

import math
from typing import Mapping

from flotilla.plugin import PluginSession, hookimpl, take_args


class NominalQuota:
    def __init__(self, args: Mapping | None = None):
        quotas = take_args(args, quotas={})["quotas"]   # an unknown key is a config error
        if not isinstance(quotas, Mapping):
            raise ValueError(f"quotas must map queue names to resource amounts, got {quotas!r}")
        self.quotas: dict[str, dict[str, float]] = {}
        for queue, amounts in quotas.items():
            if not isinstance(amounts, Mapping):
                raise ValueError(f"quotas.{queue} must map resource names to amounts, got {amounts!r}")
            for name, amount in amounts.items():
                if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not 0 <= amount < math.inf:
                    raise ValueError(f"quotas.{queue}.{name} must be a finite, non-negative number, got {amount!r}")
            self.quotas[str(queue)] = {str(name): float(amount) for name, amount in amounts.items()}

    @hookimpl
    def flotilla_session_open(self, session: PluginSession):
        position = session.space.position
        # Per queue, (vector position, quota in the vector's units) for each quoted resource the session knows.
        floors = {queue: [(position[name], amount * 1000 if name == "cpu" else amount)
                          for name, amount in amounts.items() if name in position]
                  for queue, amounts in self.quotas.items()}

        def within_quota_kept(queue, victim, left):
            return all(left[r] >= amount for r, amount in floors.get(queue.name, ()))

        session.add_reclaimable(within_quota_kept)
