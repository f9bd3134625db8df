"""Pid files are checked before anything is killed by them: a pid the system gave to another process is left alone.

A fake cluster (or the real node) whose session died leaves pid files
behind; by the time they are cleaned up, the pids may belong to anything.
The components here are real processes (``sleep``, run through a link named
after the component in the cluster's ``bin/``, as kwokctl links the real
binaries) and the unrelated process a plain ``sleep``; ``/proc`` is read
as it is.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import structlog
import yaml

SLEEP = "/bin/sleep"


def fake_cluster(root: Path, name: str, components: tuple[str, ...]) -> Path:
    """A cluster directory as kwokctl leaves it: ``kwok.yaml`` naming each component's binary (a link in
    ``bin/``) and arguments, and a ``pids/`` directory."""
    wd = root / "clusters" / name
    for sub in ("bin", "pids", "logs"):
        (wd / sub).mkdir(parents=True)
    specs = []
    for component in components:
        (wd / "bin" / component).symlink_to(SLEEP)
        specs.append({"name": component, "binary": str(wd / "bin" / component), "args": ["3600"],
                      "workDir": str(wd)})
    (wd / "kwok.yaml").write_text(yaml.safe_dump({
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokctlConfiguration",
        "options": {"runtime": "binary"}, "components": specs}))
    return wd


@pytest.fixture
def processes():
    """Start processes for a test; every one still running at its end is killed."""
    started: list[subprocess.Popen] = []

    def start(argv: list[str]) -> subprocess.Popen:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def gone(pid: int) -> bool:
    from flotilla.kwok.cluster import process_argv
    return process_argv(pid) is None


@pytest.mark.kwok
def test_down_kills_the_components_and_leaves_a_process_that_took_a_reused_pid(tmp_path, monkeypatch, processes):
    from flotilla.kwok.cluster import down, workdir
    from tests.support.kwok import _toolchain

    bin_dir = _toolchain()
    monkeypatch.setenv("KWOK_WORKDIR", str(tmp_path / "kwok"))
    name = "dead-session"
    wd = fake_cluster(tmp_path / "kwok", name, ("etcd", "kube-apiserver", "kwok-controller"))
    assert workdir(name) == wd
    etcd = processes([str(wd / "bin" / "etcd"), "3600"])
    unrelated = processes([SLEEP, "3600"])
    finished = processes(["true"])
    finished.wait()
    (wd / "pids" / "etcd.pid").write_text(str(etcd.pid))
    (wd / "pids" / "kube-apiserver.pid").write_text(str(unrelated.pid))    # the pid was given to someone else
    (wd / "pids" / "kwok-controller.pid").write_text(str(finished.pid))    # gone, its pid free

    with structlog.testing.capture_logs() as logs:
        assert down(name, kubeconfig=str(tmp_path / "kubeconfig"), bin_dir=bin_dir) is True
    assert logs == [{"event": "kwok.pid_reused", "cluster": name, "component": "kube-apiserver",
                     "pid": unrelated.pid, "cmdline": f"{SLEEP} 3600", "action": "left running",
                     "log_level": "warning"}]
    assert unrelated.poll() is None                  # still running
    assert gone(etcd.pid)                            # the component was killed
    assert not wd.exists()


def test_stop_processes_reports_the_reused_pids_and_removes_every_pid_file(tmp_path, monkeypatch, processes):
    from flotilla.kwok.cluster import ReusedPid, stop_processes

    monkeypatch.setenv("KWOK_WORKDIR", str(tmp_path / "kwok"))
    wd = fake_cluster(tmp_path / "kwok", "c", ("etcd", "kube-apiserver"))
    apiserver = processes([str(wd / "bin" / "kube-apiserver"), "3600"])
    unrelated = processes([SLEEP, "3601"])
    other_args = processes([str(wd / "bin" / "etcd"), "7200"])   # the binary, not the command line recorded
    (wd / "pids" / "kube-apiserver.pid").write_text(str(apiserver.pid))
    (wd / "pids" / "etcd.pid").write_text(str(other_args.pid))
    (wd / "pids" / "kube-controller-manager.pid").write_text(str(unrelated.pid))   # not in kwok.yaml

    with structlog.testing.capture_logs():
        reused = stop_processes("c")
    assert reused == [ReusedPid("etcd", other_args.pid, f"{wd}/bin/etcd 7200"),
                      ReusedPid("kube-controller-manager", unrelated.pid, f"{SLEEP} 3601")]
    assert gone(apiserver.pid)
    assert unrelated.poll() is None and other_args.poll() is None
    assert sorted((wd / "pids").iterdir()) == []


def test_stop_component_signals_only_its_own_process(tmp_path, monkeypatch, processes):
    from flotilla.kwok.cluster import component_pid, stop_component

    monkeypatch.setenv("KWOK_WORKDIR", str(tmp_path / "kwok"))
    wd = fake_cluster(tmp_path / "kwok", "c", ("etcd", "kwok-controller"))
    controller = processes([str(wd / "bin" / "kwok-controller"), "3600"])
    unrelated = processes([SLEEP, "3600"])
    (wd / "pids" / "kwok-controller.pid").write_text(str(controller.pid))
    (wd / "pids" / "etcd.pid").write_text(str(unrelated.pid))

    assert component_pid("c", "kwok-controller") == controller.pid
    assert component_pid("c", "etcd") is None            # not etcd, whatever its pid file says
    with structlog.testing.capture_logs() as logs:
        assert stop_component("c", "etcd") is False
    assert logs == [{"event": "kwok.pid_reused", "cluster": "c", "component": "etcd", "pid": unrelated.pid,
                     "cmdline": f"{SLEEP} 3600", "action": "left running", "log_level": "warning"}]
    assert unrelated.poll() is None
    assert not (wd / "pids" / "etcd.pid").exists()
    assert stop_component("c", "kwok-controller") is True
    assert gone(controller.pid)
    assert sorted(path.name for path in (wd / "pids").iterdir()) == []


def test_the_real_node_ends_only_the_processes_it_started(tmp_path, processes, capsys):
    from flotilla.kwok.realnode import node
    from flotilla.kwok.realnode.processes import end, pid as running_pid, spawn

    rn = node(tmp_path / "realnode")
    for sub in ("pids", "logs", "bin"):
        (rn.dir / sub).mkdir(parents=True)
    (rn.dir / "bin" / "kubelet").symlink_to(SLEEP)
    pid = spawn(rn, "kubelet", [str(rn.dir / "bin" / "kubelet"), "3600"])
    unrelated = processes([SLEEP, "3600"])
    rn.pid_file("containerd").write_text(str(unrelated.pid))
    rn.argv_file("containerd").write_text('["containerd", "--config", "containerd.toml"]')

    assert running_pid(rn, "kubelet") == pid
    assert running_pid(rn, "containerd") is None
    assert end(rn, "containerd") is False
    assert capsys.readouterr().err == (f"real-node: containerd: pid file {rn.pid_file('containerd')} names another "
                                       f"process ({SLEEP} 3600); left running\n")
    assert unrelated.poll() is None
    assert end(rn, "kubelet") is True
    assert gone(pid)
    assert sorted(path.name for path in (rn.dir / "pids").iterdir()) == []


def test_a_real_node_pid_without_its_command_line_recorded_is_checked_by_the_binary_name(tmp_path, processes):
    from flotilla.kwok.realnode import node
    from flotilla.kwok.realnode.processes import pid as running_pid

    rn = node(tmp_path / "realnode")
    (rn.dir / "pids").mkdir(parents=True)
    (rn.dir / "kube-controller-manager").symlink_to(SLEEP)
    manager = processes([str(rn.dir / "kube-controller-manager"), "3600"])
    unrelated = processes([SLEEP, "3600"])
    rn.pid_file("kube-controller-manager").write_text(str(manager.pid))
    rn.pid_file("kubelet").write_text(str(unrelated.pid))
    assert running_pid(rn, "kube-controller-manager") == manager.pid
    assert running_pid(rn, "kubelet") is None
    assert os.path.exists(f"/proc/{unrelated.pid}")
