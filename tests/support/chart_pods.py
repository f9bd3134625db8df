"""The HA chart test's ends of :mod:`flotilla.kwok.realnode.chartpod` (the bundled PostgreSQL and the roles' pods
made by hand on ``real-1``): helm and kubectl run with their caches under the test's directory, and the module's
functions called with a ``real_node`` fixture.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from flotilla.kwok.realnode import chartpod


def run(*args: str, tmp_path: Path, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    """A helm or kubectl command, helm's caches and config under ``tmp_path``."""
    env = {**os.environ, "HELM_CACHE_HOME": str(tmp_path / "helm-cache"),
           "HELM_CONFIG_HOME": str(tmp_path / "helm-config"), "HELM_DATA_HOME": str(tmp_path / "helm-data")}
    result = subprocess.run(list(args), capture_output=True, text=True, env=env, timeout=timeout)
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


def api_server(real_node) -> str:
    """The API server's URL as the node's kubeconfig names it (the host's loopback)."""
    return chartpod.api_server(real_node.kubeconfig)


def token_secret(real_node, service_account: str, name: str) -> str:
    """A Secret ``name`` in the test's namespace holding a one-hour token of ``service_account``, the cluster's CA
    and the namespace (:func:`flotilla.kwok.realnode.chartpod.token_secret`)."""
    return chartpod.token_secret(real_node.client, real_node.namespace, service_account, name, seconds=3600)


def running(real_node, name: str, timeout: float = 240) -> dict:
    """The pod once Running (its container started)."""
    return chartpod.wait_running(real_node.client, real_node.namespace, name, timeout)
