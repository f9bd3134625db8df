"""Shared helpers for the service tests: a config with users and queues, stores on SQLite or PostgreSQL."""

from __future__ import annotations

import hashlib
import os
import textwrap

import pytest
import sqlalchemy as sa

from flotilla.config import parse_config
from flotilla.service import schema
from flotilla.service.settings import from_config
from flotilla.service.store import Store

POSTGRES_URL = os.environ.get("FLOTILLA_TEST_POSTGRES_URL")

BOB_SHA = hashlib.sha256(b"bob-token").hexdigest()

TOKENS = {"alice": "alice-token", "carol": "carol-token", "bob": "bob-token", "root": "admin-token",
          "dave": "dave-token"}

CONFIG = f"""
priorityClasses:
  - {{name: armada-default, priority: 30000, preemptible: false}}
  - {{name: armada-preemptible, priority: 20000, preemptible: true}}
defaultPriorityClass: armada-default
queues:
  - {{name: A, weight: 1, owners: [alice], groupOwners: [ml]}}
  - {{name: B, weight: 1, owners: [bob]}}
evict: {{probability: 0}}
lease: {{timeout: 2s, maxRetries: 3}}
gracePeriod: {{default: 1s, max: 300s}}
deadlines: {{cpu: 3d, gpu: 14d}}
cycle: {{period: 0.2s}}
auth:
  tokens:
    - {{token: alice-token, user: alice}}
    - {{token: carol-token, user: carol, groups: [ml]}}
    - {{sha256: "{BOB_SHA}", user: bob}}
    - {{token: admin-token, user: root, groups: [admins]}}
    - {{token: dave-token, user: dave, groups: [other]}}
  adminGroups: [admins]
clusters:
  - name: c1
    kind: simulated
    nodes: [{{count: 2, namePrefix: c1-node, resources: {{cpu: 8, memory: 32Gi, nvidia.com/gpu: 2}}}}]
  - name: c2
    kind: simulated
    nodes: [{{count: 2, namePrefix: c2-node, resources: {{cpu: 8, memory: 32Gi}}}}]
"""


def config(extra: str = ""):
    return parse_config(CONFIG + textwrap.dedent(extra), "test.yaml")


def tree_config():
    """The fixture's config with queue A split into A1 (weight 1) and A2 (weight 3)."""
    return parse_config(CONFIG.replace(
        "  - {name: B, weight: 1, owners: [bob]}\n",
        "  - {name: B, weight: 1, owners: [bob]}\n  - {name: A1, weight: 1, parent: A, owners: [alice]}\n"
        "  - {name: A2, weight: 3, parent: A, owners: [alice]}\n"), "tree.yaml")


def settings(extra: str = ""):
    return from_config(config(extra))


def headers(user: str) -> dict:
    return {"Authorization": f"Bearer {TOKENS[user]}"}


def reset_postgres(url: str) -> None:
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        schema.metadata.drop_all(conn)
        conn.execute(sa.text("DROP TABLE IF EXISTS flotilla_schema_test_extra"))
    engine.dispose()


STORE_PARAMS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=[
        pytest.mark.postgres,
        pytest.mark.skipif(not POSTGRES_URL, reason="FLOTILLA_TEST_POSTGRES_URL is not set (scripts/postgres-test)")]),
]


def make_store(kind: str, tmp_path) -> Store:
    if kind == "sqlite":
        return Store(f"sqlite:///{tmp_path}/flotilla.db")
    reset_postgres(POSTGRES_URL)
    return Store(POSTGRES_URL)


@pytest.fixture(name="env")
def api_env(tmp_path):
    """The API in-process on a fresh SQLite store with the test config's queues: (TestClient, Store)."""
    from fastapi.testclient import TestClient

    from flotilla.service.api import create_app

    s = settings()
    store = Store(f"sqlite:///{tmp_path}/api.db")
    store.sync_queues(s.queues)
    yield TestClient(create_app(store, s)), store
    store.close()


def job(client_id=None, cpu="1", memory=None, duration=None, gang=None, pc=None, **pod) -> dict:
    """One entry of a job file's ``jobs`` list."""
    resources = {"cpu": cpu}
    if memory:
        resources["memory"] = memory
    spec = {"containers": [{"name": "main", "image": "busybox",
                            "resources": {"requests": dict(resources), "limits": dict(resources)}}]}
    if pc:
        spec["priorityClassName"] = pc
    spec.update(pod)
    out = {"podSpec": spec, "annotations": {}}
    if client_id is not None:
        out["clientId"] = client_id
    if duration is not None:
        out["annotations"]["flotilla.io/simulated-duration"] = duration
    if gang is not None:
        out["annotations"]["armadaproject.io/gangId"] = gang[0]
        out["annotations"]["armadaproject.io/gangCardinality"] = str(gang[1])
    return out


def job_file(queue="A", job_set="s1", jobs=None) -> dict:
    return {"queue": queue, "jobSetId": job_set, "jobs": jobs if jobs is not None else [job("c0")]}
