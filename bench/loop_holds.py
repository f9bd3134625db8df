"""The longest holds of the interpreter lock while the service handles each attack's body, in CPU time.

A thread handling a large body lets the event loop run only between its
steps: a single C call (a regex over a window, a JSON parse, a pydantic
validation, a garbage collection pass) holds the interpreter lock from its
start to its end. This runs what ``serve`` runs for each body of
bench/service_attacks.py (``bounds.load_json``, ``job_file_in_steps`` and
``validate_jobs``, with full collections deferred as the service defers
them, after ``gc.freeze()`` as ``serve`` does at start) and prints the
longest C calls and collection passes, measured in the thread's CPU time,
so the figures do not depend on how loaded the machine is (wall-clock
latencies under attack are bench/service_attacks.py's). A benchmark: it
asserts nothing.

    python bench/loop_holds.py [--top 3]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from flotilla.config import parse_config  # noqa: E402
from flotilla.service import bounds  # noqa: E402
from flotilla.service.collection import full_collections_deferred  # noqa: E402
from flotilla.service.jobspec import job_file_in_steps, validate_jobs  # noqa: E402
from flotilla.service.settings import from_config  # noqa: E402
from service_fixtures import CONFIG, job, job_file  # noqa: E402

MIB16 = 16 * 1024 * 1024


def held(work, top: int) -> tuple[float, list[tuple[float, str]], float, int]:
    """Run ``work()``: (CPU seconds in all, the ``top`` longest C calls, the longest collection pass, passes)."""
    calls: list[tuple[float, str]] = []
    started: list[float] = []
    passes: list[float] = []
    pass_start = [0.0]

    def profile(frame, event, arg):
        if event == "c_call":
            started.append(time.thread_time())
        elif event in ("c_return", "c_exception") and started:
            took = time.thread_time() - started.pop()
            if took > 0.0005:
                calls.append((took, f"{getattr(arg, '__qualname__', repr(arg))} in {frame.f_code.co_name}"))

    def collected(phase, info):
        if phase == "start":
            pass_start[0] = time.thread_time()
        else:
            passes.append(time.thread_time() - pass_start[0])

    gc.callbacks.append(collected)
    begin = time.thread_time()
    sys.setprofile(profile)
    try:
        work()
    except bounds.BoundsError:
        pass
    finally:
        sys.setprofile(None)
        gc.callbacks.remove(collected)
    total = time.thread_time() - begin
    # ``any`` and the like wrap Python code that lets the lock go: only calls into code that holds it count.
    calls = [c for c in calls if not c[1].startswith(("any ", "Context.run", "next "))]
    return total, sorted(calls, reverse=True)[:top], max(passes, default=0.0), len(passes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--top", type=int, default=3)
    args = parser.parse_args(argv)
    settings = from_config(parse_config(CONFIG, "bench.yaml"))
    jobs_body = json.dumps(job_file("A", "big", [job(f"c{i}", cpu="100") for i in range(10_000)])).encode()
    string_body = b'"' + b"a" * (MIB16 - 16) + b'"'
    head = b'{"queue": "A", "jobSetId": "s", "jobs": [{"podSpec": {"containers": [{"name": "m", "args": ["'
    field_body = head + b"a" * (MIB16 - len(head) - 8) + b'"]}]}}]}'

    def submission(body: bytes):
        def handle():
            with full_collections_deferred():
                validate_jobs(job_file_in_steps(bounds.load_json(body)), settings)
        return handle

    cases = {"16 MiB JSON string": lambda: bounds.load_json(string_body),
             "16 MiB string in a field": lambda: bounds.load_json(field_body),
             "10,000-job submission": submission(jobs_body)}
    gc.collect()
    gc.freeze()
    print("| body | CPU in all | longest C calls (CPU) | longest collection pass (passes) |")
    print("|---|---|---|---|")
    for name, work in cases.items():
        total, calls, longest_pass, passes = held(work, args.top)
        shown = ", ".join(f"{1000 * took:.1f} ms {what}" for took, what in calls) or "none over 0.5 ms"
        print(f"| {name} | {1000 * total:,.0f} ms | {shown} | {1000 * longest_pass:.1f} ms ({passes}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
