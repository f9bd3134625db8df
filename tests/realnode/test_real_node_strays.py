"""``scripts/real-node stop`` ends every kubelet and containerd running from the node's state directory, also one
whose pid file is gone (started by another checkout, its pid file overwritten by a later start), and nothing else.

Stand-in processes (Python sleeping, started under the binaries' names, their command lines naming the
directories as the real ones do): no root, no real node.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from flotilla.kwok import realnode
from flotilla.kwok.cluster import process_alive

SLEEP = ("-c", "import time; time.sleep(300)")


def stand_in(name: str, *args: str) -> subprocess.Popen:
    """A process whose command line reads ``NAME ARGS...`` as /proc shows it (argv[0] set, Python running)."""
    return subprocess.Popen([f"/opt/elsewhere/bin/{name}", *SLEEP, *args], executable=sys.executable,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_stop_ends_the_kubelet_and_containerd_of_its_state_directory_whoever_started_them(tmp_path):
    state = tmp_path / "realnode"
    for sub in ("pids", "logs"):
        (state / sub).mkdir(parents=True)
    rn = realnode.RealNode(state)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "kubelet").symlink_to(sys.executable)
    procs = {
        "stray kubelet": stand_in("kubelet", "--config", f"{state}/config/kubelet.yaml",
                                  "--root-dir", f"{state}/kubelet"),
        "stray containerd": stand_in("containerd", f"--config={state}/config/containerd.toml"),
        "kubelet of another node": stand_in("kubelet", "--root-dir", f"{tmp_path}/other/kubelet"),
        "kubelet of a sibling dir": stand_in("kubelet", "--root-dir", f"{state}-2/kubelet"),
        "not a kubelet": stand_in("sleeper", "--root-dir", f"{state}/kubelet"),
    }
    recorded = realnode._spawn(rn, "kubelet", [str(bin_dir / "kubelet"), *SLEEP, "--root-dir", f"{state}/kubelet"])
    try:
        assert realnode._strays(rn, "kubelet") == sorted([procs["stray kubelet"].pid, recorded])
        assert realnode._strays(rn, "containerd") == [procs["stray containerd"].pid]
        assert realnode.stop_kubelet(rn) is True
        assert realnode._end(rn, "containerd", timeout=5) is True   # no pid file: the stray alone
        alive = {what: process_alive(proc.pid) for what, proc in procs.items()}
        assert alive == {"stray kubelet": False, "stray containerd": False, "kubelet of another node": True,
                         "kubelet of a sibling dir": True, "not a kubelet": True}
        assert not process_alive(recorded) and not rn.pid_file("kubelet").exists()
        assert realnode._strays(rn, "kubelet") == [] and realnode.stop_kubelet(rn) is False
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
