"""Submit a job file to a Flotilla service, follow its job set until every job has finished, and print each job's
final record; an error answer is printed as the API's error body.

    flotilla serve --config examples/serve.yaml &
    FLOTILLA_URL=http://127.0.0.1:8080 FLOTILLA_TOKEN=alice-secret python examples/client/submit_and_watch.py
"""

from __future__ import annotations

import sys
from pathlib import Path

from flotilla.client import ApiError, Client, ConnectionFailed

FINISHED = {"succeeded", "failed", "cancelled", "preempted"}
JOB_FILE = Path(__file__).resolve().parents[1] / "jobs" / "sleep.yaml"


def main(job_file: Path = JOB_FILE) -> int:
    with Client() as flotilla:                       # $FLOTILLA_URL, $FLOTILLA_TOKEN (or the client config file)
        try:
            submission = flotilla.submit_file(job_file)
            first = flotilla.status(submission.jobs[0].id)
            queue, job_set = first.queue, first.job_set
            print(f"submitted {len(submission.jobs)} jobs to {queue}/{job_set}")
            states: dict[str, str] = {}
            for event in flotilla.watch(queue, job_set):
                print(f"{event.id:>6} {event.job_id} {event.kind}")
                if event.job_id in submission.ids and event.kind in FINISHED:
                    states[event.job_id] = event.kind
                if len(states) == len(set(submission.ids)):
                    break
            for job_id in dict.fromkeys(submission.ids):
                job = flotilla.status(job_id)
                print(f"{job.id} {job.client_id} {job.state} on {job.cluster}/{job.node}")
            return 0 if all(state == "succeeded" for state in states.values()) else 1
        except ApiError as error:                    # NotFound, Forbidden, Invalid, ...: the API's error body
            print(f"{error.status} {error.code}: {error.message}", file=sys.stderr)
            for item in error.errors:
                print(f"  {item.text}", file=sys.stderr)
            return 2
        except ConnectionFailed as error:
            print(error, file=sys.stderr)
            return 3


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else JOB_FILE))
