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
   and imported with ``ctr``: no registry is involved;
2. containerd with its own socket, root and state, the CRI plugin using
   ``runc`` and the bridge CNI (bridge ``flrn0``, 10.244.0.0/24, NAT out);
3. the KWOK cluster ``flotilla-realnode`` (etcd, kube-apiserver,
   kwok-controller, kube-scheduler), with kwok-controller faking only nodes
   annotated ``kwok.x-k8s.io/node: fake``, so it leaves the real node alone,
   the API server reaching kubelets by their InternalIP (``pods/log``) and
   admitting pods with the ServiceAccount plugin (their token mounted at
   ``/var/run/secrets/kubernetes.io/serviceaccount``), its certificate
   naming the ``kubernetes`` Service's ClusterIP, and kube-scheduler binding
   the pods that name no other scheduler;
4. kube-controller-manager running the controllers of :data:`CONTROLLERS`:
   a kubelet that stops makes its node NotReady (within about 5 s: the
   kubelet renews its lease every second), claims bind, Jobs, Deployments
   and StatefulSets run their pods, namespaces get their ``default``
   ServiceAccount and the cluster's CA, and a deleted namespace is emptied
   and removed; so a chart installs, and plain manifests apply and delete,
   as on a cluster of one's own;
5. the kubelet, registering the node ``real-1`` (cgroup v1, cgroupfs, pods'
   cgroups under ``/flotilla-realnode``, cluster DNS at the node IP),
   waited for until Ready;
6. kube-proxy and CoreDNS (:mod:`flotilla.kwok.realnode.network`): pods
   reach Services by ClusterIP and by name, the API server through the
   ``kubernetes`` Service.

``restart_kubelet(max_pods=N)`` (``scripts/real-node kubelet-restart
--max-pods N``) rewrites the kubelet's ``maxPods`` in its config and
restarts it, returning once the node's allocatable ``pods`` says N: a node
of fewer pod slots, for tests of what the kubelet admits. The setting stays
in the config until changed again or the node is stopped; restarting
without ``max_pods`` restores the template's :data:`MAX_PODS`.

``stop`` undoes it in order: the node's pods deleted while the kubelet still
runs (so it tears their networks down), kubelet, CoreDNS, kube-proxy (and
its chains, ``kube-proxy --cleanup``), controller manager,
leftover containers, containerd, the cluster, then every mount under the
directory (deepest first), the bridge, the CNI's NAT chains and the cgroups.
Only processes whose pids this module recorded are signalled, and only while
they still run the command line recorded with the pid, and besides them any
other kubelet, containerd, kube-proxy or CoreDNS whose command line names a
path in the state directory (:func:`_strays`): one started there by another checkout, whose
pid file a later start overwrote, would otherwise outlive ``stop`` and hold
the node's name, ports and mounts.

Every phase of a start is timed; the figures go to ``timings.json`` in the
directory (``bench/realnode.py`` reports them).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
NODE = "real-1"
CLUSTER = "flotilla-realnode"
CONTEXT = f"kwok-{CLUSTER}"
IMAGE = "flotilla.local/busybox:1"
PAUSE_IMAGE = "flotilla.local/pause:1"
CGROUP_ROOT = "/flotilla-realnode"
BRIDGE = "flrn0"
NETWORK = "flotilla-realnode"
SUBNET = "10.244.0.0/24"
CNI_BIN = "/usr/lib/cni"
NODE_LABEL = "flotilla.io/real-node"
#: The node lifecycle controller's period and grace: NotReady about this long after the kubelet's last heartbeat.
MONITOR_PERIOD, MONITOR_GRACE = "1s", "5s"
TOOLS = ("kubelet", "kube-controller-manager", "kube-scheduler", "kube-proxy", "coredns")
#: kube-controller-manager's controllers on the node's cluster, those a workload needs on a cluster of one's own:
#: a dead kubelet's node goes NotReady (node lifecycle), claims bind to volumes (persistentvolume binder), a
#: claim and a volume in use are deleted only once no pod uses them (persistentvolumeclaim-protection,
#: persistentvolume-protection: they take off the finalizers the API server puts on), a
#: batch/v1 Job makes its pods and completes (job), a Deployment makes its ReplicaSet and that its pods
#: (deployment, replicaset), a StatefulSet its numbered pods (statefulset), every namespace gets its ``default``
#: ServiceAccount (serviceaccount; ServiceAccount admission refuses a pod whose account is missing) and the
#: ``kube-root-ca.crt`` ConfigMap its pods' token volume holds (root-ca-certificate-publisher), legacy token
#: Secrets are filled (serviceaccount-token), a Service's endpoints follow its ready pods (endpoints,
#: endpointslice: what kube-proxy and CoreDNS read, network.py), what an owner's deletion leaves is collected
#: (garbage collector: a deleted Job's pods, a release's objects) and finished Jobs with a TTL are deleted
#: (ttl-after-finished).
#: Not run: the namespace controller (a deleted namespace stays Terminating), the pod GC, and those of clouds,
#: certificates, quotas and autoscaling, which nothing here uses.
CONTROLLERS = ("node-lifecycle-controller", "persistentvolume-binder-controller", "job-controller",
               "garbage-collector-controller", "ttl-after-finished-controller", "deployment-controller",
               "replicaset-controller", "statefulset-controller", "serviceaccount-controller",
               "serviceaccount-token-controller", "root-ca-certificate-publisher-controller",
               "endpoints-controller", "endpointslice-controller", "persistentvolumeclaim-protection-controller",
               "persistentvolume-protection-controller", "namespace-controller")
