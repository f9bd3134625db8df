"""One ``flotilla serve --role`` process on the test's PostgreSQL, for the HA and in-cluster HA tests."""

import signal
import subprocess
from pathlib import Path
import httpx
from prometheus_client.parser import text_string_to_metric_families
from tests.support.serve import FLOTILLA, REPO, env_for, free_port, wait_for
from tests.support.service import POSTGRES_URL


class Role:
    """One ``flotilla serve --role ROLE`` process on the test's PostgreSQL."""

    def __init__(self, tmp_path: Path, config: Path, role: str, name: str):
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp_path / f"{name}.log"
        self.proc = subprocess.Popen(
            [*FLOTILLA, "--log-level", "info", "serve", "--role", role, "--config", str(config), "--store",
             POSTGRES_URL, "--listen", f"127.0.0.1:{self.port}", "--identity", name],
            cwd=REPO, env=env_for(), stdout=subprocess.DEVNULL, stderr=open(self.log, "ab"))

    def ready(self) -> "Role":
        def up():
            assert self.proc.poll() is None, self.log.read_text()
            try:
                return httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False
        wait_for(up, timeout=60)
        return self

    def leads(self) -> bool:
        text = httpx.get(f"{self.url}/metrics", timeout=5).text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "flotilla_scheduler_leader" and sample.labels["identity"] == self.name:
                    return sample.value == 1.0
        return False

    def metric(self, name: str) -> float:
        for family in text_string_to_metric_families(httpx.get(f"{self.url}/metrics", timeout=5).text):
            for sample in family.samples:
                if sample.name == name:
                    return sample.value
        raise KeyError(name)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
