"""The real node's kubelet start, with a stand-in kubelet (no root, no containerd): one that exits in its first
seconds is started once more, the reason of that exit in its log; a second exit is an error naming its reason and
the log it left."""

from __future__ import annotations

import re
import textwrap

import pytest

from flotilla.kwok import realnode
from flotilla.kwok.realnode import config, host, kubelet, processes


#: This module's line in the kubelet's log when it starts the kubelet once more.
NOTE = (r"real-node \d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\dZ: the kubelet exited \d+\.\ds after its start "
        r"\({reason}\); starting it once more")


class _NoClient:
    def close(self) -> None:
        pass


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A state directory and a toolchain whose ``kubelet`` runs ``plan``: the n-th start runs its n-th line
    (``up`` stays running and makes the node Ready)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("kube-controller-manager", "kube-scheduler", "kube-proxy", "coredns"):
        (bin_dir / tool).write_text("")
    rn = realnode.node(tmp_path / "state")
    (rn.dir / "logs").mkdir(parents=True)
    (rn.dir / "pids").mkdir()
    ready = tmp_path / "ready"
    monkeypatch.setattr(host, "make_cgroups", lambda: None)
    monkeypatch.setattr(host, "node_ip", lambda: "127.0.0.1")
    monkeypatch.setattr(config, "cluster_kubeconfig", lambda: tmp_path / "kubeconfig")
    # The stand-in is a shell script: its command line is the shell's, which the pid check would not recognise.
    monkeypatch.setattr(processes, "started_as", lambda rn, component, argv: True)
    monkeypatch.setattr(realnode.RealNode, "client", lambda self, **kw: _NoClient())
    monkeypatch.setattr(kubelet, "node_condition", lambda rn, client=None: "True" if ready.exists() else None)

    def plan(*steps: str):
        counter = tmp_path / "starts"
        cases = "\n".join(f"  {i}) {step} ;;" for i, step in enumerate(steps, 1))
        (bin_dir / "kubelet").write_text(textwrap.dedent("""\
            #!/bin/sh
            n=$(( $(cat COUNTER 2>/dev/null || echo 0) + 1 )); echo $n > COUNTER
            case $n in
            CASES
            esac
            """).replace("COUNTER", str(counter)).replace("CASES", cases).replace(
            "up", f"echo kubelet up; touch {ready}; exec sleep 60"))
        (bin_dir / "kubelet").chmod(0o755)
        return rn, bin_dir

    yield plan
    processes.end(rn, "kubelet", timeout=5)


def test_a_kubelet_that_exits_at_once_is_started_once_more_with_the_first_reason_in_its_log(fake, capsys):
    rn, bin_dir = fake("exit 3", "up")
    realnode.kubelet_up(rn, bin_dir, timeout=30)
    log = rn.log_file("kubelet").read_text().splitlines()
    assert len(log) == 2
    assert re.fullmatch(NOTE.format(reason=r"exit status 3"), log[0]), log[0]
    assert log[1] == "kubelet up"
    assert "(exit status 3); starting it once more (its log: " in capsys.readouterr().err


def test_a_second_early_exit_is_an_error_naming_its_reason_and_the_log(fake):
    rn, bin_dir = fake("exit 3", "echo 'E flag provided but not defined'; kill -9 $$")
    with pytest.raises(realnode.KubeletExited) as caught:
        realnode.kubelet_up(rn, bin_dir, timeout=30)
    assert caught.value.reason == "killed by SIGKILL"
    message = str(caught.value).splitlines()
    assert message[0] == f"the kubelet exited (killed by SIGKILL); its log ({rn.log_file('kubelet')}):"
    assert re.fullmatch(NOTE.format(reason=r"exit status 3"), message[1]), message[1]
    assert message[2:] == ["E flag provided but not defined"]


def test_an_empty_log_is_said_to_be_empty(fake):
    rn, bin_dir = fake("exit 1", "exit 1")
    with pytest.raises(realnode.KubeletExited) as caught:
        realnode.kubelet_up(rn, bin_dir, timeout=30)
    assert caught.value.reason == "exit status 1"
    # The log holds this module's note of the first exit and nothing of the kubelet's own.
    (note,) = rn.log_file("kubelet").read_text().splitlines()
    assert str(caught.value).splitlines()[1:] == [note]
    empty = rn.dir / "logs" / "other.log"
    empty.write_text("")
    assert processes.tail(empty) == "(empty)"
    assert processes.tail(rn.dir / "logs" / "missing.log") == "(no log)"