#: The API server's admission plugins turned off on the node's cluster: only TaintNodesByCondition (its
#: not-ready taint on the registering node would hold kube-scheduler and Flotilla back until the node
#: lifecycle controller's next pass); ServiceAccount admission runs, as on any cluster.
DISABLED_ADMISSION = ("TaintNodesByCondition",)
#: The kubelet's ``maxPods`` as the node starts (:file:`kubelet.yaml`); ``restart_kubelet`` sets another.
MAX_PODS = 110
#: A kubelet that ends this soon after its start is started once more (an exit at start-up, seen once under a
#: loaded machine and not again by hand); the first exit's reason goes to its log.
EARLY_EXIT = 10.0
COMMANDS = {"containerd": "containerd", "ctr": "containerd", "runc": "runc", "iptables": "iptables",
            CNI_BIN + "/bridge": "containernetworking-plugins", "gcc": "gcc", "conntrack": "conntrack"}


class RealNodeError(RuntimeError):
    """The real node could not be started, reached or stopped; the message says what and where."""


class KubeletExited(RealNodeError):
    """The kubelet ended while the node was waited for; ``reason`` is how (an exit status or a signal)."""

    def __init__(self, rn: "RealNode", reason: str):
        self.reason = reason
        log = rn.log_file("kubelet")
        super().__init__(f"the kubelet exited ({reason}); its log ({log}):\n{_tail(log)}")


@dataclass(frozen=True)
class RealNode:
    """Where the running node's pieces are: what a client needs (kubeconfig, context, image) and the state dir."""

    dir: Path

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def context(self) -> str:
        return CONTEXT

    @property
    def image(self) -> str:
        return IMAGE

    @property
    def node(self) -> str:
        return NODE

    @property
    def socket(self) -> Path:
        return self.dir / "containerd.sock"

    def pid_file(self, component: str) -> Path:
        return self.dir / "pids" / f"{component}.pid"

    def argv_file(self, component: str) -> Path:
        """The command line the component was started with (JSON), to tell it from a process given its pid later."""
        return self.dir / "pids" / f"{component}.argv"

    def log_file(self, component: str) -> Path:
        return self.dir / "logs" / f"{component}.log"

    def exports(self) -> str:
        """Shell lines for ``eval``: where the node's cluster is, which image it has, and its containerd's socket
        (``CONTAINERD_ADDRESS``, which ``ctr`` reads, so ``ctr -n k8s.io images import`` loads an image into it as
        on a node of one's own)."""
        return (f"export KUBECONFIG={self.kubeconfig}\n"
                f"export FLOTILLA_REAL_NODE_CONTEXT={self.context}\n"
                f"export FLOTILLA_REAL_NODE_IMAGE={self.image}\n"
                f"export CONTAINERD_ADDRESS={self.socket}\n")

    def client(self, **kwargs):
        from flotilla.kubernetes.client import KubeClient
        return KubeClient.from_kubeconfig(str(self.kubeconfig), self.context, **kwargs)


def state_dir() -> Path:
    return Path(os.environ.get("FLOTILLA_REAL_NODE_DIR") or "/tmp/flotilla-realnode")


def node(directory: Path | None = None) -> RealNode:
    return RealNode(directory or state_dir())


