"""helm and kubectl as the chart's real-node tests run them: caches and config under the test's directory."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def run(*args: str, tmp_path: Path, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    """A helm or kubectl command, helm's caches and config under ``tmp_path``."""
    env = {**os.environ, "HELM_CACHE_HOME": str(tmp_path / "helm-cache"),
           "HELM_CONFIG_HOME": str(tmp_path / "helm-config"), "HELM_DATA_HOME": str(tmp_path / "helm-data")}
    result = subprocess.run(list(args), capture_output=True, text=True, env=env, timeout=timeout)
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result
