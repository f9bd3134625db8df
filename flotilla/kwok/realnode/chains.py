"""The iptables chains the node's processes make, recorded before the node starts and removed when it stops.

The kubelet makes ``KUBE-FIREWALL`` (filter, jumped to from INPUT and
OUTPUT: it drops packets to 127.0.0.0/8 that come from elsewhere),
``KUBE-KUBELET-CANARY`` (filter, nat, mangle: it watches for a flush of its
rules) and ``KUBE-IPTABLES-HINT`` (mangle: which iptables the host uses), in
iptables and ip6tables, and removes none of them when it ends. kube-proxy's
chains go with ``kube-proxy --cleanup`` (:mod:`network`), the bridge plugin's
per-pod chains with :func:`teardown.remove_network`; the portmap plugin's
``CNI-HOSTPORT-*`` chains stay like the kubelet's.

So ``start``, at the state directory's first start and before any of the
node's processes runs, records the ``KUBE-*`` and ``CNI-*`` chains each table
already has (:data:`RECORD` in the directory), and ``stop``, once the
processes are gone, removes the chains of those prefixes the record does not
name, with the rules of other chains that jump to them: what the node made,
and nothing that was there before it. Without the record (a node started
without one) only :data:`KUBELET_CHAINS` are removed.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess

from flotilla.kwok.realnode.layout import RealNode

FAMILIES = ("iptables", "ip6tables")
TABLES = ("filter", "nat", "mangle")
#: The names of the chains Kubernetes' components and the CNI plugins make.
PREFIXES = ("KUBE-", "CNI-")
#: The chains the kubelet makes, by table (in each family).
KUBELET_CHAINS = {"filter": ("KUBE-FIREWALL", "KUBE-KUBELET-CANARY"), "nat": ("KUBE-KUBELET-CANARY",),
                  "mangle": ("KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY")}
#: The state directory's file of the chains there before the node's first start: family -> table -> names.
RECORD = "iptables-chains.json"


def families() -> list[str]:
    """The families whose tools this machine has (``iptables`` and, where IPv6 is built in, ``ip6tables``)."""
    return [family for family in FAMILIES if shutil.which(f"{family}-save") and shutil.which(family)]


def saved(family: str, table: str) -> tuple[list[str], list[str]]:
    """The table's chains (builtin ones included) and its rules, as ``FAMILY-save`` prints them (``-A ...``)."""
    result = subprocess.run([f"{family}-save", "-t", table], capture_output=True, text=True)
    if result.returncode != 0:
        return [], []
    lines = result.stdout.splitlines()
    return ([line[1:].split()[0] for line in lines if line.startswith(":")],
            [line for line in lines if line.startswith("-A ")])


def present() -> dict[str, dict[str, list[str]]]:
    """The ``KUBE-*`` and ``CNI-*`` chains there now: family -> table -> sorted names."""
    return {family: {table: sorted(c for c in saved(family, table)[0] if c.startswith(PREFIXES)) for table in TABLES}
            for family in families()}


def record(rn: RealNode) -> None:
    """Write down the chains there before the node starts (:data:`RECORD`)."""
    (rn.dir / RECORD).write_text(json.dumps(present(), indent=1) + "\n")


def recorded(rn: RealNode) -> dict[str, dict[str, list[str]]] | None:
    try:
        return json.loads((rn.dir / RECORD).read_text())
    except (OSError, ValueError):
        return None


def jump_target(args: list[str]) -> str | None:
    """The chain a rule (``-A CHAIN ...`` split) jumps or goes to, if any."""
    for flag in ("-j", "-g"):
        if flag in args[:-1]:
            return args[args.index(flag) + 1]
    return None


def remove(rn: RealNode) -> list[str]:
    """Remove the chains the node made (see the module's docstring) and the rules jumping to them; what is still
    there afterwards."""
    before = recorded(rn)
    problems = []
    for family in families():
        for table in TABLES:
            chains, rules = saved(family, table)
            kept = None if before is None else (before.get(family) or {}).get(table)
            if kept is None:
                ours = [c for c in chains if c in KUBELET_CHAINS[table]]
            else:
                ours = [c for c in chains if c.startswith(PREFIXES) and c not in kept]
            if not ours:
                continue
            iptables = [family, "-w", "-t", table]
            for rule in rules:
                args = shlex.split(rule)
                if args[1] not in ours and jump_target(args) in ours:
                    subprocess.run([*iptables, "-D", *args[1:]], capture_output=True)
            for flag in ("-F", "-X"):   # all emptied first: the node's chains may jump to one another
                for chain in ours:
                    subprocess.run([*iptables, flag, chain], capture_output=True)
            left = sorted(set(ours) & set(saved(family, table)[0]))
            problems += [f"{family} -t {table}: chain {chain} still there" for chain in left]
    return problems
