"""``jobcap``: at most ``maxRunning`` jobs running per queue (a worked third-party plugin).

It registers on one extension point, ``queue_admit`` (all plugins must
agree; the first refusal's reason is what users see), and keeps its own
count of each queue's running jobs up to date through ``on_allocate`` and
``on_evict``, so the check in allocate's inner loop is one dict lookup.

    plugins:
      - name: jobcap
        args: {maxRunning: 10, perQueue: {research: 50}}
"""

from __future__ import annotations

from typing import Mapping

from flotilla.plugin import PluginSession, hookimpl, take_args


class JobCap:
    def __init__(self, args: Mapping | None = None):
        args = take_args(args, maxRunning=None, perQueue={})   # an unknown key is a config error
        self.default = args["maxRunning"]
        if not isinstance(args["perQueue"], Mapping):
            raise ValueError(f"perQueue must map queue names to whole numbers, got {args['perQueue']!r}")
        self.per_queue = dict(args["perQueue"])
        for name, cap in [("maxRunning", self.default), *((f"perQueue.{q}", c) for q, c in self.per_queue.items())]:
            if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 0):
                raise ValueError(f"{name} must be a whole number, got {cap!r}")

    @hookimpl
    def flotilla_session_open(self, session: PluginSession):
        running: dict[str, int] = {}
        for held in session.running.values():
            running[held.job.queue] = running.get(held.job.queue, 0) + 1

        def cap_reached(queue, job, vec):
            cap = self.per_queue.get(queue.name, self.default)
            if cap is not None and running.get(queue.name, 0) >= cap:
                return f"queue {queue.name} runs its {cap} jobs (jobcap)"
            return None

        def allocated(job, node):
            running[job.queue] = running.get(job.queue, 0) + 1

        def evicted(job, node):
            running[job.queue] -= 1

        session.add_queue_admit(cap_reached)
        session.add_event_handler(on_allocate=allocated, on_evict=evicted)
