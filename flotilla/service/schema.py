"""The store's tables (SQLAlchemy Core) and its versioned migrations.

The schema is created and upgraded by the program: :func:`migrate` runs,
in order and each in its own transaction, every migration newer than the
version recorded in ``flotilla_schema``. A migration is a function of a
connection; new ones are appended to :data:`MIGRATIONS` and never edited
once released. Two processes migrating the same database at once are
serialised by the database (SQLite's write lock, a PostgreSQL advisory
lock), so a migration never runs twice.

Tables:

* ``queues`` - name, weight, limits, owners, groupOwners, retry policy (v7),
  namespaces (v8: whose in-cluster pods may use it); ``origin`` (v9): ``config``
  for a queue the config file lists, ``api`` for one made through the API (or
  by a placement rule), and ``retiring`` (v9): when a config queue left the
  config while it still had unfinished jobs (null otherwise; see
  :mod:`flotilla.service.store.queues`);
* ``job_sets`` - (queue, name), when first used;
* ``jobs`` - one row per job, its current state, the normalised spec, its
  own retry policy (v7; read only when a run of it fails); ``source`` (v8) says where it came
  from: ``api``, or ``cluster`` for an in-cluster pod (``pod_namespace``, ``pod_name``, ``pod_uid``: the
  pod it stands for, whose uid also makes the job id, see :mod:`flotilla.service.intake`);
* ``leases`` - one row per job handed to a cluster: cluster, nodes, when
  leased and last renewed (deleted when the job leaves the cluster);
* ``cluster_reports`` - per cluster, when it last answered (v5): a lease
  whose ``seen`` is 1 counts as renewed then, so a cycle renews every lease
  of a cluster with one row, and writes a lease only when the cluster's
  report starts or stops listing its job;
* ``events`` - the append-only event log; ids increase in commit order and
  are never handed out twice, even after the rows holding the largest ids
  are deleted (a forced queue delete removes its events): readers resume
  from "after id N" (the scheduling loop's copies, the watch streams), and
  an id given again would hide the new event from them. SQLite therefore
  declares the id AUTOINCREMENT (since v6); PostgreSQL's sequence never
  goes back;
* ``scheduler_leader`` - one row: which scheduler leads, its term (bumped
  at every change of leader) and until when its lease holds (the fence
  every scheduling write checks, see :mod:`flotilla.service.roles.election`);
* ``scheduler_status`` - one row: the leader's last cycle as JSON (shares,
  reasons), which every replica's metrics and dashboard read;
* ``cordons`` - cordoned queues (``kind`` ``queue``: they accept jobs but
  schedule nothing new) and draining nodes (``kind`` ``node``, name
  ``cluster/node``: no new jobs; the leader applies it to the cluster).
"""

from __future__ import annotations

from typing import Callable

import sqlalchemy as sa

metadata = sa.MetaData()

EventId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

schema_version = sa.Table(
    "flotilla_schema", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("version", sa.Integer, nullable=False),
)

queues = sa.Table(
    "queues", metadata,
    sa.Column("name", sa.String(255), primary_key=True),
    sa.Column("weight", sa.Float, nullable=False, server_default="1"),
    sa.Column("limits", sa.Text, nullable=False, server_default="{}"),
    sa.Column("owners", sa.Text, nullable=False, server_default="[]"),
    sa.Column("group_owners", sa.Text, nullable=False, server_default="[]"),
    sa.Column("retry_policy", sa.Text, nullable=True),     # v7: its rules as JSON; null: none
    sa.Column("namespaces", sa.Text, nullable=False, server_default="[]"),   # v8
    sa.Column("origin", sa.String(16), nullable=False, server_default="api"),   # v9: "config" or "api"
    sa.Column("retiring", sa.Float, nullable=True),   # v9: when it left the config with unfinished jobs
    sa.Column("created", sa.Float, nullable=False),
    sa.Column("updated", sa.Float, nullable=False),
)

job_sets = sa.Table(
    "job_sets", metadata,
    sa.Column("queue", sa.String(255), primary_key=True),
    sa.Column("name", sa.String(255), primary_key=True),
    sa.Column("created", sa.Float, nullable=False),
)

