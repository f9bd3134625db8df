"""Every command of the README's quick start and five-minute tour, run as written, with the outputs the README
states checked exactly.

The commands are read from the README's ``sh`` blocks (and compared with the list below, so a README change
shows up here). What is changed to run them side by side with other test runs, and nothing else:

* the quick start's ``pip install -e .`` installs into a fresh virtualenv that sees the site-packages of the
  environment running the tests (a ``.pth`` file naming them, so the dependencies are there without a download),
  never into that environment; every later ``flotilla`` is that venv's;
* ``scripts/test`` is not run: it is what runs this test;
* commands run in a temporary directory holding a link to ``examples/``, so the files they write (plots, JSON,
  ``flotilla.db``) land there; ``serve`` gets ``--listen`` on a free port instead of 8080;
* the KWOK cluster is named after this process instead of ``kwok-1``, with ``HOME`` in the temporary directory
  (its kubeconfig and cluster files), and the config ``simulate --real-time`` reads names that context.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import site
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests.support.serve import free_port

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"


def sh_blocks() -> list[list[str]]:
    """The commands of each ``sh`` block: continuation lines joined, comments and trailing ``&`` dropped."""
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(), re.S)
    out = []
    for block in blocks:
        commands = []
        for line in block.replace("\\\n", " ").splitlines():
            command = re.sub(r"\s+#.*$", "", line).strip()
            if command:
                commands.append(re.sub(r"\s+", " ", command))
        out.append(commands)
    return out


EXPECTED = [
    ["pip install -e . && flotilla schedule-once --state examples/two-queues.yaml", "scripts/test"],
    ["flotilla schedule-once --state examples/two-queues.yaml"],
    ["flotilla simulate --workload examples/workloads/two-queues.yaml --plot two-queues.png --json two-queues.json"],
    ["flotilla serve --config examples/serve.yaml &",
     "export FLOTILLA_URL=http://127.0.0.1:8080 FLOTILLA_TOKEN=alice-secret",
     "flotilla submit examples/jobs/sleep.yaml --output json",
     "flotilla watch A sleep --until-done",
     "flotilla status JOB_ID --output yaml",
     "flotilla queue list"],
    ["flotilla kwok up --name kwok-1 --nodes 1000",
     "flotilla simulate --real-time --config examples/kwok.yaml --workload examples/workloads/two-queues.yaml "
     "--speed 20 --json real.json --plot real.png",
     "flotilla kwok down --name kwok-1"],
]


def test_the_readme_lists_the_commands_this_test_runs():
    assert sh_blocks() == EXPECTED


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A virtualenv in which the quick start's ``pip install -e .`` installs Flotilla (the shared one is left)."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
    # ``--system-site-packages`` would show the base interpreter's packages, not those of the virtualenv
    # scripts/test runs in: name this environment's site-packages instead.
    (site_dir,) = root.glob("lib/python*/site-packages")
    (site_dir / "flotilla-test-deps.pth").write_text("".join(f"{path}\n" for path in site.getsitepackages()))
    return root / "bin"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("readme")
    (work / "examples").symlink_to(REPO / "examples")
    return work


def env_with(bin_dir: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOTILLA_") or k == "FLOTILLA_K8S_BIN"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env.pop("PYTHONPATH", None)
    return {**env, **extra}


def run(command: str, bin_dir: Path, cwd: Path, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env_with(bin_dir, **env), capture_output=True,
                          text=True, timeout=timeout)


def check_two_queues_cycle(stdout: str) -> None:
    """The quick start's cycle, as the README states it."""
    out = json.loads(stdout)
    assert list(out) == ["scheduled", "preempted", "queued", "reasons", "queues"]
    assert out["scheduled"][0] == {"job": "b-1", "cluster": "sim", "node": "node-2"}
    assert out["scheduled"] == [{"job": f"b-{i}", "cluster": "sim", "node": "node-2"} for i in range(1, 33)]
    assert out["preempted"] == [f"a-{i}" for i in range(33, 41)]
    assert out["queued"] == [f"b-{i}" for i in range(33, 51)]
    assert out["reasons"]["b-33"] == "0/2 nodes are available: 2 Insufficient cpu"
    assert out["queues"] == {"A": {"fairShare": 0.5, "share": 0.5, "allocated": {"cpu": "32"}},
                             "B": {"fairShare": 0.5, "share": 0.5, "allocated": {"cpu": "32"}}}


