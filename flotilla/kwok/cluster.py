"""Fake Kubernetes clusters on this machine: kwokctl with our own binaries, nodes from a template.

``up`` runs ``kwokctl create cluster --runtime binary`` with the binaries
``scripts/k8s-tools`` builds (nothing is downloaded) and only three
components: etcd, kube-apiserver and kwok-controller. Flotilla binds pods
itself, so there is no kube-scheduler (``kube_scheduler=True`` adds one, the
baseline that Kubernetes' e2e tests compare Flotilla with); there is no controller-manager
either, so no namespace gets a ``default`` ServiceAccount: the API server
runs with the ServiceAccount admission plugin disabled, and without
TaintNodesByCondition (whose not-ready taint on new nodes only the node
controller would remove; kube-scheduler, the benchmark's baseline, heeds it).
Those two are :data:`DISABLED_ADMISSION`, ``up``'s default; a caller that runs
the controllers they need (the real node's cluster runs the ServiceAccount
controllers) passes its own ``disable_admission``. kwok-controller gets
our Stage documents (``flotilla/kwok/stages/*.yaml``): nodes become Ready at
once, pods Running at once and Succeeded after the duration the backend
writes on them, deleted pods go after their grace period.

With ``controllers`` (say :data:`JOB_CONTROLLERS`), ``up`` runs
kube-controller-manager too, with only those controllers: the Job
controller makes a ``batch/v1`` Job's pods, the garbage collector deletes
what a deleted owner leaves, the pod GC finishes deleted pods no kubelet
will (unscheduled ones). The rest stays off for the reasons above; without
the ServiceAccount admission plugin the controllers' pods need no
ServiceAccount either.

Then ``up`` creates N fake nodes (annotation ``kwok.x-k8s.io/node: fake``)
from a template and returns the kubeconfig and context to use.
"""

from __future__ import annotations

import copy
import os
import shutil
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
import yaml

log = structlog.get_logger("flotilla.kwok")

STAGES_DIR = Path(__file__).resolve().parent / "stages"
REPO = Path(__file__).resolve().parents[2]
TOOLS = ("etcd", "kube-apiserver", "kwok", "kwokctl")
#: What a cluster whose tests create ``batch/v1`` Jobs runs of kube-controller-manager.
JOB_CONTROLLERS = ("job", "garbagecollector", "podgc")
#: kube-controller-manager's flags besides ``--controllers``: one instance, so no leader election to wait
#: for; client limits well above its default 20 requests/s, or the Job controller making thousands of pods
#: (the benchmark's 10,000) would wait on its own rate limiter rather than on the API server.
CONTROLLER_MANAGER_ARGS = ("leader-elect=false", "kube-api-qps=2000", "kube-api-burst=4000",
                           "concurrent-job-syncs=20", "concurrent-gc-syncs=20")
DEFAULT_KUBECONFIG = "~/.kube/config"
#: The API server's admission plugins turned off unless ``up``'s caller says otherwise: ServiceAccount (no
#: serviceaccount controller makes namespaces' ``default`` ServiceAccount) and TaintNodesByCondition (no node
#: controller takes a new node's not-ready taint off again).
DISABLED_ADMISSION = ("ServiceAccount", "TaintNodesByCondition")

DEFAULT_NODE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "node-{index}",
        "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        "labels": {"type": "kwok", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"},
    },
    "status": {
        "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"},
        "capacity": {"cpu": "32", "memory": "128Gi", "pods": "110"},
    },
}


class KwokError(RuntimeError):
    """A fake cluster could not be started, reached or stopped; the message says what to do."""


@dataclass(frozen=True)
class FakeCluster:
    name: str
    kubeconfig: str
    context: str
    workdir: Path

    def client(self, **kwargs):
        from flotilla.kubernetes.client import KubeClient
        return KubeClient.from_kubeconfig(self.kubeconfig, self.context, **kwargs)


def workdir(name: str) -> Path:
    base = os.environ.get("KWOK_WORKDIR") or os.path.expanduser("~/.kwok")
    return Path(base) / "clusters" / name


