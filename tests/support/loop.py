"""The scheduling loop in-process on a fake clock, run until a condition holds."""

from flotilla.scheduler import Scheduler
from flotilla.service.loop import ServiceLoop, service_backends
from flotilla.service.settings import from_config
from flotilla.service.store import Store


class Clock:
    def __init__(self, now: float = 1_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def make(tmp_path, cfg, enforces_deadlines: bool = False):
    settings = from_config(cfg)
    clock = Clock()
    store = Store(f"sqlite:///{tmp_path}/loop.db")
    store.sync_queues(settings.queues)
    backends = dict(service_backends(cfg, clock=clock))
    for backend in backends.values():
        # The capability is read when the loop is made (flotilla.core.capabilities): declared before.
        backend.enforces_deadlines = enforces_deadlines
    loop = ServiceLoop(store, settings, Scheduler(cfg), backends, clock=clock, seed=0)
    return settings, store, loop, clock


def assert_copies_current(loop, store):
    """The loop's in-memory queue and active jobs agree with the store (up to what has an event pending)."""
    loop.queued.sync()
    assert {i: record for i, (record, _) in loop.queued.jobs.items()} == {q.id: q for q in store.load_queued()}
    pending = {e["jobId"] for e in store.all_events(after=loop.active.cursor)}
    fresh = store.load_active()
    assert {i: j for i, j in loop.active.jobs.items() if i not in pending} == \
        {i: j for i, j in fresh.items() if i not in pending}


def run_until(loop, clock, done, step=1.0, cycles=500):
    for _ in range(cycles):
        loop.run_cycle()
        assert_copies_current(loop, loop.store)
        if done():
            return
        clock.now += step
    raise AssertionError("did not finish")
