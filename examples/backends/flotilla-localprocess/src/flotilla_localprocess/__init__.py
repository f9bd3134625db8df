"""A Flotilla cluster backend that runs every job as a process on this machine (``kind: localprocess``).

Each pod placed on the cluster runs its container's command as a
local process (a pod of several containers fails, saying so): ``command`` followed by ``args`` (an image's entrypoint is
not known here, so a container with ``args`` alone runs ``args``),
in its ``workingDir``, with the service's environment and the container's
``env`` values. Its output (stdout and stderr, interleaved) goes to a file
that ``flotilla logs`` reads. Exit code 0 is ``succeeded``; any other is
``failed`` with that exit code; a process killed by a signal fails with exit
code 128 + the signal, as a container runtime reports it. A stop (cancel,
preemption) sends SIGTERM to the process's group, then SIGKILL after the
job's grace period.

The image is not pulled and nothing is isolated: this is for trying
Flotilla out with commands that really run, and the smallest complete
example of a backend package (docs/backends.md). The nodes are only a
budget: ``nodes`` of ``resources`` each, which the scheduler fills.

Config::

    clusters:
      - name: here
        kind: localprocess
        args: {nodes: 2, resources: {cpu: 4, memory: 8Gi}, logDir: /var/tmp/flotilla-logs}
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator, Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator

from flotilla.backend import (HOSTNAME_LABEL, ClusterDecisions, ClusterSnapshot, Job, JobEvent, JobState, Node,
                              QuantityError, parse_quantity)

#: A stopped job's grace period when its stop does not say (Kubernetes' default terminationGracePeriodSeconds).
DEFAULT_GRACE = 30.0
#: The annotation a stop carries its job's grace period in, in seconds.
GRACE_ANNOTATION = "flotilla.io/grace-period"
#: How often a followed log looks for more output.
FOLLOW_POLL = 0.2
CHUNK = 64 * 1024


class Args(BaseModel):
    """The cluster's ``args:``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    #: How many nodes the cluster has; each is one budget of ``resources``.
    nodes: int = Field(1, ge=1, le=1000)
    #: What one node holds (Kubernetes quantities).
    resources: dict[str, Any] = Field(default_factory=lambda: {"cpu": "4", "memory": "8Gi"})
    #: Where the processes' output is written (default: a new temporary directory).
    log_dir: str | None = Field(None, alias="logDir")

    @field_validator("resources")
    @classmethod
    def _quantities(cls, value: dict[str, Any]) -> dict[str, int]:
        out = {}
        for name, amount in value.items():
            try:
                out[name] = parse_quantity(amount, name)
            except QuantityError as exc:
                raise ValueError(f"{name}: {exc}") from None
        return out


@dataclass
class _Run:
    job: Job
    process: subprocess.Popen


