"""The API against its own OpenAPI document: schemathesis, every check, positive and negative data, on a real
``flotilla serve``, as an administrator and as a tenant (a queue owner), on SQLite and on PostgreSQL.

Bounded for CI (``MAX_EXAMPLES`` per operation and phase, a fixed seed, one
worker); ``tests/service/contract/schemathesis.toml`` says, for each narrowed
check, why it does not apply there, and ``tests/service/contract/hooks.py`` writes
whole numbers in generated JSON bodies as integer literals (the API takes
no other spelling of an integer; JSON Schema does not tell them apart). A
failure prints schemathesis' report with a ``curl`` line that reproduces
each case.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.serve import REPO, Server
from tests.support.service import POSTGRES_URL, STORE_PARAMS, reset_postgres
from tests.support.e2e import CONFIG

MAX_EXAMPLES = 25
SEED = 20261123


#: Who the run signs in as (tests/service/test_service_e2e.py's CONFIG): an administrator sees every queue, a tenant
#: only the queue it owns (A), so every route answers it with its tenant's view or a refusal.
USERS = {"admin": "admin-token", "tenant": "alice-token"}


@pytest.mark.parametrize("user", sorted(USERS))
@pytest.mark.parametrize("kind", STORE_PARAMS)
def test_the_api_answers_as_its_openapi_document_says(kind, user, tmp_path):
    config = CONFIG
    if kind == "postgres":   # NUL and over-long ids were 500s there only
        reset_postgres(POSTGRES_URL)
        config = CONFIG.replace('store: {url: "sqlite:///DB"}', f'store: {{url: "{POSTGRES_URL}"}}')
    srv = Server(tmp_path, config).start()
    try:
        # Read here, with a patient timeout: schemathesis gives a document 10 s, which a loaded machine can take.
        spec = tmp_path / "openapi.json"
        spec.write_text(httpx.get(f"{srv.url}/openapi.json", timeout=120).text)
        env = {**os.environ, "SCHEMATHESIS_HOOKS": str(REPO / "tests" / "service" / "contract" / "hooks.py")}
        run = subprocess.run(
            [str(Path(sys.executable).parent / "schemathesis"),
             "--config-file", str(REPO / "tests" / "service" / "contract" / "schemathesis.toml"),
             "run", str(spec), "--url", srv.url, "--max-examples", str(MAX_EXAMPLES), "--seed", str(SEED),
             "--workers", "1", "--generation-database", "none", "--no-color",
             "--header", f"Authorization: Bearer {USERS[user]}", "--request-timeout", "30"],
            capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env)
    finally:
        srv.kill()
    assert run.returncode == 0, run.stdout[-20000:] + run.stderr[-3000:]
    for phase in ("Coverage", "Fuzzing", "Stateful"):   # every phase ran, none was skipped as a whole
        assert f"✅  {phase} (" in run.stdout, run.stdout[-5000:]
    # Every operation of the document was selected and tested.
    selected, total = re.search(r"Selected: (\d+)/(\d+)", run.stdout).groups()
    assert (selected, re.search(r"Tested: (\d+)", run.stdout).group(1)) == (total, total), run.stdout[-3000:]
