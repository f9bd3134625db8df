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
