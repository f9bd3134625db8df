"""``serve`` before its store answers: it waits (bounded) and answers the probes, or exits at once on a config error.

The waiting itself runs on a fake clock (which attempts, which pauses, which
log lines); the processes run against a PostgreSQL of their own on a chosen
port, with password authentication, started after the role.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import httpx
import psycopg
import pytest
import sqlalchemy as sa
from structlog.testing import capture_logs

from flotilla.client import Client
from flotilla.service.storewait import StoreUnavailable, store_address, unreachable, wait_for_store
from tests.support.serve import FLOTILLA, REPO, env_for, free_port, wait_for
from tests.support.service import CONFIG, POSTGRES_URL, job, job_file

REFUSED = ('connection failed: connection to server at "127.0.0.1", port 5999 failed: Connection refused\n'
           '\tIs the server running on that host and accepting TCP/IP connections?')
REFUSED_LINE = ('connection failed: connection to server at "127.0.0.1", port 5999 failed: Connection refused '
                'Is the server running on that host and accepting TCP/IP connections?')
NO_DATABASE = 'connection failed: connection to server at "127.0.0.1", port 5999 failed: FATAL:  database "x" does not exist'
STARTING = ('connection failed: connection to server at "127.0.0.1", port 5999 failed: FATAL:  '
            'the database system is starting up')
URL = "postgresql+psycopg://flotilla:secret@127.0.0.1:5999/flotilla"


def driver_error(message: str) -> sa.exc.OperationalError:
    return sa.exc.OperationalError(None, None, psycopg.OperationalError(message))


@pytest.mark.parametrize("message, waits", [
    (REFUSED, True),
    ("failed to resolve host 'postgresql.flotilla.svc': [Errno -2] Name or service not known", True),
    ('connection failed: connection to server at "10.0.0.7", port 5432 failed: timeout expired', True),
    (STARTING, True),
    ('connection failed: connection to server at "127.0.0.1", port 5999 failed: FATAL:  sorry, too many clients '
     'already', True),
    (NO_DATABASE, False),
    ('connection failed: connection to server at "127.0.0.1", port 5999 failed: FATAL:  password authentication '
     'failed for user "flotilla"', False),
    ('connection failed: connection to server at "127.0.0.1", port 5999 failed: FATAL:  role "x" does not exist', False),
])
def test_which_driver_errors_are_waited_for(message, waits):
    assert unreachable(driver_error(message)) is waits


def test_url_and_dialect_errors_are_not_waited_for():
    assert unreachable(sa.exc.ArgumentError("Could not parse SQLAlchemy URL from given URL string")) is False
    assert unreachable(sa.exc.NoSuchModuleError("Can't load plugin: sqlalchemy.dialects:postgresql.nosuch")) is False


def test_the_address_names_host_and_port_never_the_password():
    assert store_address(URL) == "127.0.0.1:5999"
    assert store_address("postgresql+psycopg://u:pw@postgresql.flotilla.svc/flotilla") == "postgresql.flotilla.svc:5432"


class FakeClock:
    def __init__(self):
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def failing(errors: list[str | None], clock: FakeClock):
    """A connect that raises each of ``errors`` in turn (None: connects), taking 0.1 s a try."""
    tried = []

    def connect(url):
        tried.append(url)
        clock.now += 0.1
        message = errors[len(tried) - 1]
        if message is not None:
            raise driver_error(message)
    return connect, tried


def test_it_retries_with_a_doubling_pause_up_to_5s_and_logs_once_per_group():
    clock = FakeClock()
    connect, tried = failing([REFUSED] * 12 + [STARTING] + [None], clock)
    reasons = []
    with capture_logs() as logs:
        attempts = wait_for_store(URL, 300, on_wait=reasons.append, connect=connect, sleep=clock.sleep, clock=clock)
    assert attempts == 14
    assert clock.sleeps == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0]
    assert reasons == [f"store unreachable: 127.0.0.1:5999: {REFUSED_LINE}"] * 12 + [
        "store unreachable: 127.0.0.1:5999: " + " ".join(STARTING.split())]
    # One line at the first failure, one once 30 s have passed with the same error, one when the error changes,
    # and one when the store answers.
    assert [(e["event"], e.get("attempts"), e.get("waited"), e.get("error")) for e in logs] == [
        ("store.unreachable", 1, "0.1s", REFUSED_LINE),
        ("store.unreachable", 9, "33.5s", REFUSED_LINE),
        ("store.unreachable", 3, "48.8s", " ".join(STARTING.split())),
        ("store.reachable", 14, "53.9s", None),
    ]
    assert all(e["store"] == "127.0.0.1:5999" and "secret" not in str(e) for e in logs)


def test_it_gives_up_at_the_bound_with_one_line_naming_the_store():
    clock = FakeClock()
    connect, tried = failing([REFUSED] * 10, clock)
    with pytest.raises(StoreUnavailable) as caught:
        wait_for_store(URL, 2, connect=connect, sleep=clock.sleep, clock=clock)
    assert str(caught.value) == (f"store 127.0.0.1:5999 unreachable after 2s (--store-wait 2s), 4 attempts; "
                                 f"last: {REFUSED_LINE}")
    assert clock.sleeps == [0.5, 1.0, pytest.approx(0.2)]   # the last pause ends at the bound
    assert len(tried) == 4


def test_without_a_wait_one_attempt_and_one_line():
    clock = FakeClock()
    connect, tried = failing([REFUSED], clock)
    with pytest.raises(StoreUnavailable) as caught:
        wait_for_store(URL, 0, connect=connect, sleep=clock.sleep, clock=clock)
    assert str(caught.value) == f"store 127.0.0.1:5999 unreachable: {REFUSED_LINE}"
    assert (len(tried), clock.sleeps) == (1, [])


def test_a_configuration_error_ends_the_wait_at_once():
    clock = FakeClock()
    connect, tried = failing([REFUSED, NO_DATABASE], clock)
    with pytest.raises(StoreUnavailable) as caught:
        wait_for_store(URL, 300, connect=connect, sleep=clock.sleep, clock=clock)
    assert str(caught.value) == "store 127.0.0.1:5999: " + " ".join(NO_DATABASE.split())
    assert (len(tried), clock.sleeps) == (2, [0.5])


# -- processes against a PostgreSQL that starts after them ----------------------------------------

def _pg_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: [
        int(x) if x.isdigit() else x for x in p.parts[-3].split(".")])
    if found:
        return found[-1].parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).parent if pg_ctl else None


needs_postgres = pytest.mark.skipif(not POSTGRES_URL or _pg_bin() is None,
                                    reason="FLOTILLA_TEST_POSTGRES_URL is not set (scripts/postgres-test)")


class LatePostgres:
    """A PostgreSQL of this test's own on a chosen port, user ``postgres`` with password ``secret``."""

    def __init__(self):
        self.bin = _pg_bin()
        self.dir = Path(tempfile.mkdtemp(prefix="flotilla-storewait-"))
        self.port = free_port()
        root = os.getuid() == 0
        if root:
            shutil.chown(self.dir, "postgres")
        (self.dir / "pw").write_text("secret\n")
        self._as_pg(str(self.bin / "initdb"), "-D", str(self.dir / "data"), "-U", "postgres", "--auth-local=trust",
                    "--auth-host=scram-sha-256", f"--pwfile={self.dir / 'pw'}", "-E", "UTF8", "--locale=C")

    def url(self, password: str = "secret") -> str:
        return f"postgresql+psycopg://postgres:{password}@127.0.0.1:{self.port}/postgres"

    def _as_pg(self, *command: str, check: bool = True) -> int:
        prefix = ["runuser", "-u", "postgres", "--"] if os.getuid() == 0 else []
        return subprocess.run([*prefix, *command], check=check, capture_output=True, timeout=120).returncode

    def running(self) -> bool:
        return self._as_pg(str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "status", check=False) == 0

    def start(self) -> None:
        if self.running():
            return
        self._as_pg(str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "-l", str(self.dir / "server.log"), "-w",
                    "-t", "60", "-o", f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir} -c fsync=off",
                    "start")

    def stop(self) -> None:
        if self.running():
            self._as_pg(str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "-m", "immediate", "-w", "stop")

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(name="late_pg", scope="module")
def late_postgres():
    pg = LatePostgres()
    yield pg
    pg.remove()