def find_bin_dir(build: bool = True) -> Path:
    """Where the toolchain is: ``FLOTILLA_K8S_BIN``, else what ``scripts/k8s-tools`` prints (building if needed)."""
    env = os.environ.get("FLOTILLA_K8S_BIN")
    if env:
        path = Path(env).expanduser()
        missing = [t for t in TOOLS if not (path / t).exists()]
        if missing:
            raise KwokError(f"FLOTILLA_K8S_BIN={env} lacks {', '.join(missing)}; run scripts/k8s-tools")
        return path
    cache = Path(os.environ.get("FLOTILLA_K8S_CACHE") or os.path.expanduser("~/.cache/flotilla/k8s"))
    for candidate in sorted(cache.glob("*/bin"), reverse=True):
        if all((candidate / t).exists() for t in TOOLS):
            return candidate
    script = REPO / "scripts" / "k8s-tools"
    if build and script.exists():
        result = subprocess.run([str(script)], capture_output=True, text=True)
        lines = result.stdout.strip().splitlines()
        if result.returncode == 0 and lines:
            return Path(lines[-1])
        raise KwokError(f"scripts/k8s-tools failed ({result.returncode}): {result.stderr.strip()[-500:]}")
    raise KwokError("no Kubernetes toolchain found: run scripts/k8s-tools and set FLOTILLA_K8S_BIN to the "
                    "directory it prints last")


def _free_ports(count: int) -> list[int]:
    import random
    import socket

    ports: list[int] = []
    for _ in range(200):
        port = random.randint(20000, 29999)
        if port in ports:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("0.0.0.0", port))
            except OSError:
                continue
        ports.append(port)
        if len(ports) == count:
            return ports
    raise KwokError("no free ports found in 20000-29999")


