"""A real ``flotilla serve`` process for end-to-end tests, and the CLI run against it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import yaml

from flotilla.service.store import Store

REPO = Path(__file__).resolve().parents[2]

#: Every job's events, in order, when it runs to success.
ORDER = ["submitted", "queued", "leased", "pending", "running", "succeeded"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env_for(token: str | None = None, url: str | None = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    if url:
        env["FLOTILLA_URL"] = url
    if token:
        env["FLOTILLA_TOKEN"] = token
    env.pop("FLOTILLA_CLIENT_CONFIG", None)
    return env


FLOTILLA = [sys.executable, "-m", "flotilla.scheduler_main"]


class Server:
    """A real ``flotilla serve`` process on a free port; ``config`` has PORT and DB where those go."""

    def __init__(self, tmp_path: Path, config: str, extra: str = ""):
        self.port = free_port()
        self.db = tmp_path / "flotilla.db"
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = tmp_path / "serve.yaml"
        self.config.write_text(config.replace("PORT", str(self.port)).replace("DB", str(self.db))
                               + textwrap.dedent(extra))
        self.log = tmp_path / "serve.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 120) -> "Server":
        self.proc = subprocess.Popen([*FLOTILLA, "serve", "--config", str(self.config), "--admin-endpoints"],
                                     cwd=REPO, env=env_for(), stdout=subprocess.DEVNULL,
                                     stderr=open(self.log, "ab"))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited: {self.log.read_text()}")
            try:
                if httpx.get(f"{self.url}/v1/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.proc.kill()   # not left running: it would go on scheduling (and binding pods) for later tests
        self.proc.wait(30)
        raise AssertionError("serve did not come up")

    def kill(self, sig=signal.SIGKILL) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(30)

    def http(self, user: str) -> httpx.Client:
        token = "admin-token" if user == "root" else f"{user}-token"
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)

    def store(self) -> Store:
        return Store(f"sqlite:///{self.db}")


def cli(srv: Server, user: str, *args, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run([*FLOTILLA, *args], cwd=REPO, env=env_for(f"{user}-token", srv.url), capture_output=True,
                          text=True, timeout=timeout)


def write_file(tmp_path: Path, name: str, data: dict) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def wait_for(predicate, timeout=30.0, step=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError("timed out")

