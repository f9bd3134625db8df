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
from flotilla.kwok.realnode import processes
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
    recorded = processes.spawn(rn, "kubelet", [str(bin_dir / "kubelet"), *SLEEP, "--root-dir", f"{state}/kubelet"])
    try:
        assert processes.strays(rn, "kubelet") == sorted([procs["stray kubelet"].pid, recorded])
        assert processes.strays(rn, "containerd") == [procs["stray containerd"].pid]
        assert realnode.stop_kubelet(rn) is True
        assert processes.end(rn, "containerd", timeout=5) is True   # no pid file: the stray alone
        alive = {what: process_alive(proc.pid) for what, proc in procs.items()}
        assert alive == {"stray kubelet": False, "stray containerd": False, "kubelet of another node": True,
                         "kubelet of a sibling dir": True, "not a kubelet": True}
        assert not process_alive(recorded) and not rn.pid_file("kubelet").exists()
        assert processes.strays(rn, "kubelet") == [] and realnode.stop_kubelet(rn) is False
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


# -- the iptables chains stop removes ------------------------------------------------------------

#: Chains and rules of others on the machine before the node's start: a chain of another name and one named like
#: Kubernetes' (``KUBE-OTHER``), each jumped to from INPUT.
OTHERS = """\
*filter
:OTHER-FW - [0:0]
:KUBE-OTHER - [0:0]
-A INPUT -j OTHER-FW
-A INPUT -j KUBE-OTHER
-A OTHER-FW -p tcp -m tcp --dport 9999 -j DROP
COMMIT
"""
#: What the node's kubelet makes (as v1.36's does: its firewall chain jumped to from INPUT and OUTPUT, its
#: canaries and the mode hint; the firewall's rule, for 127.0.0.0/8, in iptables only) and the portmap
#: plugin's chain, jumped to from PREROUTING.
NODE_MADE = """\
*mangle
:KUBE-IPTABLES-HINT - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
COMMIT
*filter
:KUBE-FIREWALL - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
-A INPUT -j KUBE-FIREWALL
-A OUTPUT -j KUBE-FIREWALL
-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" \
-m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
COMMIT
*nat
:KUBE-KUBELET-CANARY - [0:0]
:CNI-HOSTPORT-DNAT - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
COMMIT
"""
#: Made by someone else while the node runs: not of the node's prefixes, so it stays.
LATER = """\
*filter
:LATE-OTHER - [0:0]
-A OUTPUT -j LATE-OTHER
COMMIT
"""
#: Run in a network namespace of its own (its own iptables): others' chains, the record ``start`` takes, the
#: node's chains, then what ``stop`` removes; prints the tables at each step.
IN_NETNS = """\
import json, subprocess, sys
from pathlib import Path
from flotilla.kwok.realnode import chains
from flotilla.kwok.realnode.layout import RealNode

rn, others, node_made, later, take_record = RealNode(Path(sys.argv[1])), *json.loads(sys.argv[2])

def restore(text):
    for family in chains.families():
        lines = [line for line in text.splitlines(keepends=True)
                 if family == "iptables" or "127.0.0.0/8" not in line]
        subprocess.run([f"{family}-restore", "--noflush"], input="".join(lines), text=True, check=True)

def tables():
    return {family: {table: chains.saved(family, table) for table in chains.TABLES} for family in chains.families()}

restore(others)
steps = {"before": tables()}
if take_record:
    chains.record(rn)
restore(node_made)
restore(later)
steps["running"] = tables()
steps["problems"] = chains.remove(rn)
steps["after"] = tables()
print(json.dumps(steps))
"""


def chains_around_a_stop(tmp_path, take_record: bool) -> dict:
    import json
    import os
    import shutil

    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("iptables-save"):
        import pytest
        pytest.skip("needs root, unshare and iptables")
    state = tmp_path / "realnode"
    state.mkdir()
    repo = Path(__file__).resolve().parents[2]
    result = subprocess.run(["unshare", "--net", sys.executable, "-c", IN_NETNS, str(state),
                             json.dumps([OTHERS, NODE_MADE, LATER, take_record])],
                            capture_output=True, text=True, timeout=120, cwd=repo,
                            env={**os.environ, "PYTHONPATH": str(repo)})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def chain_names(tables: dict) -> dict:
    return {family: {table: chains for table, (chains, _) in by_table.items()} for family, by_table in tables.items()}


BUILTIN = {"filter": ["INPUT", "FORWARD", "OUTPUT"], "nat": ["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"],
           "mangle": ["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"]}


def test_stop_removes_the_chains_the_node_made_and_leaves_the_tables_as_it_found_them(tmp_path):
    steps = chains_around_a_stop(tmp_path, take_record=True)
    families = sorted(steps["before"])
    assert "iptables" in families
    for family in families:
        running = chain_names(steps["running"])[family]
        assert running == {
            "filter": BUILTIN["filter"] + ["KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-OTHER", "LATE-OTHER",
                                           "OTHER-FW"],
            "nat": BUILTIN["nat"] + ["CNI-HOSTPORT-DNAT", "KUBE-KUBELET-CANARY"],
            "mangle": BUILTIN["mangle"] + ["KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"]}, family
        after_chains, after_rules = steps["after"][family]["filter"]
        assert after_chains == BUILTIN["filter"] + ["KUBE-OTHER", "LATE-OTHER", "OTHER-FW"], family
        assert after_rules == ["-A INPUT -j OTHER-FW", "-A INPUT -j KUBE-OTHER", "-A OUTPUT -j LATE-OTHER",
                               "-A OTHER-FW -p tcp -m tcp --dport 9999 -j DROP"], family
        # Apart from what someone else made while the node ran, every table as before the start.
        assert steps["after"][family]["nat"] == steps["before"][family]["nat"]
        assert steps["after"][family]["mangle"] == steps["before"][family]["mangle"]
    assert steps["problems"] == []


def test_without_the_record_stop_removes_the_kubelets_chains_alone(tmp_path):
    steps = chains_around_a_stop(tmp_path, take_record=False)
    for family in sorted(steps["before"]):
        assert chain_names(steps["after"])[family] == {
            "filter": BUILTIN["filter"] + ["KUBE-OTHER", "LATE-OTHER", "OTHER-FW"],
            "nat": BUILTIN["nat"] + ["CNI-HOSTPORT-DNAT"],
            "mangle": BUILTIN["mangle"]}, family
        assert steps["after"][family]["nat"][1] == ["-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT"]
    assert steps["problems"] == []
