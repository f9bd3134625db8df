"""The API against its own OpenAPI document: schemathesis, every check, on a real ``flotilla serve``.

Bounded for CI (``MAX_EXAMPLES`` per operation and phase, a fixed seed, one
worker); ``tests/contract/schemathesis.toml`` says, for each narrowed
check, why it does not apply there. A failure prints schemathesis' report
with a ``curl`` line that reproduces each case.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from serve_process import REPO, Server
from service_fixtures import POSTGRES_URL, STORE_PARAMS, reset_postgres
from test_service_e2e import CONFIG

MAX_EXAMPLES = 25
SEED = 20261123


@pytest.mark.parametrize("kind", STORE_PARAMS)
def test_the_api_answers_as_its_openapi_document_says(kind, tmp_path):
    config = CONFIG
    if kind == "postgres":   # NUL and over-long ids were 500s there only
        reset_postgres(POSTGRES_URL)
        config = CONFIG.replace('store: {url: "sqlite:///DB"}', f'store: {{url: "{POSTGRES_URL}"}}')
    srv = Server(tmp_path, config).start()
    try:
        run = subprocess.run(
            [str(Path(sys.executable).parent / "schemathesis"),
             "--config-file", str(REPO / "tests" / "contract" / "schemathesis.toml"),
             "run", f"{srv.url}/openapi.json", "--max-examples", str(MAX_EXAMPLES), "--seed", str(SEED),
             "--workers", "1", "--generation-database", "none", "--no-color",
             "--header", "Authorization: Bearer admin-token", "--request-timeout", "30"],
            capture_output=True, text=True, timeout=900, cwd=tmp_path)
    finally:
        srv.kill()
    assert run.returncode == 0, run.stdout[-20000:] + run.stderr[-3000:]
    for phase in ("Coverage", "Fuzzing", "Stateful"):   # every phase ran, none was skipped as a whole
        assert f"✅  {phase} (" in run.stdout, run.stdout[-5000:]
