"""What one ``flotilla serve`` process does: ``all``, ``api`` or ``scheduler``.

``all`` is the embedded default (API and scheduling loop in one process,
SQLite is fine). ``api`` and ``scheduler`` are the replicated deployment:
any number of stateless API replicas, any number of schedulers of which
one leads (:mod:`flotilla.service.roles.election`), all on one PostgreSQL.
SQLite lives in one process's file system, so those roles refuse it.
"""

from __future__ import annotations

ROLES = ("all", "api", "scheduler")


class RoleError(ValueError):
    """A role that cannot run with this configuration."""


def check_role(role: str, store_url: str) -> None:
    """Refuse ``api``/``scheduler`` on SQLite (other replicas could never see that file)."""
    if role not in ROLES:
        raise RoleError(f"--role: expected one of {', '.join(ROLES)}, got {role!r}")
    if role != "all" and store_url.startswith("sqlite"):
        raise RoleError(f"--role {role} needs a PostgreSQL store shared by every replica (store.url or --store "
                        f"postgresql+psycopg://...); {store_url} is one process's file: use --role all with SQLite")


def runs_api(role: str) -> bool:
    return role in ("all", "api")


def runs_scheduler(role: str) -> bool:
    return role in ("all", "scheduler")


def bound_idle_transactions(store, seconds: float) -> None:
    """Have PostgreSQL end any of ``store``'s sessions left idle inside a transaction for ``seconds``.

    Writes are serialised by a lock held for the whole transaction. A
    process paused inside one (SIGSTOP, a frozen VM) would hold it, and
    every other writer - the other schedulers' election rounds, the API's
    submissions - would wait for as long as the pause lasts. With this
    timeout the server ends the paused session, rolls its transaction back
    and frees the lock; the paused process finds its connection gone when
    it wakes, and nothing of that transaction was stored. ``seconds`` must
    exceed the longest work the process does between two statements of a
    transaction (the cycle's ingest), and stay below the leader lease so
    that a successor can take over within it.
    """
    if store.sqlite:
        return
    from sqlalchemy import event

    millis = max(1, int(seconds * 1000))

    def _on_connect(dbapi_conn, _record) -> None:
        with dbapi_conn.cursor() as cur:
            cur.execute(f"SET idle_in_transaction_session_timeout = {millis}")
        dbapi_conn.commit()

    event.listen(store.engine, "connect", _on_connect)
    store.engine.dispose()      # connections opened before (migrations) get it too when reopened