jobs = sa.Table(
    "jobs", metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("queue", sa.String(255), nullable=False),
    sa.Column("job_set", sa.String(255), nullable=False),
    sa.Column("client_id", sa.String(255), nullable=True),
    sa.Column("owner", sa.String(255), nullable=False),
    sa.Column("priority", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("priority_class", sa.String(255), nullable=False),
    sa.Column("submitted", sa.Float, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("cluster", sa.String(255), nullable=True),
    sa.Column("node", sa.Text, nullable=True),
    # Per pod: {"requests": {...ints}, "nodeSelector": {...}, "tolerations": [...]}, as JSON text.
    sa.Column("pods", sa.Text, nullable=False),
    sa.Column("npods", sa.Integer, nullable=False, server_default="1"),
    sa.Column("gang_id", sa.String(255), nullable=True),
    sa.Column("gang_cardinality", sa.Integer, nullable=True),   # jobs in the gang
    sa.Column("gang_pods", sa.Integer, nullable=True),          # pods in the gang (what the scheduler counts)
    sa.Column("grace_period", sa.Float, nullable=False),
    sa.Column("deadline", sa.Float, nullable=False),
    sa.Column("annotations", sa.Text, nullable=False, server_default="{}"),
    sa.Column("spec", sa.Text, nullable=False),
    sa.Column("retries", sa.Integer, nullable=False, server_default="0"),
    sa.Column("retry_policy", sa.Text, nullable=True),     # v7: the job's own rules as JSON; null: none
    # 0: none; 1: cancelled by a user; 2: active deadline exceeded (stopped, then failed).
    sa.Column("stop_requested", sa.Integer, nullable=False, server_default="0"),
    sa.Column("reason", sa.Text, nullable=False, server_default=""),
    sa.Column("started", sa.Float, nullable=True),
    sa.Column("finished", sa.Float, nullable=True),
    sa.Column("updated", sa.Float, nullable=False),
    # v8: "api" (submitted) or "cluster" (an in-cluster pod: these three name it).
    sa.Column("source", sa.String(16), nullable=False, server_default="api"),
    sa.Column("pod_namespace", sa.String(255), nullable=True),
    sa.Column("pod_name", sa.String(255), nullable=True),
    sa.Column("pod_uid", sa.String(64), nullable=True),
    sa.UniqueConstraint("queue", "client_id", name="uq_jobs_queue_client_id"),
)
sa.Index("ix_jobs_state_queue", jobs.c.state, jobs.c.queue)
sa.Index("ix_jobs_queue_job_set", jobs.c.queue, jobs.c.job_set)
sa.Index("ix_jobs_queue_gang", jobs.c.queue, jobs.c.gang_id)

leases = sa.Table(
    "leases", metadata,
    sa.Column("job_id", sa.String(32), primary_key=True),
    sa.Column("cluster", sa.String(255), nullable=False),
    sa.Column("nodes", sa.Text, nullable=False),          # JSON list, one node per pod
    sa.Column("leased_at", sa.Float, nullable=False),
    sa.Column("renewed_at", sa.Float, nullable=False),
    sa.Column("pods_running", sa.Integer, nullable=False, server_default="0"),
    sa.Column("pods_done", sa.Integer, nullable=False, server_default="0"),
    # v5: 1 while the cluster's last report listed the job: its lease then counts as renewed at that report
    # (cluster_reports.reported_at), and renewed_at is the time before that; 0: renewed_at alone.
    sa.Column("seen", sa.Integer, nullable=False, server_default="0"),
)
sa.Index("ix_leases_cluster", leases.c.cluster)

cluster_reports = sa.Table(
    "cluster_reports", metadata,
    sa.Column("cluster", sa.String(255), primary_key=True),
    sa.Column("reported_at", sa.Float, nullable=False),   # the last cycle in which the cluster answered
)

events = sa.Table(
    "events", metadata,
    sa.Column("id", EventId, primary_key=True, autoincrement=True),
    sa.Column("queue", sa.String(255), nullable=False),
    sa.Column("job_set", sa.String(255), nullable=False),
    sa.Column("job_id", sa.String(32), nullable=False),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("time", sa.Float, nullable=False),
    sa.Column("cluster", sa.String(255), nullable=True),
    sa.Column("node", sa.Text, nullable=True),
    sa.Column("reason", sa.Text, nullable=False, server_default=""),
    sa.Column("pod", sa.Integer, nullable=True),           # v4: the pod of a multi-pod job it is about
    sqlite_autoincrement=True,                             # v6: ids of deleted rows are not reused
)
sa.Index("ix_events_job_set", events.c.queue, events.c.job_set, events.c.id)
sa.Index("ix_events_job", events.c.job_id)


scheduler_leader = sa.Table(
    "scheduler_leader", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("holder", sa.String(255), nullable=False),
    sa.Column("term", sa.BigInteger, nullable=False),
    sa.Column("acquired", sa.Float, nullable=False),
    sa.Column("expires", sa.Float, nullable=False),
)

scheduler_status = sa.Table(
    "scheduler_status", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("term", sa.BigInteger, nullable=False),
    sa.Column("cycle", sa.BigInteger, nullable=False),
    sa.Column("time", sa.Float, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
)


cordons = sa.Table(
    "cordons", metadata,
    sa.Column("kind", sa.String(16), primary_key=True),
    sa.Column("name", sa.String(512), primary_key=True),
    sa.Column("since", sa.Float, nullable=False),
)


def _v1(conn: sa.Connection) -> None:
    """The first schema: every table above as it was first released (``events.pod`` since: see v4)."""
    metadata.create_all(conn, tables=[queues, job_sets, jobs, leases, events])


def _v2(conn: sa.Connection) -> None:
    """Leader election and the leader's published cycle status."""
    metadata.create_all(conn, tables=[scheduler_leader, scheduler_status])


#: (version, description, function). Append only.
def _v3(conn: sa.Connection) -> None:
    """Queue cordons and draining nodes."""
    metadata.create_all(conn, tables=[cordons])


def _v4(conn: sa.Connection) -> None:
    """Events about one pod of a multi-pod job name it (``pod``: its podNumber).

    A database created by this code's v1 has the column already (v1 creates
    the tables as defined now); one created earlier gets it here.
    """
    if "pod" not in {column["name"] for column in sa.inspect(conn).get_columns("events")}:
        conn.execute(sa.text("ALTER TABLE events ADD COLUMN pod INTEGER"))


def _v5(conn: sa.Connection) -> None:
    """Lease renewal per cluster: ``cluster_reports`` and ``leases.seen``.

    Existing leases start with ``seen`` 0, so each keeps exactly the
    ``renewed_at`` it had; the next report of its cluster marks it seen.
    """
    metadata.create_all(conn, tables=[cluster_reports])
    if "seen" not in {column["name"] for column in sa.inspect(conn).get_columns("leases")}:
        conn.execute(sa.text("ALTER TABLE leases ADD COLUMN seen INTEGER NOT NULL DEFAULT 0"))


def _v6(conn: sa.Connection) -> None:
    """SQLite: event ids never reused (AUTOINCREMENT), every existing row kept, ids continuing from the largest.

    SQLite cannot add AUTOINCREMENT to a table, so the table is rebuilt: the
    old one renamed aside (its indexes dropped, their names are reused), the
    new one created as defined above, the rows copied with their ids, the
    old one dropped. The sequence is seeded with the largest id kept, so the
    next event gets the next id. (Ids of rows deleted before this migration
    cannot be known; the scheduling loop restarts with the program that
    migrates, and reads everything afresh.) PostgreSQL's ``BIGSERIAL`` never
    reused ids: nothing to do there. A database whose v1 ran with this
    definition has the keyword already.
    """
    if conn.dialect.name != "sqlite":
        return
    ddl = conn.execute(sa.text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'events'")).scalar_one()
    if "AUTOINCREMENT" in ddl.upper():
        return
    for index in events.indexes:
        conn.execute(sa.text(f'DROP INDEX IF EXISTS "{index.name}"'))
    conn.execute(sa.text("ALTER TABLE events RENAME TO events_before_v6"))
    events.create(conn)
    columns = ", ".join(f'"{column.name}"' for column in events.columns)
    conn.execute(sa.text(f"INSERT INTO events ({columns}) SELECT {columns} FROM events_before_v6 ORDER BY id"))
    conn.execute(sa.text("DROP TABLE events_before_v6"))
    largest = conn.execute(sa.text("SELECT coalesce(max(id), 0) FROM events")).scalar_one()
    conn.execute(sa.text("DELETE FROM sqlite_sequence WHERE name = 'events'"))
    conn.execute(sa.text("INSERT INTO sqlite_sequence (name, seq) VALUES ('events', :seq)"), {"seq": largest})


def _v7(conn: sa.Connection) -> None:
    """Retry policies: ``queues.retry_policy`` and ``jobs.retry_policy`` (JSON rules, null for none).

    A database created by this code's v1 has the columns already; one created earlier gets them here.
    """
    for table in ("queues", "jobs"):
        if "retry_policy" not in {column["name"] for column in sa.inspect(conn).get_columns(table)}:
            conn.execute(sa.text(f"ALTER TABLE {table} ADD COLUMN retry_policy TEXT"))


def _v8(conn: sa.Connection) -> None:
    """In-cluster pods: ``queues.namespaces``; ``jobs.source`` and the pod a job of source ``cluster`` stands for.

    Existing queues admit no namespace and existing jobs are ``api`` jobs,
    as they were. A database whose v1 ran with these definitions has the
    columns already.
    """
    have = {column["name"] for column in sa.inspect(conn).get_columns("queues")}
    if "namespaces" not in have:
        conn.execute(sa.text("ALTER TABLE queues ADD COLUMN namespaces TEXT NOT NULL DEFAULT '[]'"))
    have = {column["name"] for column in sa.inspect(conn).get_columns("jobs")}
    for name, ddl in (("source", "VARCHAR(16) NOT NULL DEFAULT 'api'"), ("pod_namespace", "VARCHAR(255)"),
                      ("pod_name", "VARCHAR(255)"), ("pod_uid", "VARCHAR(64)")):
        if name not in have:
            conn.execute(sa.text(f"ALTER TABLE jobs ADD COLUMN {name} {ddl}"))


def _v9(conn: sa.Connection) -> None:
    """Queue origins: ``queues.origin`` and ``queues.retiring``.

    Existing queues start as ``api`` queues, kept whatever the config says,
    as every queue was: which of them the config made cannot be told from
    the store. The config's sync at start marks the queues it lists
    ``config``; from then on a queue the config drops is retired. A database
    whose v1 ran with these definitions has the columns already.
    """
    have = {column["name"] for column in sa.inspect(conn).get_columns("queues")}
    if "origin" not in have:
        conn.execute(sa.text("ALTER TABLE queues ADD COLUMN origin VARCHAR(16) NOT NULL DEFAULT 'api'"))
    if "retiring" not in have:
        conn.execute(sa.text("ALTER TABLE queues ADD COLUMN retiring FLOAT"))


MIGRATIONS: list[tuple[int, str, Callable[[sa.Connection], None]]] = [
    (1, "queues, job sets, jobs, leases, events", _v1),
    (2, "scheduler leader and status", _v2),
    (3, "queue cordons and draining nodes", _v3),
    (4, "events.pod: the pod of a multi-pod job an event is about", _v4),
    (5, "lease renewal per cluster: cluster_reports and leases.seen", _v5),
    (6, "event ids never reused on SQLite (AUTOINCREMENT)", _v6),
    (7, "retry policies of queues and jobs", _v7),
    (8, "in-cluster pods: queues.namespaces, jobs.source and the pod", _v8),
    (9, "queue origins: queues.origin (config or api) and queues.retiring", _v9),
]

LATEST = MIGRATIONS[-1][0]


def current_version(conn: sa.Connection) -> int:
    if not sa.inspect(conn).has_table(schema_version.name):
        return 0
    row = conn.execute(sa.select(schema_version.c.version).where(schema_version.c.id == 1)).first()
    return row[0] if row else 0


def migrate(engine: sa.Engine, lock: Callable[[sa.Connection], None], migrations=None) -> list[int]:
    """Bring the schema up to date; returns the versions applied (empty when already current).

    Each migration and its version bump commit together, so a crash
    mid-upgrade leaves the database at the last completed version.
    """
    applied: list[int] = []
    for version, _description, fn in migrations if migrations is not None else MIGRATIONS:
        with engine.connect().execution_options(flotilla_write=True) as conn, conn.begin():
            lock(conn)
            schema_version.create(conn, checkfirst=True)
            if current_version(conn) >= version:
                continue
            fn(conn)
            if conn.execute(sa.select(schema_version.c.id).where(schema_version.c.id == 1)).first():
                conn.execute(schema_version.update().where(schema_version.c.id == 1).values(version=version))
            else:
                conn.execute(schema_version.insert().values(id=1, version=version))
            applied.append(version)
    return applied