def test_quick_start_installs_and_runs_one_cycle(venv):
    (install_and_run, _ci) = EXPECTED[0]
    result = run(install_and_run, venv, REPO, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    check_two_queues_cycle(result.stdout[result.stdout.index("{\n"):])
    # The flotilla that ran is the venv's entry point, importing this checkout.
    where = run("flotilla --version && python -c 'import flotilla; print(flotilla.__file__)'", venv, REPO)
    assert where.stdout.splitlines()[-1] == str(REPO / "flotilla" / "__init__.py")


def test_tour_one_cycle_and_a_simulation_with_its_plot(venv, workdir):
    (one_cycle,) = EXPECTED[1]
    result = run(one_cycle, venv, workdir)
    assert result.returncode == 0, result.stderr
    check_two_queues_cycle(result.stdout)

    (simulate,) = EXPECTED[2]
    result = run(simulate, venv, workdir)
    assert result.returncode == 0, result.stderr
    assert (workdir / "two-queues.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = json.loads((workdir / "two-queues.json").read_text())
    assert "stoppedAt" not in report                                # ran to the end
    # The workload's story (examples/workloads/two-queues.yaml): A's 8 jobs on node-2 preempted when B arrives
    # and run again later; every job of both queues finishes.
    assert {q: (report["queues"][q]["finished"], report["queues"][q]["preemptions"], report["queues"][q]["unfinished"])
            for q in ("A", "B")} == {"A": (40, 8, 0), "B": (50, 0, 0)}


def test_tour_the_service_submit_watch_status_queue_list(venv, workdir):
    serve, export, submit, watch, status, queue_list = EXPECTED[3]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    assert export == "export FLOTILLA_URL=http://127.0.0.1:8080 FLOTILLA_TOKEN=alice-secret"
    client_env = {"FLOTILLA_URL": url, "FLOTILLA_TOKEN": "alice-secret"}
    command = serve.removesuffix(" &") + f" --listen 127.0.0.1:{port}"
    log = open(workdir / "serve.log", "wb")
    proc = subprocess.Popen(shlex.split(command), cwd=workdir, env=env_with(venv), stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (workdir / "serve.log").read_text()
            try:
                if httpx.get(f"{url}/v1/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "serve did not come up"
            time.sleep(0.2)

        submitted = run(submit, venv, workdir, **client_env)
        assert submitted.returncode == 0, submitted.stderr
        jobs = json.loads(submitted.stdout)["jobs"]
        assert [(j["clientId"], j["existing"]) for j in jobs] == [("sleep-1", False), ("sleep-2", False),
                                                                  ("sleep-3", False)]
        watched = run(watch, venv, workdir, timeout=120, **client_env)
        assert watched.returncode == 0, watched.stderr            # every job succeeded
        kinds = [line.split()[3] for line in watched.stdout.splitlines()]
        assert kinds.count("succeeded") == 3 and kinds.count("submitted") == 3

        shown = run(status.replace("JOB_ID", jobs[0]["id"]), venv, workdir, **client_env)
        assert shown.returncode == 0, shown.stderr
        record = yaml.safe_load(shown.stdout)
        assert {k: record[k] for k in ("id", "queue", "jobSet", "clientId", "state", "owner")} == \
            {"id": jobs[0]["id"], "queue": "A", "jobSet": "sleep", "clientId": "sleep-1", "state": "succeeded",
             "owner": "alice"}

        listed = run(queue_list, venv, workdir, **client_env)
        assert listed.returncode == 0, listed.stderr
        rows = [line.split() for line in listed.stdout.splitlines()]
        assert rows[0] == ["NAME", "WEIGHT", "LIMITS", "OWNERS", "GROUPOWNERS", "NAMESPACES", "PARENT", "CORDONED",
                           "RETIRING", "PLACEMENT"]
        assert [row[:2] for row in rows[1:]] == [["A", "1"], ["B", "2"]]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        log.close()
    assert (workdir / "flotilla.db").exists()


@pytest.mark.kwok
def test_tour_a_kwok_cluster_and_a_real_time_simulation(venv, workdir, tmp_path):
    from tests.support.kwok import _toolchain

    bin_dir = _toolchain()
    up, simulate, down = EXPECTED[4]
    name = f"readme-{os.getpid()}"
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "FLOTILLA_K8S_BIN": str(bin_dir)}
    config = workdir / "kwok.yaml"
    config.write_text((REPO / "examples" / "kwok.yaml").read_text().replace("kwok-kwok-1", f"kwok-{name}"))
    try:
        started = run(up.replace("kwok-1", name), venv, workdir, timeout=600, **env)
        assert started.returncode == 0, started.stderr
        assert started.stdout == f"kwok-{name}\n"                 # the README: prints the context
        simulated = run(simulate.replace("examples/kwok.yaml", str(config)), venv, workdir, timeout=900, **env)
        assert simulated.returncode == 0, simulated.stderr[-3000:]
        assert (workdir / "real.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        report = json.loads((workdir / "real.json").read_text())
        assert "stoppedAt" not in report
        assert {q: (report["queues"][q]["finished"], report["queues"][q]["unfinished"]) for q in ("A", "B")} == \
            {"A": (40, 0), "B": (50, 0)}
    finally:
        stopped = run(down.replace("kwok-1", name), venv, workdir, timeout=300, **env)
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stderr.strip().endswith(f"cluster {name}: deleted")