class LocalProcessCluster:
    """One ``kind: localprocess`` cluster (see the module docstring)."""

    Args = Args
    #: Starts come with the user's podSpecs: the command to run is there.
    needs_templates = True

    def __init__(self, name: str, args: Args | None, options: Mapping[str, Any]):
        args = args or Args()
        self.name = name
        self.clock = options.get("clock") or time.time
        self.nodes = [Node(f"{name}-{i}", name, dict(args.resources), {HOSTNAME_LABEL: f"{name}-{i}"})
                      for i in range(1, args.nodes + 1)]
        self.log_dir = Path(args.log_dir) if args.log_dir else Path(tempfile.mkdtemp(prefix=f"flotilla-{name}-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._runs: dict[str, _Run] = {}                       # pod id -> its running process
        self._stopping: list[tuple[subprocess.Popen, float]] = []   # stopped processes, SIGKILLed at that time
        self._logs: dict[str, Path] = {}                        # pod id -> its output, kept after it ends
        self._events: list[JobEvent] = []

    # -- the backend protocol ------------------------------------------------------------
    def snapshot(self) -> ClusterSnapshot:
        with self._lock:
            self._reap()
            return ClusterSnapshot(self.name, list(self.nodes), [run.job for run in self._runs.values()])

    def apply(self, decisions: ClusterDecisions) -> None:
        now = self.clock()
        with self._lock:
            for job in decisions.preempt:
                self._stop(job, "preempted", "preempted by the scheduler", now)
            for job in decisions.cancel:
                self._stop(job, "cancelled", "cancelled", now)
            for placement in decisions.start:
                self._start(placement.job, placement.node, decisions.templates.get(placement.job.id), now)

    def poll_events(self) -> list[JobEvent]:
        with self._lock:
            self._reap()
            events, self._events = self._events, []
        return events

    # -- capabilities ----------------------------------------------------------------------
    def job_log(self, pod_id: str, tail: int | None, follow: bool) -> Iterator[bytes]:
        """The pod's output (the JobLogs capability); LookupError when it never started here."""
        with self._lock:
            path = self._logs.get(pod_id)
        if path is None:
            raise LookupError(f"no output: the pod has not started on cluster {self.name!r} since the service "
                              f"started")
        return self._read(pod_id, path, tail, follow)

    def close(self) -> None:
        """Kill every process still running (the Closable capability: the service is stopping)."""
        with self._lock:
            processes = [run.process for run in self._runs.values()] + [p for p, _ in self._stopping]
            self._runs.clear()
            self._stopping.clear()
        for process in processes:
            _signal(process, signal.SIGKILL)
            process.wait()

    # -- inside ----------------------------------------------------------------------------
    def _start(self, job: Job, node: str, template, now: float) -> None:
        log_path = self.log_dir / f"{job.id.replace('#', '-')}.log"
        self._logs[job.id] = log_path
        try:
            argv, env, cwd = _command(template)
        except ValueError as exc:
            log_path.write_text(f"{exc}\n")
            self._events.append(JobEvent(job.id, "failed", self.name, node, now, str(exc)))
            return
        with open(log_path, "wb") as out:
            try:
                process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                           cwd=cwd, env=env, start_new_session=True)
            except OSError as exc:
                why = f"cannot run {argv[0]!r}: {exc.strerror or exc}"
                out.write(f"{why}\n".encode())
                self._events.append(JobEvent(job.id, "failed", self.name, node, now, why))
                return
        running = replace(job, state=JobState.RUNNING, cluster=self.name, node=node)
        self._runs[job.id] = _Run(running, process)
        self._events.append(JobEvent(job.id, "running", self.name, node, now))

    def _stop(self, job: Job, kind: str, reason: str, now: float) -> None:
        run = self._runs.pop(job.id, None)
        if run is None:
            return
        _signal(run.process, signal.SIGTERM)
        try:
            grace = float(job.annotations.get(GRACE_ANNOTATION, DEFAULT_GRACE))
        except ValueError:
            grace = DEFAULT_GRACE
        self._stopping.append((run.process, time.monotonic() + grace))
        self._events.append(JobEvent(job.id, kind, self.name, run.job.node, now, reason))

    def _reap(self) -> None:
        """Events for processes that ended; SIGKILL for stopped ones past their grace period."""
        now = self.clock()
        for pod_id in sorted(pod for pod, run in self._runs.items() if run.process.poll() is not None):
            run = self._runs.pop(pod_id)
            code = run.process.returncode
            if code < 0:   # killed by a signal: reported as a container runtime does
                code = 128 - code
            if code == 0:
                self._events.append(JobEvent(pod_id, "succeeded", self.name, run.job.node, now))
            else:
                self._events.append(JobEvent(pod_id, "failed", self.name, run.job.node, now, f"exited {code}",
                                             code))
        still = []
        for process, kill_at in self._stopping:
            if process.poll() is None:
                if time.monotonic() >= kill_at:
                    _signal(process, signal.SIGKILL)
                still.append((process, kill_at))
        self._stopping = still

    def _running(self, pod_id: str) -> bool:
        with self._lock:
            run = self._runs.get(pod_id)
            return run is not None and run.process.poll() is None

    def _read(self, pod_id: str, path: Path, tail: int | None, follow: bool) -> Iterator[bytes]:
        with open(path, "rb") as log:
            if tail is not None:
                lines = log.read().splitlines(keepends=True)
                yield b"".join(lines[len(lines) - tail:] if tail else [])
            while True:
                chunk = log.read(CHUNK)
                if chunk:
                    yield chunk
                    continue
                if not follow or not self._running(pod_id):
                    rest = log.read()   # what it wrote before it ended
                    if rest:
                        yield rest
                    return
                yield b""   # nothing new yet: a reader that went away can stop here
                time.sleep(FOLLOW_POLL)


def _command(template) -> tuple[list[str], dict[str, str], str | None]:
    """The process of a pod: argv, environment and working directory, from its first container."""
    if template is None:
        raise ValueError("the job has no podSpec: nothing to run")
    containers = template.pod_spec.get("containers") or [{}]
    if len(containers) > 1:
        raise ValueError(f"the pod has {len(containers)} containers: a local process runs one")
    container = containers[0]
    argv = [str(part) for part in (container.get("command") or [])] + [str(part) for part in
                                                                       (container.get("args") or [])]
    if not argv:
        raise ValueError("containers[0] has no command or args: a local process runs command + args")
    env = dict(os.environ)
    for e, item in enumerate(container.get("env") or []):
        if "valueFrom" in item:
            raise ValueError(f"containers[0].env[{e}].valueFrom: a local process takes only env values")
        env[item["name"]] = str(item.get("value", ""))
    return argv, env, container.get("workingDir")


def _signal(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


__all__ = ["Args", "LocalProcessCluster"]