def serve(tmp_path: Path, store: str, *args: str, role: str = "api") -> tuple[subprocess.Popen, str, Path]:
    port = free_port()
    config = tmp_path / "serve.yaml"
    config.write_text(CONFIG)
    log = tmp_path / "serve.log"
    proc = subprocess.Popen([*FLOTILLA, "serve", "--role", role, "--config", str(config), "--store", store,
                             "--listen", f"127.0.0.1:{port}", *args],
                            cwd=REPO, env=env_for(), stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    return proc, f"http://127.0.0.1:{port}", log


def answer(url: str, path: str):
    try:
        response = httpx.get(url + path, timeout=2)
    except httpx.HTTPError:
        return None
    return response.status_code, response.json()


@pytest.mark.postgres
@needs_postgres
def test_an_api_replica_waits_for_a_store_that_starts_after_it_then_serves(late_pg, tmp_path):
    late_pg.stop()
    proc, url, log = serve(tmp_path, late_pg.url(), "--store-wait", "120s")
    try:
        assert wait_for(lambda: answer(url, "/healthz"), timeout=60) == (200, {"ok": True, "role": "api"})
        refused = (f'store unreachable: 127.0.0.1:{late_pg.port}: connection failed: connection to server at '
                   f'"127.0.0.1", port {late_pg.port} failed: Connection refused Is the server running on that host '
                   f'and accepting TCP/IP connections?')
        # Before the first attempt's answer, the reason names the store alone.
        assert wait_for(lambda: (ready := answer(url, "/readyz"))
                        and ready[1]["reason"] != f"store unreachable: 127.0.0.1:{late_pg.port}" and ready) == (
            503, {"ready": False, "reason": refused, "role": "api"})
        assert answer(url, "/v1/queues")[0] == 503
        assert proc.poll() is None
        # A config edited while the role waits is applied once it runs (the reloader compares with what was read).
        config = tmp_path / "serve.yaml"
        config.write_text(config.read_text().replace("  - {name: B, weight: 1, owners: [bob]}\n",
                                                     "  - {name: B, weight: 1, owners: [bob]}\n"
                                                     "  - {name: C, weight: 2, owners: [alice]}\n"))
        late_pg.start()
        assert wait_for(lambda: (ready := answer(url, "/readyz")) and ready[0] == 200 and ready,
                        step=0.2, timeout=60) == (200, {"ready": True, "role": "api"})
        with Client(url, "alice-token") as client:
            submitted = client.submit(job_file("A", "late", [job("c0")])).raw["jobs"]
            assert [(j["clientId"], client.status(j["id"]).raw["state"]) for j in submitted] == [("c0", "queued")]
            assert wait_for(lambda: sorted((q.raw["name"], q.raw["weight"]) for q in client.queues())
                            == [("A", 1.0), ("B", 1.0), ("C", 2.0)])
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    text = log.read_text()
    assert "store.unreachable" in text and f"store=127.0.0.1:{late_pg.port}" in text and "secret" not in text
    assert "store.reachable" in text


@pytest.mark.postgres
@needs_postgres
def test_a_scheduler_waits_then_leads(late_pg, tmp_path):
    late_pg.stop()
    proc, url, log = serve(tmp_path, late_pg.url(), "--store-wait", "120s", "--identity", "s1", role="scheduler")
    try:
        assert wait_for(lambda: answer(url, "/healthz"), timeout=60) == (200, {"ok": True, "role": "scheduler"})
        assert answer(url, "/readyz")[0] == 503
        late_pg.start()
        assert wait_for(lambda: (ready := answer(url, "/readyz")) and ready[0] == 200 and ready,
                        step=0.2, timeout=60) == (200, {"ready": True, "role": "scheduler", "leader": True,
                                                        "identity": "s1"})
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


def run_serve(tmp_path: Path, store: str, *args: str) -> tuple[int, list[str]]:
    proc, _, log = serve(tmp_path, store, *args)
    code = proc.wait(60)
    return code, log.read_text().splitlines()


@pytest.mark.postgres
@needs_postgres
def test_a_wrong_password_exits_at_once_with_one_line(late_pg, tmp_path):
    late_pg.start()
    try:
        code, lines = run_serve(tmp_path, late_pg.url("wrong"))
    finally:
        late_pg.stop()
    assert (code, lines) == (2, [
        f'error: store 127.0.0.1:{late_pg.port}: connection failed: connection to server at "127.0.0.1", port '
        f'{late_pg.port} failed: FATAL: password authentication failed for user "postgres"'])


@pytest.mark.postgres
@needs_postgres
def test_without_a_wait_an_unreachable_store_exits_at_once(late_pg, tmp_path):
    late_pg.stop()
    code, lines = run_serve(tmp_path, late_pg.url(), "--store-wait", "0")
    assert (code, lines) == (2, [
        f'error: store 127.0.0.1:{late_pg.port} unreachable: connection failed: connection to server at "127.0.0.1", '
        f'port {late_pg.port} failed: Connection refused Is the server running on that host and accepting TCP/IP '
        f'connections?'])


@pytest.mark.postgres
@needs_postgres
def test_the_wait_ends_at_its_bound_with_one_line_naming_the_store(late_pg, tmp_path):
    late_pg.stop()
    code, lines = run_serve(tmp_path, late_pg.url(), "--store-wait", "2s")
    assert code == 2
    *logged, last = lines
    assert last.startswith(f"error: store 127.0.0.1:{late_pg.port} unreachable after 2s (--store-wait 2s), ")
    assert last.endswith(f' attempts; last: connection failed: connection to server at "127.0.0.1", port '
                         f'{late_pg.port} failed: Connection refused Is the server running on that host and '
                         f'accepting TCP/IP connections?')
    assert [line.split("]", 1)[1].split()[0] for line in logged] == ["store.unreachable"]   # its first attempt
    assert f"store=127.0.0.1:{late_pg.port}" in logged[0] and "secret" not in logged[0]


@pytest.mark.postgres
@needs_postgres
def test_sigterm_while_waiting_ends_the_process_with_status_0(late_pg, tmp_path):
    late_pg.stop()
    proc, url, log = serve(tmp_path, late_pg.url(), "--store-wait", "120s")
    try:
        assert wait_for(lambda: answer(url, "/healthz"), timeout=60) == (200, {"ok": True, "role": "api"})
    finally:
        proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert log.read_text().splitlines()[-1] == f"flotilla serve: SIGTERM while waiting for store 127.0.0.1:{late_pg.port}: stopped"