@contextmanager
def _locked(directory: Path):
    """One start or stop at a time on this machine (the lock file sits beside the directory, which stop removes)."""
    lock = directory.with_name(directory.name + ".lock")
    with open(lock, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _say(message: str) -> None:
    print(f"real-node: {message}", file=sys.stderr, flush=True)


# -- processes ------------------------------------------------------------------------------------

def _alive(pid: int) -> bool:
    from flotilla.kwok.cluster import process_alive
    return process_alive(pid)


def _pid(rn: RealNode, component: str) -> int | None:
    """The component's pid while it runs: the recorded pid, alive and running the command line it was started
    with (a pid the system has since given to another process is not the component)."""
    pid, _ = _checked_pid(rn, component)
    return pid


def _checked_pid(rn: RealNode, component: str) -> tuple[int | None, list[str] | None]:
    """The component's pid, else None and, when the pid file names a live process that is something else, its
    command line."""
    from flotilla.kwok.cluster import process_argv

    try:
        pid = int(rn.pid_file(component).read_text().strip())
    except (OSError, ValueError):
        return None, None
    proc = _children.get((rn.dir, component))
    if proc is not None and proc.pid == pid:
        # A child of this process: alive by its handle alone, which reaps it keeping its exit status (the
        # waitpid in _alive would take that status from the handle).
        alive = proc.poll() is None
    else:
        alive = pid > 0 and _alive(pid)
    argv = process_argv(pid) if alive else None
    if argv is None:
        return None, None
    return (pid, None) if _started_as(rn, component, argv) else (None, argv)


def _started_as(rn: RealNode, component: str, argv: list[str]) -> bool:
    """Whether ``argv`` is the command line ``component`` was started with (``pids/COMPONENT.argv``); a state
    directory without that record is checked by the binary's name alone."""
    try:
        recorded = json.loads(rn.argv_file(component).read_text())
    except (OSError, ValueError):
        return bool(argv) and Path(argv[0]).name == component
    return argv == recorded


#: The processes this one started, by state directory and component: how one ended is read from its handle
#: (once something else reaps it, its exit status is gone).
_children: dict[tuple[Path, str], subprocess.Popen] = {}


def _spawn(rn: RealNode, component: str, argv: list[str]) -> int:
    """Start ``argv`` in its own session (it outlives this process), logging to ``logs/COMPONENT.log``; the pid
    and the command line are recorded, so that the pid is only ever signalled while it is this process."""
    with open(rn.log_file(component), "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=rn.dir)
    _children[(rn.dir, component)] = proc
    rn.argv_file(component).write_text(json.dumps(argv))
    rn.pid_file(component).write_text(str(proc.pid))
    return proc.pid


def _exit_reason(rn: RealNode, component: str) -> str | None:
    """How the component this process started ended (``exit status 1``, ``killed by SIGKILL``); None while it
    runs or when this process did not start it."""
    proc = _children.get((rn.dir, component))
    code = None if proc is None else proc.poll()
    if code is None:
        return None
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _note(rn: RealNode, component: str, message: str) -> None:
    """A line of this module's in the component's log, between the lines of the process itself."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with open(rn.log_file(component), "a") as log:
        log.write(f"real-node {stamp}: {message}\n")


def _end(rn: RealNode, component: str, timeout: float = 15.0) -> bool:
    """SIGTERM the recorded process, SIGKILL after ``timeout`` s; False if it was not running.

    A pid file naming another process (its pid reused) is removed and that
    process left alone, saying so.
    """
    pid, other = _checked_pid(rn, component)
    _children.pop((rn.dir, component), None)
    if other is not None:
        _say(f"{component}: pid file {rn.pid_file(component)} names another process ({' '.join(other)[:200]}); "
             "left running")
    rn.pid_file(component).unlink(missing_ok=True)
    rn.argv_file(component).unlink(missing_ok=True)
    from flotilla.kwok.cluster import stop_process
    strays = [other for other in _strays(rn, component) if other != pid] if component in STRAYS else []
    for other in strays:
        _say(f"{component}: pid {other} runs from {rn.dir} without its pid file there; stopping it too")
        stop_process(other, signal.SIGTERM, timeout)
    if pid is None:
        return bool(strays)
    stop_process(pid, signal.SIGTERM, timeout)
    return True


#: The components stopped wherever they run from the state directory, pid file or not (:func:`_strays`).
STRAYS = ("kubelet", "containerd", "kube-proxy", "coredns")


def _strays(rn: RealNode, component: str) -> list[int]:
    """The live processes of ``component`` (its binary's name) whose command line names the state directory or a
    path in it (``--root-dir DIR/kubelet``, ``--config=DIR/config/containerd.toml``), by pid, this one excepted."""
    from flotilla.kwok.cluster import process_argv

    root = str(rn.dir).rstrip("/")
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = int(entry.name)
        argv = process_argv(pid)
        if not argv or Path(argv[0]).name != component:
            continue
        for arg in argv[1:]:
            value = arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg
            if value == root or value.startswith(root + "/"):
                if _alive(pid):
                    found.append(pid)
                break
    return sorted(found)


def _run(argv: list[str], timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RealNodeError(f"{' '.join(argv)}: {exc}") from None
    if check and result.returncode != 0:
        raise RealNodeError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()[-800:]}")
    return result


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) or "(empty)"
    except OSError:
        return "(no log)"


# -- checks ---------------------------------------------------------------------------------------

def missing_commands() -> dict[str, str]:
    """Commands the node needs that are not on this machine -> the Debian package that has them."""
    return {cmd: pkg for cmd, pkg in COMMANDS.items()
            if not (os.access(cmd, os.X_OK) if cmd.startswith("/") else shutil.which(cmd))}


def busybox_path() -> Path:
    """Debian's ``busybox-static`` binary (a dynamic busybox would not run in an image without a libc)."""
    path = Path("/bin/busybox")
    if not path.is_file():
        raise RealNodeError("/bin/busybox missing: install Debian's busybox-static package")
    with open(path, "rb") as fh:
        header = fh.read(4096)
    if b"ld-linux" in header or b"/lib64/ld" in header:
        raise RealNodeError("/bin/busybox is dynamically linked: install Debian's busybox-static package")
    return path


def tools(bin_dir: Path | None = None) -> Path:
    """The toolchain directory, with kubelet, kube-controller-manager and kube-scheduler beside the KWOK tools."""
    from flotilla.kwok.cluster import KwokError, find_bin_dir

    try:
        bin_dir = bin_dir or find_bin_dir()
    except KwokError as exc:
        raise RealNodeError(str(exc)) from None
    missing = [t for t in TOOLS if not (bin_dir / t).exists()]
    if missing:
        raise RealNodeError(f"{bin_dir} lacks {', '.join(missing)}: run scripts/k8s-tools (it builds them)")
    return bin_dir


def node_ip() -> str:
    """This machine's address toward the outside (the kubelet refuses a loopback node IP)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("192.0.2.254", 9))   # no packet is sent: only picks the route's source address
            address = sock.getsockname()[0]
        except OSError:
            address = ""
    if address and not address.startswith("127."):
        return address
    out = _run(["ip", "-4", "-o", "addr", "show", "scope", "global"], check=False).stdout.split()
    for word in out:
        if "/" in word and word[0].isdigit():
            return word.split("/")[0]
    raise RealNodeError("no non-loopback IPv4 address on this machine for the kubelet's --node-ip")


def _free_port(preferred: int) -> int:
    for port in (preferred, 0):
        with socket.socket() as sock:
            try:
                sock.bind(("0.0.0.0", port))
            except OSError:
                continue
            return sock.getsockname()[1]
    raise RealNodeError("no free port")


# -- pieces ---------------------------------------------------------------------------------------

def _render(template: str, **values: str) -> str:
    text = (HERE / template).read_text()
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    return text


def _write_configs(rn: RealNode) -> None:
    config = rn.dir / "config"
    if (config / "kubelet.yaml").exists():
        return   # kept from the first start: the kubelet's ports stay what they were
    for sub in ("config", "logs", "pids", "images", "cni/net.d", "cni/ipam", "kubelet/pki", "pod-logs"):
        (rn.dir / sub).mkdir(parents=True, exist_ok=True)
    common = {"DIR": str(rn.dir)}
    (config / "containerd.toml").write_text(_render("containerd.toml", PAUSE_IMAGE=PAUSE_IMAGE, CNI_BIN=CNI_BIN,
                                                    **common))
    (rn.dir / "cni" / "net.d" / "10-flotilla.conflist").write_text(
        _render("cni.conflist", NETWORK=NETWORK, BRIDGE=BRIDGE, SUBNET=SUBNET, **common))
    port = _free_port(10250)
    healthz = _free_port(10248)
    from flotilla.kwok.realnode import network
    (config / "kubelet.yaml").write_text(_render("kubelet.yaml", CGROUP_ROOT=CGROUP_ROOT, PORT=str(port),
                                                 HEALTHZ_PORT=str(healthz), MAX_PODS=str(MAX_PODS),
                                                 CLUSTER_DNS=network.dns_address(),
                                                 CLUSTER_DOMAIN=network.CLUSTER_DOMAIN, **common))


def _set_max_pods(rn: RealNode, max_pods: int) -> bool:
    """Write ``maxPods: max_pods`` into the kubelet's config (the rest of it, ports included, kept); False when
    it already says so."""
    path = rn.dir / "config" / "kubelet.yaml"
    lines = path.read_text().splitlines(keepends=True)
    at = [k for k, line in enumerate(lines) if line.startswith("maxPods:")]
    if len(at) != 1:
        raise RealNodeError(f"{path}: expected one maxPods line, found {len(at)}")
    line = f"maxPods: {max_pods}\n"
    if lines[at[0]] == line:
        return False
    lines[at[0]] = line
    path.write_text("".join(lines))
    return True


def _cgroup_hierarchies() -> list[Path]:
    """The cgroup v1 hierarchies (the kubelet's cgroupRoot must exist in each)."""
    out = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[2] == "cgroup":
            out.append(Path(parts[1]))
    return out


def _make_cgroups() -> None:
    for hierarchy in _cgroup_hierarchies():
        (hierarchy / CGROUP_ROOT.lstrip("/")).mkdir(exist_ok=True)


def _ctr(rn: RealNode, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    return _run(["ctr", "--address", str(rn.socket), "-n", "k8s.io", *args], timeout=timeout, check=check)


def _start_containerd(rn: RealNode) -> None:
    if _pid(rn, "containerd") is None:
        rn.socket.unlink(missing_ok=True)
        _spawn(rn, "containerd", ["containerd", "--config", str(rn.dir / "config" / "containerd.toml")])
    deadline = time.monotonic() + 30
    while _ctr(rn, "version", check=False, timeout=10).returncode != 0:
        if _pid(rn, "containerd") is None or time.monotonic() > deadline:
            raise RealNodeError(f"containerd did not start; its log ({rn.log_file('containerd')}):\n"
                                f"{_tail(rn.log_file('containerd'))}")
        time.sleep(0.05)


def _import_images(rn: RealNode) -> None:
    from flotilla.kwok.realnode.images import build_images

    have = set(_ctr(rn, "images", "ls", "-q").stdout.split())
    wanted = {IMAGE, PAUSE_IMAGE}
    if wanted <= have:
        return
    try:
        tars = build_images(rn.dir / "images", busybox_path(), HERE / "pause.c", IMAGE, PAUSE_IMAGE)
    except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
        raise RealNodeError(f"building the images: {exc}") from None
    for tar in tars:
        _ctr(rn, "images", "import", str(tar))
    have = set(_ctr(rn, "images", "ls", "-q").stdout.split())
    if not wanted <= have:
        raise RealNodeError(f"images not in containerd after import: {sorted(wanted - have)} (have {sorted(have)})")


def _start_cluster(rn: RealNode, bin_dir: Path) -> None:
    from flotilla.kwok.cluster import KwokError, up
    from flotilla.kwok.realnode.network import API_CLUSTER_IP

    try:
        # Pods reach the API server at the `kubernetes` Service's ClusterIP: its certificate must name it.
        up(CLUSTER, nodes=0, kubeconfig=str(rn.kubeconfig), bin_dir=bin_dir, timeout=120, kube_scheduler=True,
           disable_admission=DISABLED_ADMISSION, cert_sans=(API_CLUSTER_IP,), extra_args=[
            # kwokctl 0.8.0 keeps a component's patches at the position its first --extra-args had; the
            # cluster's own API server argument is the first, so a new component must come right after it.
            # kwokctl passes --manage-all-nodes=true; the later flag wins: only fake-annotated nodes are faked.
            "kwok-controller=manage-all-nodes=false",
            "kwok-controller=manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            # pods/log: the API server reaches the kubelet at the node's InternalIP (its name resolves nowhere).
            "kube-apiserver=kubelet-preferred-address-types=InternalIP",
        ])
    except KwokError as exc:
        raise RealNodeError(f"cluster {CLUSTER}: {exc}") from None


def _cluster_kubeconfig() -> Path:
    from flotilla.kwok.cluster import workdir
    return workdir(CLUSTER) / "kubeconfig.yaml"


def _start_controller_manager(rn: RealNode, bin_dir: Path) -> None:
    from flotilla.kwok.cluster import workdir

    if _pid(rn, "kube-controller-manager") is not None:
        return
    pki = workdir(CLUSTER) / "pki"
    _spawn(rn, "kube-controller-manager", [
        str(bin_dir / "kube-controller-manager"), "--kubeconfig", str(_cluster_kubeconfig()),
        f"--controllers={','.join(CONTROLLERS)}", "--leader-elect=false", "--secure-port=0",
        # The key kwokctl gives the API server to check service account tokens with (it signs with the same),
        # and the CA the ConfigMap kube-root-ca.crt publishes to every namespace.
        f"--service-account-private-key-file={pki / 'admin.key'}", f"--root-ca-file={pki / 'ca.crt'}",
        f"--node-monitor-period={MONITOR_PERIOD}", f"--node-monitor-grace-period={MONITOR_GRACE}", "--v=1"])


def start_kubelet(rn: RealNode | None = None, bin_dir: Path | None = None) -> bool:
    """Start the kubelet if it is not running (False if it was). Does not wait for the node to be Ready."""
    rn = rn or node()
    if _pid(rn, "kubelet") is not None:
        return False
    bin_dir = tools(bin_dir)
    _make_cgroups()
    _spawn(rn, "kubelet", [
        str(bin_dir / "kubelet"), "--config", str(rn.dir / "config" / "kubelet.yaml"),
        "--kubeconfig", str(_cluster_kubeconfig()), "--hostname-override", NODE, "--node-ip", node_ip(),
        "--root-dir", str(rn.dir / "kubelet"), "--cert-dir", str(rn.dir / "kubelet" / "pki"),
        "--node-labels", f"{NODE_LABEL}=true", "--v=1"])
    return True


def restart_kubelet(rn: RealNode | None = None, bin_dir: Path | None = None, max_pods: int | None = None,
                    timeout: float = 90.0) -> None:
    """Restart the kubelet with ``maxPods: max_pods`` in its config (:data:`MAX_PODS` when None), then wait
    until the node is Ready and its allocatable ``pods`` is ``max_pods``. A kubelet already running with that
    setting is left as it is. The pods on the node run on: the kubelet takes them up again."""
    rn = rn or node()
    max_pods = MAX_PODS if max_pods is None else max_pods
    if isinstance(max_pods, bool) or not isinstance(max_pods, int) or max_pods < 1:
        raise RealNodeError(f"maxPods must be a whole number of pods of at least 1, not {max_pods!r}")
    if not (rn.dir / "config" / "kubelet.yaml").exists():
        raise RealNodeError(f"no real node in {rn.dir} (scripts/real-node start)")
    with _locked(rn.dir):
        changed = _set_max_pods(rn, max_pods)
        if changed or _pid(rn, "kubelet") is None:
            _end(rn, "kubelet")
        kubelet_up(rn, bin_dir, timeout)
    _wait_pod_slots(rn, max_pods, timeout)


def _wait_pod_slots(rn: RealNode, max_pods: int, timeout: float) -> None:
    """Until the node object's allocatable ``pods`` is ``max_pods`` (the restarted kubelet's first status)."""
    from flotilla.kubernetes.client import KubeError

    client = rn.client()
    deadline = time.monotonic() + timeout
    seen = None
    try:
        while True:
            try:
                status = client.get(f"/api/v1/nodes/{NODE}").get("status") or {}
                seen = (status.get("allocatable") or {}).get("pods")
            except KubeError:
                pass
            if seen == str(max_pods):
                return
            if time.monotonic() > deadline:
                raise RealNodeError(f"node {NODE}: allocatable pods {seen} after {timeout:.0f}s, not {max_pods}; "
                                    f"the kubelet's log ({rn.log_file('kubelet')}):\n{_tail(rn.log_file('kubelet'))}")
            time.sleep(0.1)
    finally:
        client.close()


def kubelet_up(rn: RealNode | None = None, bin_dir: Path | None = None, timeout: float = 90.0) -> None:
    """Start the kubelet if it is not running and wait until the node is Ready. A kubelet this call started that
    exits within :data:`EARLY_EXIT` seconds is started once more, the reason of its first exit written to its
    log (and said on stderr); a second exit is an error naming its reason and the log."""
    rn = rn or node()
    began = time.monotonic()
    if not start_kubelet(rn, bin_dir):
        wait_ready(rn, timeout)
        return
    try:
        wait_ready(rn, timeout)
    except KubeletExited as exc:
        lived = time.monotonic() - began
        if lived > EARLY_EXIT:
            raise
        _note(rn, "kubelet", f"the kubelet exited {lived:.1f}s after its start ({exc.reason}); starting it once more")
        _say(f"the kubelet exited {lived:.1f}s after its start ({exc.reason}); starting it once more "
             f"(its log: {rn.log_file('kubelet')})")
        start_kubelet(rn, bin_dir)
        wait_ready(rn, timeout)


def stop_kubelet(rn: RealNode | None = None) -> bool:
    """Stop the kubelet alone (its containers keep running, as on a node whose kubelet died). False if not running."""
    return _end(rn or node(), "kubelet")


def node_condition(rn: RealNode, client=None) -> str | None:
    """The node's Ready condition status (``True``, ``False``, ``Unknown``), None while it is not registered."""
    from flotilla.kubernetes.client import ApiError

    own = client is None
    client = client or rn.client()
    try:
        obj = client.get(f"/api/v1/nodes/{NODE}")
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
    finally:
        if own:
            client.close()
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return cond.get("status")
    return None


def wait_ready(rn: RealNode, timeout: float = 90.0) -> None:
    from flotilla.kubernetes.client import KubeError

    client = rn.client()
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                if node_condition(rn, client) == "True":
                    return
            except KubeError:
                pass
            reason = _exit_reason(rn, "kubelet")
            if reason is None and _pid(rn, "kubelet") is None:
                # Ended between the two reads: the handle (if this process started it) holds the status now.
                reason = _exit_reason(rn, "kubelet") or "not started by this process: its exit status is unknown"
            if reason is not None:
                raise KubeletExited(rn, reason)
            if time.monotonic() > deadline:
                raise RealNodeError(f"node {NODE} not Ready after {timeout:.0f}s; the kubelet's log "
                                    f"({rn.log_file('kubelet')}):\n{_tail(rn.log_file('kubelet'))}")
            time.sleep(0.1)
    finally:
        client.close()


# -- start / stop ---------------------------------------------------------------------------------

def running(rn: RealNode | None = None) -> bool:
    """Every process of the node alive and the node Ready."""
    from flotilla.kwok.cluster import component_pid
    from flotilla.kubernetes.client import KubeError

    rn = rn or node()
    if not rn.kubeconfig.exists():
        return False
    if any(_pid(rn, c) is None for c in ("containerd", "kube-controller-manager", "kubelet")):
        return False
    from flotilla.kwok.realnode import network
    if not network.running(rn):
        return False
    if any(component_pid(CLUSTER, c) is None for c in ("etcd", "kube-apiserver", "kwok-controller",
                                                        "kube-scheduler")):
        return False
    try:
        return node_condition(rn) == "True"
    except KubeError:
        return False


def start(rn: RealNode | None = None, bin_dir: Path | None = None) -> RealNode:
    """Bring the node up (or whatever part of it is down); returns once ``real-1`` is Ready."""
    rn = rn or node()
    if os.geteuid() != 0:
        raise RealNodeError("the real node needs root (containerd, mounts, cgroups, iptables)")
    missing = missing_commands()
    if missing:
        raise RealNodeError(f"missing {', '.join(sorted(missing))}: install the Debian packages "
                            f"{' '.join(sorted(set(missing.values())))} (scripts/real-node does)")
    bin_dir = tools(bin_dir)
    rn.dir.mkdir(parents=True, exist_ok=True)
    with _locked(rn.dir):
        if running(rn):
            return rn
        timings: dict[str, float] = {}
        began = last = time.monotonic()

        def lap(phase: str) -> None:
            nonlocal last
            now = time.monotonic()
            timings[phase] = round(now - last, 2)
            last = now

        _write_configs(rn)
        _make_cgroups()
        _start_containerd(rn)
        lap("containerd")
        _import_images(rn)
        lap("images")
        _start_cluster(rn, bin_dir)
        lap("cluster")
        _start_controller_manager(rn, bin_dir)
        kubelet_up(rn, bin_dir)
        lap("kubelet")
        from flotilla.kwok.realnode import network
        network.start(rn, bin_dir)
        lap("network")
        timings["total"] = round(time.monotonic() - began, 2)
        (rn.dir / "timings.json").write_text(json.dumps({"time": time.time(), "phases": timings}) + "\n")
        _say(f"node {NODE} Ready in {timings['total']:.1f}s ({', '.join(f'{k} {v:.1f}s' for k, v in timings.items() if k != 'total')})")
    return rn


def _drain_node(rn: RealNode) -> None:
    """Delete the node's pods while the kubelet runs (it tears their sandboxes and networks down), then the node."""
    from flotilla.kubernetes.client import ApiError, KubeError, pod_path

    try:
        client = rn.client(timeout=5.0)
    except Exception:  # noqa: BLE001 - no usable kubeconfig: nothing to drain through
        return
    try:
        selector = {"fieldSelector": f"spec.nodeName={NODE}"}
        for pod in client.get("/api/v1/pods", **selector)["items"]:
            meta = pod["metadata"]
            try:
                client.delete(pod_path(meta["namespace"], meta["name"]), {"gracePeriodSeconds": 1})
            except ApiError:
                pass
        deadline = time.monotonic() + 30
        while client.get("/api/v1/pods", **selector)["items"] and time.monotonic() < deadline:
            time.sleep(0.2)
        try:
            client.delete(f"/api/v1/nodes/{NODE}")
        except ApiError:
            pass
    except KubeError:
        pass
    finally:
        client.close()


def _remove_containers(rn: RealNode) -> None:
    if not rn.socket.exists() or _pid(rn, "containerd") is None:
        return
    tasks = _ctr(rn, "tasks", "ls", "-q", check=False).stdout.split()
    for task in tasks:
        _ctr(rn, "tasks", "kill", "-s", "KILL", task, check=False)
    deadline = time.monotonic() + 10
    while _ctr(rn, "tasks", "ls", "-q", check=False).stdout.split() and time.monotonic() < deadline:
        time.sleep(0.1)
    for task in _ctr(rn, "tasks", "ls", "-q", check=False).stdout.split():
        _ctr(rn, "tasks", "rm", "-f", task, check=False)
    for container in _ctr(rn, "containers", "ls", "-q", check=False).stdout.split():
        _ctr(rn, "containers", "rm", container, check=False)


def _mounts_under(directory: Path) -> list[str]:
    prefix = str(directory).rstrip("/") + "/"
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        target = line.split()[4].replace("\\040", " ")
        if target.startswith(prefix) or target == str(directory):
            out.append(target)
    return out


def _unmount_all(directory: Path) -> list[str]:
    """Unmount everything under ``directory``, deepest first; what is still mounted after a lazy retry."""
    for target in sorted(set(_mounts_under(directory)), key=len, reverse=True):
        if subprocess.run(["umount", target], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", target], capture_output=True)
    return _mounts_under(directory)


def _remove_network() -> None:
    subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)
    # The bridge plugin's ipMasq adds one POSTROUTING rule and one CNI-<hash> chain per pod, commented with
    # the network's name; a sandbox not torn down by the plugin leaves them behind.
    saved = subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True).stdout
    tag = f'name: \\"{NETWORK}\\"'
    chains = set()
    for line in saved.splitlines():
        if tag not in line:
            continue
        chains.update(word for word in line.split() if word.startswith("CNI-"))
        if line.startswith("-A POSTROUTING "):
            _delete_rule(line)
    for chain in sorted(chains):
        subprocess.run(["iptables", "-t", "nat", "-F", chain], capture_output=True)
        subprocess.run(["iptables", "-t", "nat", "-X", chain], capture_output=True)


def _delete_rule(saved_line: str) -> None:
    """Delete one ``iptables-save`` rule line (``-A CHAIN ...``) from the nat table, quoting as the shell would."""
    import shlex
    args = shlex.split(saved_line)
    args[0] = "-D"
    subprocess.run(["iptables", "-t", "nat", *args], capture_output=True)


def _remove_cgroups() -> None:
    for hierarchy in _cgroup_hierarchies():
        root = hierarchy / CGROUP_ROOT.lstrip("/")
        if not root.is_dir():
            continue
        for path in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            try:
                path.rmdir()
            except OSError:
                pass
        try:
            root.rmdir()
        except OSError:
            pass


def stop(rn: RealNode | None = None, bin_dir: Path | None = None) -> list[str]:
    """Take everything ``start`` made down; returns what could not be removed (empty when all went)."""
    from flotilla.kwok.cluster import KwokError, down, workdir

    rn = rn or node()
    problems: list[str] = []
    with _locked(rn.dir):
        if _pid(rn, "kubelet") is not None:
            _drain_node(rn)
        _end(rn, "kubelet")
        from flotilla.kwok.realnode import network
        try:
            proxy_bin = tools(bin_dir)
        except RealNodeError:
            proxy_bin = None
        problems += network.stop(rn, proxy_bin)
        _end(rn, "kube-controller-manager")
        _remove_containers(rn)
        _end(rn, "containerd")
        if workdir(CLUSTER).exists():
            try:
                down(CLUSTER, kubeconfig=str(rn.kubeconfig), bin_dir=bin_dir)
            except (KwokError, OSError) as exc:
                problems.append(f"cluster {CLUSTER}: {exc}")
        left = _unmount_all(rn.dir)
        problems += [f"still mounted: {m}" for m in left]
        _remove_network()
        _remove_cgroups()
        if not left and rn.dir.exists():
            shutil.rmtree(rn.dir, ignore_errors=True)
    return problems


__all__ = ["CLUSTER", "CONTEXT", "IMAGE", "MAX_PODS", "NODE", "KubeletExited", "RealNode", "RealNodeError",
           "kubelet_up", "node", "node_condition", "restart_kubelet", "running", "start", "start_kubelet",
           "state_dir", "stop", "stop_kubelet", "wait_ready"]