def _run(args: list[str], timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """``args`` run to its end; one that takes longer than ``timeout`` is killed and is an error naming it and
    the end of what it said."""
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        said = "".join(part.decode(errors="replace") if isinstance(part, bytes) else part
                       for part in (exc.stdout, exc.stderr) if part)
        raise KwokError(f"{Path(args[0]).name} {' '.join(args[1:3])} did not finish in {timeout:.0f}s; "
                        f"its last output: {said.strip()[-1500:] or '(none)'}") from None


def _kwokctl_env(bin_dir: Path) -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


def load_node_template(path: str | os.PathLike | None) -> dict[str, Any]:
    """A Node manifest (``kind: Node``), or the short form ``{namePrefix, resources, labels, taints}``.

    In a manifest, ``{index}`` in ``metadata.name`` is replaced by 1..N
    (without it, ``-{index}`` is appended). The kwok annotation is always set.
    """
    if path is None:
        return copy.deepcopy(DEFAULT_NODE)
    data = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(data, dict):
        raise KwokError(f"{path}: expected a Node manifest or a mapping with resources/labels/taints")
    if data.get("kind") == "Node":
        node = copy.deepcopy(data)
    else:
        unknown = set(data) - {"namePrefix", "resources", "labels", "taints", "annotations"}
        if unknown:
            raise KwokError(f"{path}: unknown field(s) {', '.join(sorted(unknown))}; expected namePrefix, "
                            "resources, labels, taints, annotations (or a full Node manifest)")
        resources = {k: str(v) for k, v in (data.get("resources") or {"cpu": 32, "memory": "128Gi"}).items()}
        resources.setdefault("pods", "110")
        node = copy.deepcopy(DEFAULT_NODE)
        node["metadata"]["name"] = f"{data.get('namePrefix', 'node')}-{{index}}"
        node["metadata"]["labels"].update({str(k): str(v) for k, v in (data.get("labels") or {}).items()})
        node["metadata"]["annotations"].update({str(k): str(v) for k, v in (data.get("annotations") or {}).items()})
        node["status"] = {"allocatable": dict(resources), "capacity": dict(resources)}
        if data.get("taints"):
            node["spec"] = {"taints": [dict(t, effect=t.get("effect", "NoSchedule")) for t in data["taints"]]}
    meta = node.setdefault("metadata", {})
    meta.setdefault("annotations", {})["kwok.x-k8s.io/node"] = "fake"
    meta.pop("resourceVersion", None)
    meta.pop("uid", None)
    name = meta.get("name") or "node"
    if "{index}" not in name:
        meta["name"] = f"{name}-{{index}}"
    return node


def render_node(template: dict[str, Any], index: int) -> dict[str, Any]:
    node = copy.deepcopy(template)
    node["metadata"]["name"] = node["metadata"]["name"].replace("{index}", str(index))
    labels = node["metadata"].setdefault("labels", {})
    labels.setdefault("kubernetes.io/hostname", node["metadata"]["name"])
    return node


def create_nodes(client, template: dict[str, Any], count: int, start: int = 1, workers: int = 8) -> list[str]:
    """Create ``count`` nodes from ``template`` (existing ones are left as they are)."""
    from flotilla.kubernetes.client import ApiError

    def one(index: int) -> str:
        node = render_node(template, index)
        try:
            client.post("/api/v1/nodes", node)
        except ApiError as exc:
            if exc.status != 409:
                raise
        return node["metadata"]["name"]

    with ThreadPoolExecutor(max_workers=max(1, min(workers, count))) as pool:
        return list(pool.map(one, range(start, start + count)))


def wait_ready(client, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if client.request("GET", "/readyz", timeout=2.0) is not None:
                # The default namespace appears a moment after readyz on a fresh cluster.
                client.get("/api/v1/namespaces/default")
                return
        except Exception as exc:  # noqa: BLE001 - keep polling until the deadline
            last = exc
        time.sleep(0.2)
    raise KwokError(f"API server not ready after {timeout:.0f}s: {last}")


def wait_nodes_ready(client, names: list[str], timeout: float = 120.0) -> None:
    from flotilla.kubernetes.pods import node_ready

    want = set(names)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        items = client.get("/api/v1/nodes").get("items", [])
        ready = {n["metadata"]["name"] for n in items if node_ready(n)}
        if want <= ready:
            return
        time.sleep(0.3)
    raise KwokError(f"{len(want - ready)} of {len(want)} nodes not Ready after {timeout:.0f}s "
                    "(is kwok-controller running? see its log in the cluster's logs/ directory)")


def up(name: str, nodes: int = 0, node_template: str | os.PathLike | None = None,
       kubeconfig: str = DEFAULT_KUBECONFIG, bin_dir: Path | None = None, timeout: float = 180.0,
       extra_args: list[str] = (), controllers: tuple[str, ...] = (), kube_scheduler: bool = False,
       cert_sans: tuple[str, ...] = (), disable_admission: tuple[str, ...] = DISABLED_ADMISSION) -> FakeCluster:
    """Create (or reuse, if it is already running) the fake cluster ``name`` with ``nodes`` nodes.

    ``controllers``: kube-controller-manager's controllers to run (none: no
    controller-manager). ``kube_scheduler``: run kube-scheduler too (the
    baseline Flotilla is compared with). ``cert_sans``: names and addresses the
    API server's serving certificate covers besides those kwokctl puts there
    (this machine's addresses, ``localhost``, ``kubernetes.default.svc...``),
    say the ``kubernetes`` Service's ClusterIP for clients in pods.
    ``disable_admission``: the API server's admission plugins to turn off
    (:data:`DISABLED_ADMISSION` unless the cluster runs the controllers they
    need). A cluster that exists keeps what it was created with.
    """
    bin_dir = bin_dir or find_bin_dir()
    kubeconfig_path = os.path.expanduser(kubeconfig)
    Path(kubeconfig_path).parent.mkdir(parents=True, exist_ok=True)
    template = load_node_template(node_template)
    wd = workdir(name)
    cluster = FakeCluster(name, kubeconfig_path, f"kwok-{name}", wd)
    if (wd / "kubeconfig.yaml").exists():
        # Already created: start whatever is stopped.
        start(name, bin_dir, timeout)
        _add_nodes(cluster, template, nodes, timeout)
        return cluster
    for attempt in (1, 2):
        _create(name, kubeconfig_path, bin_dir, timeout, extra_args, controllers, kube_scheduler, cert_sans,
                disable_admission)
        try:
            _add_nodes(cluster, template, nodes, timeout)
            return cluster
        except KwokError as exc:
            # Two clusters created at the same moment (say, two test sessions) can pick the same free port.
            detail = f"{exc}\n{_log_tails(name)}"
            down(name, kubeconfig_path, bin_dir)
            if attempt == 2:
                raise KwokError(detail) from None
    return cluster


def _create(name: str, kubeconfig_path: str, bin_dir: Path, timeout: float, extra_args,
            controllers: tuple[str, ...] = (), kube_scheduler: bool = False, cert_sans: tuple[str, ...] = (),
            disable_admission: tuple[str, ...] = DISABLED_ADMISSION) -> None:
    wd = workdir(name)
    config = wd.parent.parent / f"flotilla-{name}-stages.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    documents = [p.read_text() for p in sorted(STAGES_DIR.glob("*.yaml"))]
    if cert_sans:
        documents.append(_kwokctl_options({"kubeApiserverCertSANs": list(cert_sans)}))
    config.write_text("\n---\n".join(documents))
    ports = _free_ports(3)
    args = [str(bin_dir / "kwokctl"), "--name", name, "-c", str(config), "create", "cluster",
            "--runtime", "binary",
            "--components", "etcd,kube-apiserver,kwok-controller",
            "--kube-apiserver-binary", str(bin_dir / "kube-apiserver"),
            "--etcd-binary", str(bin_dir / "etcd"),
            "--kwok-controller-binary", str(bin_dir / "kwok"),
            "--kubeconfig", kubeconfig_path,
            # Ports of our choosing, away from those kwokctl hands out (counting down from 32767): a stopped
            # API server finds its port free when started again, and clusters created at once do not collide.
            "--kube-apiserver-port", str(ports[0]), "--etcd-port", str(ports[1]), "--controller-port", str(ports[2]),
            "--timeout", f"{int(timeout)}s", "--wait", f"{int(timeout)}s"]
    bad = [p for p in disable_admission if not p.isalnum()]
    if bad:
        raise KwokError(f"not an admission plugin name: {', '.join(bad)}")
    if disable_admission:
        # The API server's first --extra-args: kwokctl 0.8 orders components' patches by their first one.
        args += ["--extra-args", f"kube-apiserver=disable-admission-plugins={','.join(disable_admission)}"]
    if controllers:
        unknown = [c for c in controllers if not c.replace("-", "").isalnum()]
        if unknown:
            raise KwokError(f"not a controller name: {', '.join(unknown)}")
        kcm = bin_dir / "kube-controller-manager"
        if not kcm.exists():
            raise KwokError(f"{kcm} missing; run scripts/k8s-tools")
        args[args.index("--components") + 1] += ",kube-controller-manager"
        args += ["--kube-controller-manager-binary", str(kcm)]
        # Right after the API server's: kwokctl 0.8 orders components' patches by their first --extra-args.
        args += ["--extra-args", f"kube-controller-manager=controllers={','.join(controllers)}"]
        for flag in CONTROLLER_MANAGER_ARGS:
            args += ["--extra-args", f"kube-controller-manager={flag}"]
    if kube_scheduler:
        scheduler = bin_dir / "kube-scheduler"
        if not scheduler.exists():
            raise KwokError(f"{scheduler} missing; run scripts/k8s-tools")
        args[args.index("--components") + 1] += ",kube-scheduler"
        args += ["--kube-scheduler-binary", str(scheduler)]
    for extra in extra_args:
        args += ["--extra-args", extra]
    result = _run(args, timeout=timeout + 30, env=_kwokctl_env(bin_dir))
    if result.returncode != 0:
        raise KwokError(f"kwokctl create cluster --name {name} failed ({result.returncode}): "
                        f"{result.stderr.strip()[-1500:]}")


def _kwokctl_options(options: dict) -> str:
    """A KwokctlConfiguration document with these options (kwokctl's defaults for the rest)."""
    import json
    return ("apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokctlConfiguration\n"
            f"options: {json.dumps(options)}\n")


def _add_nodes(cluster: FakeCluster, template: dict, nodes: int, timeout: float) -> None:
    client = cluster.client()
    try:
        wait_ready(client, min(timeout, 60))
        if nodes:
            names = create_nodes(client, template, nodes)
            wait_nodes_ready(client, names, min(timeout, 60 + nodes / 20))
    finally:
        client.close()


def _log_tails(name: str, lines: int = 3) -> str:
    out = []
    for log in sorted((workdir(name) / "logs").glob("*.log")):
        try:
            tail = log.read_text(errors="replace").strip().splitlines()[-lines:]
        except OSError:
            continue
        out.append(f"{log.name}: " + " | ".join(line[:300] for line in tail))
    return "\n".join(out)


def down(name: str, kubeconfig: str = DEFAULT_KUBECONFIG, bin_dir: Path | None = None) -> bool:
    """Delete the fake cluster ``name`` (processes, data, and its context in ``kubeconfig``). False if there was none.

    The processes are ended by :func:`stop_processes` first, each checked to be
    the component its pid file names; ``kwokctl delete cluster``, which kills
    whatever pid its pid files hold, then finds none left to kill.
    """
    wd = workdir(name)
    if not wd.exists():
        return False
    bin_dir = bin_dir or find_bin_dir(build=False)
    stop_processes(name)
    result = _run([str(bin_dir / "kwokctl"), "--name", name, "delete", "cluster",
                   "--kubeconfig", os.path.expanduser(kubeconfig)], timeout=120, env=_kwokctl_env(bin_dir))
    if result.returncode != 0:
        raise KwokError(f"kwokctl delete cluster --name {name} failed: {result.stderr.strip()[-800:]}")
    if wd.exists():
        shutil.rmtree(wd, ignore_errors=True)
    return True


@dataclass(frozen=True)
class ReusedPid:
    """A pid file naming a live process that is not the component it was written for: its pid was reused."""
    component: str
    pid: int
    cmdline: str


def stop_processes(name: str, timeout: float = 10.0) -> list[ReusedPid]:
    """Kill the running components of cluster ``name`` (SIGKILL, as ``kwokctl delete`` does) and remove every pid file.

    A pid is killed only when its process runs the command line kwokctl
    recorded for that component (``kwok.yaml``): the binary's link in the
    cluster's own ``bin/``, with the same arguments. A cluster whose session died may
    have left pid files whose pids the system has since given to other
    processes; those are left running, logged (``kwok.pid_reused``) and
    returned. Pid files of processes gone are removed too, so that nothing
    later kills by them.
    """
    pids = workdir(name) / "pids"
    if not pids.is_dir():
        return []
    expected = _expected_argvs(name)
    reused: list[ReusedPid] = []
    files = sorted(pids.glob("*.pid"), key=lambda path: _order(expected, path.stem), reverse=True)
    for path in files:
        pid, other = _checked_pid(name, path.stem)
        if pid is not None:
            stop_process(pid, signal.SIGKILL, timeout)
        elif other is not None:
            reused.append(_reused(name, path.stem, *other))
        path.unlink(missing_ok=True)
    return reused


def _reused(name: str, component: str, pid: int, argv: list[str]) -> ReusedPid:
    found = ReusedPid(component, pid, " ".join(argv)[:300])
    log.warning("kwok.pid_reused", cluster=name, component=component, pid=pid, cmdline=found.cmdline,
                action="left running")
    return found


def _order(expected: dict[str, list[str]], component: str) -> int:
    """A component's place in kwok.yaml (components stop in reverse: kwok-controller first, etcd last)."""
    return list(expected).index(component) if component in expected else -1


def _expected_argvs(name: str) -> dict[str, list[str]]:
    """Each component's command line as kwokctl starts it (binary, then arguments), by its pid file's name."""
    try:
        components = _components(name)
    except (KwokError, OSError, yaml.YAMLError):
        return {}
    return {Path(c["binary"]).name: [c["binary"], *(str(a) for a in c.get("args") or ())]
            for c in components if c.get("binary")}


def _read_pid(path: Path) -> int | None:
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if pid > 0 else None


def process_argv(pid: int) -> list[str] | None:
    """The command line of process ``pid`` from ``/proc`` (None when it is gone or cannot be read)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [arg.decode("utf-8", "surrogateescape") for arg in raw.split(b"\0")[:-1]]


def stop_process(pid: int, first: signal.Signals, timeout: float) -> None:
    """Send ``first``, then SIGKILL if the process still runs ``timeout`` s later; return once it is gone, or
    ``timeout`` s after the SIGKILL (a process stuck in the kernel), logging that it is not."""
    for sig in dict.fromkeys((first, signal.SIGKILL)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout
        while process_alive(pid):
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        else:
            return
    log.warning("kwok.process_not_ended", pid=pid, cmdline=" ".join(process_argv(pid) or ())[:300])


def process_alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped (kwokctl would take a zombie for a running process)."""
    try:
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our child
    except ChildProcessError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def component_pid(name: str, component: str) -> int | None:
    """The pid of ``component`` of cluster ``name`` while it runs: the pid file's process, alive and running the
    command line kwokctl recorded for the component (a pid since reused by another process is not it)."""
    pid, _ = _checked_pid(name, component)
    return pid


def _checked_pid(name: str, component: str) -> tuple[int | None, tuple[int, list[str]] | None]:
    """The component's pid if it runs, else None and, when the pid file names a live process that is not the
    component, that pid and its command line."""
    pid = _read_pid(workdir(name) / "pids" / f"{component}.pid")
    argv = process_argv(pid) if pid is not None and process_alive(pid) else None
    if argv is None:
        return None, None
    if argv == _expected_argvs(name).get(component):
        return pid, None
    return None, (pid, argv)


def stop_component(name: str, component: str = "kube-apiserver", timeout: float = 5.0) -> bool:
    """Stop one component of the fake cluster (SIGTERM, SIGKILL after ``timeout`` s); ``start`` brings it back.

    False if it was not running. A pid file naming another process (its pid
    reused) is removed and that process left alone, logged (``kwok.pid_reused``).
    """
    pid, other = _checked_pid(name, component)
    path = workdir(name) / "pids" / f"{component}.pid"
    if pid is None:
        if other is not None:
            _reused(name, component, other[0], other[1])
            path.unlink(missing_ok=True)
        return False
    stop_process(pid, signal.SIGTERM, timeout)
    path.unlink(missing_ok=True)
    return True


def _components(name: str) -> list[dict]:
    path = workdir(name) / "kwok.yaml"
    if not path.exists():
        raise KwokError(f"no fake cluster {name!r} (no {path}); create it with `flotilla kwok up --name {name}`")
    for doc in yaml.safe_load_all(path.read_text()):
        if isinstance(doc, dict) and doc.get("kind") == "KwokctlConfiguration":
            return doc.get("components") or []
    raise KwokError(f"{path} has no KwokctlConfiguration")


def start_component(name: str, component: str) -> bool:
    """Start one stopped component with the command line kwokctl recorded for it. False if it was running."""
    if component_pid(name, component) is not None:
        return False
    spec = next((c for c in _components(name) if c.get("name") == component), None)
    if spec is None:
        raise KwokError(f"cluster {name} has no component {component}")
    wd = workdir(name)
    env = dict(os.environ)
    env.update({e["name"]: e.get("value", "") for e in spec.get("envs") or ()})
    with open(wd / "logs" / f"{component}.log", "ab") as log:
        proc = subprocess.Popen([spec["binary"], *(spec.get("args") or [])], cwd=spec.get("workDir") or wd,
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env)
    (wd / "pids" / f"{component}.pid").write_text(str(proc.pid))
    return True


def start(name: str, bin_dir: Path | None = None, timeout: float = 120.0) -> list[str]:
    """Start whatever components of ``name`` are stopped (etcd first) and wait for its API server."""
    started = []
    for spec in _components(name):
        if start_component(name, spec["name"]):
            started.append(spec["name"])
    kubeconfig = workdir(name) / "kubeconfig.yaml"
    from flotilla.kubernetes.client import KubeClient
    client = KubeClient.from_kubeconfig(str(kubeconfig), None)
    try:
        wait_ready(client, timeout)
    finally:
        client.close()
    return started


__all__ = ["DISABLED_ADMISSION", "FakeCluster", "JOB_CONTROLLERS", "KwokError", "ReusedPid", "create_nodes", "down", "find_bin_dir",
           "load_node_template", "process_alive", "process_argv", "render_node", "start", "start_component",
           "stop_component", "stop_process", "stop_processes", "up", "wait_nodes_ready", "wait_ready"]
