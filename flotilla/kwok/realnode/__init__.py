"""One real node, ``real-1``, beside a KWOK cluster's API server: containerd, runc, the bridge CNI and a kubelet.

KWOK's fake kubelets accept whatever they are given; this node runs the
user's containers for real, so tests see what a kubelet refuses and
enforces (exit codes, OOM kills, deadlines, signals, image pulls, a lost
node). ``scripts/real-node start|stop`` drives this module; the tests marked
``realnode`` start it through that script.

What ``start`` brings up (each step skipped when already done, so it is
idempotent), all state under one directory (``FLOTILLA_REAL_NODE_DIR``,
default ``/tmp/flotilla-realnode``):

1. the images ``flotilla.local/busybox:1`` (Debian's ``busybox-static``
   with every applet linked) and ``flotilla.local/pause:1`` (the sandbox's
   process, :file:`pause.c` built static), as docker-archive tars made here
   and imported with ``ctr``: no registry is involved (:mod:`images`,
   :mod:`containerd`);
2. containerd (:mod:`containerd`) with its own socket, root and state,
   the CRI plugin using ``runc`` and the bridge CNI (bridge ``flrn0``,
   10.244.0.0/24, NAT out);
3. the KWOK cluster ``flotilla-realnode`` (:mod:`controlplane`: etcd,
   kube-apiserver, kwok-controller, kube-scheduler), with kwok-controller
   faking only nodes annotated ``kwok.x-k8s.io/node: fake``, so it leaves
   the real node alone,
   the API server reaching kubelets by their InternalIP (``pods/log``) and
   admitting pods with the ServiceAccount plugin (their token mounted at
   ``/var/run/secrets/kubernetes.io/serviceaccount``), its certificate
   naming the ``kubernetes`` Service's ClusterIP, and kube-scheduler binding
   the pods that name no other scheduler;
4. kube-controller-manager running the controllers of
   :data:`controlplane.CONTROLLERS`: a kubelet that stops makes its node
   NotReady (within about 5 s: the kubelet renews its lease every second),
   claims bind, Jobs, Deployments
   and StatefulSets run their pods, namespaces get their ``default``
   ServiceAccount and the cluster's CA, and a deleted namespace is emptied
   and removed; so a chart installs, and plain manifests apply and delete,
   as on a cluster of one's own;
5. the kubelet (:mod:`kubelet`), registering the node ``real-1``
   (cgroup v1, cgroupfs, pods' cgroups under ``/flotilla-realnode``,
   cluster DNS at the node IP), waited for until Ready;
6. kube-proxy and CoreDNS (:mod:`flotilla.kwok.realnode.network`): pods
   reach Services by ClusterIP and by name, the API server through the
   ``kubernetes`` Service.

``restart_kubelet(max_pods=N)`` (``scripts/real-node kubelet-restart
--max-pods N``) rewrites the kubelet's ``maxPods`` in its config and
restarts it, returning once the node's allocatable ``pods`` says N: a node
of fewer pod slots, for tests of what the kubelet admits. The setting stays
in the config until changed again or the node is stopped; restarting
without ``max_pods`` restores the template's :data:`MAX_PODS`.

Before all of it, :mod:`host` checks what the machine must have, and at the
first start from a state directory ``start`` records the ``KUBE-*`` and
``CNI-*`` iptables chains already there (:mod:`chains`) and renders the
configs from the package's templates (:mod:`config`). Every process is
spawned, found and ended through :mod:`processes`.

``stop`` undoes it in order: the node's pods deleted while the kubelet still
runs (so it tears their networks down), kubelet, CoreDNS, kube-proxy (and
its chains, ``kube-proxy --cleanup``), controller manager,
leftover containers, containerd, the cluster, then every mount under the
directory (deepest first), the bridge, the CNI's NAT chains and the cgroups
(:mod:`teardown`), and last the iptables chains the kubelet and the CNI
plugins made that the record does not name, with the rules jumping to them
(:mod:`chains`): the machine's iptables as the node found them.
Only processes whose pids the node recorded (:mod:`processes`) are
signalled, and only while they still run the command line recorded with the
pid, and besides them any other kubelet, containerd, kube-proxy or CoreDNS
whose command line names a path in the state directory
(:func:`processes.strays`): one started there by another checkout, whose
pid file a later start overwrote, would otherwise outlive ``stop`` and hold
the node's name, ports and mounts.

Every phase of a start is timed; the figures go to ``timings.json`` in the
directory (``bench/realnode.py`` reports them).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from flotilla.kwok.realnode import chains, config, containerd, controlplane, host, kubelet, processes, teardown
from flotilla.kwok.realnode.config import MAX_PODS
from flotilla.kwok.realnode.host import TOOLS, busybox_path, missing_commands, node_ip, tools
from flotilla.kwok.realnode.kubelet import (KubeletExited, kubelet_up, node_condition, restart_kubelet,
                                            start_kubelet, stop_kubelet, wait_ready)
from flotilla.kwok.realnode.layout import (CLUSTER, CONTEXT, IMAGE, NODE, NODE_LABEL, RealNode, RealNodeError, node,
                                           state_dir)


def running(rn: RealNode | None = None) -> bool:
    """Every process of the node alive and the node Ready."""
    from flotilla.kwok.cluster import component_pid
    from flotilla.kubernetes.client import KubeError

    rn = rn or node()
    if not rn.kubeconfig.exists():
        return False
    if any(processes.pid(rn, c) is None for c in ("containerd", "kube-controller-manager", "kubelet")):
        return False
    from flotilla.kwok.realnode import network
    if not network.running(rn):
        return False
    if any(component_pid(CLUSTER, c) is None for c in ("etcd", "kube-apiserver", "kwok-controller",
                                                        "kube-scheduler")):
        return False
    try:
        return kubelet.node_condition(rn) == "True"
    except KubeError:
        return False


def start(rn: RealNode | None = None, bin_dir: Path | None = None) -> RealNode:
    """Bring the node up (or whatever part of it is down); returns once ``real-1`` is Ready."""
    rn = rn or node()
    if os.geteuid() != 0:
        raise RealNodeError("the real node needs root (containerd, mounts, cgroups, iptables)")
    missing = host.missing_commands()
    if missing:
        raise RealNodeError(f"missing {', '.join(sorted(missing))}: install the Debian packages "
                            f"{' '.join(sorted(set(missing.values())))} (scripts/real-node does)")
    bin_dir = host.tools(bin_dir)
    rn.dir.mkdir(parents=True, exist_ok=True)
    with processes.locked(rn.dir):
        if running(rn):
            return rn
        timings: dict[str, float] = {}
        began = last = time.monotonic()

        def lap(phase: str) -> None:
            nonlocal last
            now = time.monotonic()
            timings[phase] = round(now - last, 2)
            last = now

        if config.first_start(rn):
            chains.record(rn)   # before any process of the node's makes a chain
        config.write_configs(rn)
        host.make_cgroups()
        containerd.start_containerd(rn)
        lap("containerd")
        containerd.import_images(rn)
        lap("images")
        controlplane.start_cluster(rn, bin_dir)
        lap("cluster")
        controlplane.start_controller_manager(rn, bin_dir)
        kubelet.kubelet_up(rn, bin_dir)
        lap("kubelet")
        from flotilla.kwok.realnode import network
        network.start(rn, bin_dir)
        lap("network")
        timings["total"] = round(time.monotonic() - began, 2)
        (rn.dir / "timings.json").write_text(json.dumps({"time": time.time(), "phases": timings}) + "\n")
        processes.say(f"node {NODE} Ready in {timings['total']:.1f}s "
                      f"({', '.join(f'{k} {v:.1f}s' for k, v in timings.items() if k != 'total')})")
    return rn


def stop(rn: RealNode | None = None, bin_dir: Path | None = None) -> list[str]:
    """Take everything ``start`` made down; returns what could not be removed (empty when all went)."""
    from flotilla.kwok.cluster import KwokError, down, workdir

    rn = rn or node()
    problems: list[str] = []
    with processes.locked(rn.dir):
        if processes.pid(rn, "kubelet") is not None:
            teardown.drain_node(rn)
        processes.end(rn, "kubelet")
        from flotilla.kwok.realnode import network
        try:
            proxy_bin = host.tools(bin_dir)
        except RealNodeError:
            proxy_bin = None
        problems += network.stop(rn, proxy_bin)
        processes.end(rn, "kube-controller-manager")
        containerd.remove_containers(rn)
        processes.end(rn, "containerd")
        if workdir(CLUSTER).exists():
            try:
                down(CLUSTER, kubeconfig=str(rn.kubeconfig), bin_dir=bin_dir)
            except (KwokError, OSError) as exc:
                problems.append(f"cluster {CLUSTER}: {exc}")
        left = teardown.unmount_all(rn.dir)
        problems += [f"still mounted: {m}" for m in left]
        teardown.remove_network()
        teardown.remove_cgroups()
        problems += chains.remove(rn)
        if not left and rn.dir.exists():
            shutil.rmtree(rn.dir, ignore_errors=True)
    return problems


__all__ = ["CLUSTER", "CONTEXT", "IMAGE", "MAX_PODS", "NODE", "NODE_LABEL", "TOOLS", "KubeletExited", "RealNode",
           "RealNodeError", "busybox_path", "kubelet_up", "missing_commands", "node", "node_condition", "node_ip",
           "restart_kubelet", "running", "start", "start_kubelet", "state_dir", "stop", "stop_kubelet", "tools",
           "wait_ready"]
