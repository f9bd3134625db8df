"""The node's processes, as every part starts and ends them: spawned in their own session with their pid and
command line recorded, told apart from whatever later holds their pid, ended by that record (and, for the
components of :data:`STRAYS`, wherever they run from the state directory).

``pid`` is a component's pid only while the recorded process still runs the
recorded command line; ``end`` signals nothing else. A process this one
started keeps its handle (:data:`children`), so how it ended
(``exit_reason``) is known even after it is gone.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from flotilla.kwok.realnode.layout import RealNode, RealNodeError

#: The components stopped wherever they run from the state directory, pid file or not (:func:`strays`).
STRAYS = ("kubelet", "containerd", "kube-proxy", "coredns")

#: The processes this one started, by state directory and component: how one ended is read from its handle
#: (once something else reaps it, its exit status is gone).
children: dict[tuple[Path, str], subprocess.Popen] = {}


@contextmanager
def locked(directory: Path):
    """One start or stop at a time on this machine (the lock file sits beside the directory, which stop removes)."""
    lock = directory.with_name(directory.name + ".lock")
    with open(lock, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def say(message: str) -> None:
    print(f"real-node: {message}", file=sys.stderr, flush=True)


def alive(pid: int) -> bool:
    from flotilla.kwok.cluster import process_alive
    return process_alive(pid)


def pid(rn: RealNode, component: str) -> int | None:
    """The component's pid while it runs: the recorded pid, alive and running the command line it was started
    with (a pid the system has since given to another process is not the component)."""
    found, _ = checked_pid(rn, component)
    return found


def checked_pid(rn: RealNode, component: str) -> tuple[int | None, list[str] | None]:
    """The component's pid, else None and, when the pid file names a live process that is something else, its
    command line."""
    from flotilla.kwok.cluster import process_argv

    try:
        recorded = int(rn.pid_file(component).read_text().strip())
    except (OSError, ValueError):
        return None, None
    proc = children.get((rn.dir, component))
    if proc is not None and proc.pid == recorded:
        # A child of this process: alive by its handle alone, which reaps it keeping its exit status (the
        # waitpid in alive() would take that status from the handle).
        running = proc.poll() is None
    else:
        running = recorded > 0 and alive(recorded)
    argv = process_argv(recorded) if running else None
    if argv is None:
        return None, None
    return (recorded, None) if started_as(rn, component, argv) else (None, argv)


def started_as(rn: RealNode, component: str, argv: list[str]) -> bool:
    """Whether ``argv`` is the command line ``component`` was started with (``pids/COMPONENT.argv``); a state
    directory without that record is checked by the binary's name alone."""
    try:
        recorded = json.loads(rn.argv_file(component).read_text())
    except (OSError, ValueError):
        return bool(argv) and Path(argv[0]).name == component
    return argv == recorded


def spawn(rn: RealNode, component: str, argv: list[str]) -> int:
    """Start ``argv`` in its own session (it outlives this process), logging to ``logs/COMPONENT.log``; the pid
    and the command line are recorded, so that the pid is only ever signalled while it is this process."""
    with open(rn.log_file(component), "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=rn.dir)
    children[(rn.dir, component)] = proc
    rn.argv_file(component).write_text(json.dumps(argv))
    rn.pid_file(component).write_text(str(proc.pid))
    return proc.pid


def exit_reason(rn: RealNode, component: str) -> str | None:
    """How the component this process started ended (``exit status 1``, ``killed by SIGKILL``); None while it
    runs or when this process did not start it."""
    proc = children.get((rn.dir, component))
    code = None if proc is None else proc.poll()
    if code is None:
        return None
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def note(rn: RealNode, component: str, message: str) -> None:
    """A line of the node's own in the component's log, between the lines of the process itself."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with open(rn.log_file(component), "a") as log:
        log.write(f"real-node {stamp}: {message}\n")


def end(rn: RealNode, component: str, timeout: float = 15.0) -> bool:
    """SIGTERM the recorded process, SIGKILL after ``timeout`` s; False if it was not running.

    A pid file naming another process (its pid reused) is removed and that
    process left alone, saying so.
    """
    from flotilla.kwok.cluster import stop_process

    recorded, other = checked_pid(rn, component)
    children.pop((rn.dir, component), None)
    if other is not None:
        say(f"{component}: pid file {rn.pid_file(component)} names another process ({' '.join(other)[:200]}); "
            "left running")
    rn.pid_file(component).unlink(missing_ok=True)
    rn.argv_file(component).unlink(missing_ok=True)
    others = [found for found in strays(rn, component) if found != recorded] if component in STRAYS else []
    for found in others:
        say(f"{component}: pid {found} runs from {rn.dir} without its pid file there; stopping it too")
        stop_process(found, signal.SIGTERM, timeout)
    if recorded is None:
        return bool(others)
    stop_process(recorded, signal.SIGTERM, timeout)
    return True


def strays(rn: RealNode, component: str) -> list[int]:
    """The live processes of ``component`` (its binary's name) whose command line names the state directory or a
    path in it (``--root-dir DIR/kubelet``, ``--config=DIR/config/containerd.toml``), by pid, this one excepted."""
    from flotilla.kwok.cluster import process_argv

    root = str(rn.dir).rstrip("/")
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        number = int(entry.name)
        argv = process_argv(number)
        if not argv or Path(argv[0]).name != component:
            continue
        for arg in argv[1:]:
            value = arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg
            if value == root or value.startswith(root + "/"):
                if alive(number):
                    found.append(number)
                break
    return sorted(found)


def run(argv: list[str], timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    """Run a short command to its end, its output captured; an error naming it when it cannot run or (``check``)
    fails."""
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RealNodeError(f"{' '.join(argv)}: {exc}") from None
    if check and result.returncode != 0:
        raise RealNodeError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()[-800:]}")
    return result


def tail(path: Path, lines: int = 15) -> str:
    """The last lines of a log, for an error message (``(empty)``, ``(no log)`` when there are none)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) or "(empty)"
    except OSError:
        return "(no log)"
