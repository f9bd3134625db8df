"""Leader election through the store, with fencing.

Why the store and not a Kubernetes Lease: the lead matters only for the
writes a scheduler makes to the store, and a fence is only as good as the
place that checks it. Here the check runs inside each write transaction,
under the store's write lock (:meth:`Store.write <flotilla.service.store.Store.write>`),
so a scheduler that lost the lead - paused by SIGSTOP, a long GC, a
partition - cannot write a single lease after a successor took over, or
after its own lease ran out. A Kubernetes Lease could say who leads, but
not stop a deposed leader's database writes; it would also make the
scheduler depend on one cluster's API server, which is what Flotilla
schedules around.

The row ``scheduler_leader`` holds ``(holder, term, expires)``. A candidate
takes the lead when the row is missing or has expired, bumping ``term``;
the leader renews ``expires`` every ``renewPeriod``. Times come from the
database's clock (PostgreSQL's ``clock_timestamp()``), so replicas whose
clocks differ still agree on when a lease expires.
"""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass
from typing import Callable

import sqlalchemy as sa
import structlog

from flotilla.service.roles.periodic import Periodic
from flotilla.service.schema import scheduler_leader
from flotilla.service.store import Fenced, Store

log = structlog.get_logger("flotilla.service.election")


def default_identity() -> str:
    """``host-pid-random``: unique per process, readable in logs and the leader metric."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


@dataclass(frozen=True, slots=True)
class Fence:
    """A leader's claim: every write it makes checks that the claim still holds."""

    store: Store
    holder: str
    term: int

    def check(self, conn: sa.Connection) -> None:
        row = conn.execute(sa.select(scheduler_leader.c.holder, scheduler_leader.c.term, scheduler_leader.c.expires)
                           .where(scheduler_leader.c.id == 1)).first()
        if row is None or row.holder != self.holder or row.term != self.term:
            now_leading = f"{row.holder} (term {row.term})" if row is not None else "nobody"
            raise Fenced(f"{self.holder} is no longer the leader (term {self.term}); {now_leading} is")
        if row.expires < self.store.now(conn):
            raise Fenced(f"{self.holder}'s lease (term {self.term}) expired; it must be renewed before writing")


class LeaderElector:
    """Takes and keeps the lead in ``store``; :attr:`fence` is the claim while leading, else None."""

    def __init__(self, store: Store, identity: str | None = None, lease_duration: float = 15.0,
                 renew_period: float = 2.0, on_change: Callable[[bool, int | None], None] | None = None):
        if renew_period >= lease_duration:
            raise ValueError(f"leaderElection.renewPeriod ({renew_period:g}s) must be shorter than "
                             f"leaseDuration ({lease_duration:g}s)")
        self.store = store
        self.identity = identity or default_identity()
        self.lease_duration = lease_duration
        self.renew_period = renew_period
        self.on_change = on_change
        self.fence: Fence | None = None
        self.known = False               # whether one round has completed (readiness)
        self.leader: str | None = None   # who leads, as of the last round
        self._thread: Periodic | None = None

    @property
    def leading(self) -> bool:
        return self.fence is not None

    def round(self) -> bool:
        """Try to take or renew the lead, once; returns whether this process leads now."""
        before = self.fence
        if before is None:
            self._end_stalled_writers()
        try:
            # A follower waits for the write lock one renew period at most, so that its next round can end a
            # session stuck holding it (a leader renews as long as it takes).
            with self.store.write(lock_timeout=self.renew_period if before is None else None) as conn:
                now = self.store.now(conn)
                row = conn.execute(sa.select(scheduler_leader).where(scheduler_leader.c.id == 1)).first()
                expires = now + self.lease_duration
                if row is None:
                    conn.execute(scheduler_leader.insert().values(id=1, holder=self.identity, term=1, acquired=now,
                                                                  expires=expires))
                    fence = Fence(self.store, self.identity, 1)
                elif before is not None and row.holder == self.identity and row.term == before.term \
                        and row.expires >= now:
                    conn.execute(scheduler_leader.update().where(scheduler_leader.c.id == 1).values(expires=expires))
                    fence = before
                elif row.expires < now:
                    term = row.term + 1
                    conn.execute(scheduler_leader.update().where(scheduler_leader.c.id == 1)
                                 .values(holder=self.identity, term=term, acquired=now, expires=expires))
                    fence = Fence(self.store, self.identity, term)
                else:
                    fence = None
                self.leader = self.identity if fence is not None else row.holder
        except Exception:
            log.exception("election.round_failed", identity=self.identity)
            fence = None   # cannot tell: act as a follower; the fence refuses stale writes anyway
        self.fence = fence
        self.known = True
        if (before is None) != (fence is None) or (before and fence and before.term != fence.term):
            log.warning("election.change", identity=self.identity, leading=fence is not None,
                        term=fence.term if fence else None, leader=self.leader)
            if self.on_change is not None:
                self.on_change(fence is not None, fence.term if fence else None)
        return fence is not None

    def _end_stalled_writers(self) -> None:
        """A follower, when the lead's lease has run out: end a session stuck holding the write lock for longer
        than a lease (:meth:`Store.end_stalled_writers`), so that this round's write is not kept waiting by it."""
        if self.store.sqlite:
            return
        try:
            with self.store.read() as conn:
                row = conn.execute(sa.select(scheduler_leader).where(scheduler_leader.c.id == 1)).first()
                if row is None or row.expires >= self.store.now(conn):
                    return
                ended = self.store.end_stalled_writers(conn, self.lease_duration)
            if ended:
                log.warning("election.stalled_writer_ended", identity=self.identity, sessions=ended,
                            holder=row.holder, term=row.term)
        except Exception:
            log.exception("election.stalled_writer_check_failed", identity=self.identity)

    def resign(self) -> None:
        """On a clean shutdown: let the lease expire now, so a follower takes over at its next round."""
        fence, self.fence = self.fence, None
        if fence is None:
            return
        try:
            with self.store.write() as conn:
                conn.execute(scheduler_leader.update().where(scheduler_leader.c.id == 1,
                                                             scheduler_leader.c.holder == fence.holder,
                                                             scheduler_leader.c.term == fence.term)
                             .values(expires=0.0))
        except Exception:  # pragma: no cover - best effort on the way out
            log.exception("election.resign_failed")

    # -- the thread ----------------------------------------------------------------------
    def start(self) -> None:
        self._thread = Periodic("flotilla-election", self.renew_period, self.round)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._thread.stop()
        self.resign()
