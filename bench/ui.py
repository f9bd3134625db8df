"""The dashboard's job list with 100,000 jobs in one queue: time per page, by filter and sort order; a scrape.

Fills a temporary store (embedded SQLite, or ``--store`` for PostgreSQL)
with ``--jobs`` jobs in one queue (ten job sets, two owners, a tenth of them
cancelled), then renders ``/ui/jobs`` pages in-process (FastAPI's test
client, the real templates and queries) and prints the median time of
``--repeat`` renders per case. A benchmark, not a test: it asserts nothing.

    python bench/ui.py [--jobs 100000] [--repeat 5] [--store postgresql+psycopg://...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

CASES = [
    ("first page, newest first", "sort=submitted&order=desc"),
    ("last page, newest first", "sort=submitted&order=desc&page_number=LAST"),
    ("one job set", "jobSet=set-3"),
    ("one owner, by priority", "owner=bob&sort=priority&order=asc"),
    ("cancelled only", "state=cancelled"),
    ("by state, page 100", "sort=state&page_number=100"),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--store", default=None)
    args = ap.parse_args()

    from fastapi.testclient import TestClient

    from flotilla.scheduler import Scheduler
    from flotilla.service.jobspec import prepare
    from flotilla.service.server import build_service
    from service_fixtures import config, job, job_file

    cfg = config()
    url = args.store or f"sqlite:///{tempfile.mkdtemp(prefix='flotilla-ui-bench-')}/ui.db"
    service = build_service(cfg, Scheduler(cfg), store_url=url)
    started = time.perf_counter()
    batch = 1000
    for start in range(0, args.jobs, batch):
        body = job_file("A", f"set-{start // batch % 10}",
                        [{**job(f"j{i}"), "priority": i % 100} for i in range(start, min(args.jobs, start + batch))])
        service.store.submit("A", body["jobSetId"], "alice" if start // batch % 2 else "bob",
                             prepare(body, service.settings)[1])
    service.store.cancel("A", "set-9", None, None, by="alice")
    print(f"{args.jobs} jobs stored in {time.perf_counter() - started:.1f}s ({url.split(':')[0]})", file=sys.stderr)

    client = TestClient(service.app)
    client.cookies.set("flotilla_token", "alice-token")
    last = -(-args.jobs // 50)
    print(f"{'case':32} {'median ms':>10}")
    for name, query in CASES:
        times = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            response = client.get(f"/ui/jobs?queue=A&{query.replace('LAST', str(last))}")
            times.append(time.perf_counter() - t)
            assert response.status_code == 200 and 'id="total"' in response.text, response.text[:200]
        print(f"{name:32} {statistics.median(times) * 1000:10.1f}")
    times = []
    for _ in range(args.repeat):   # a Prometheus scrape counts jobs per queue and state with the same store
        t = time.perf_counter()
        assert client.get("/metrics").status_code == 200
        times.append(time.perf_counter() - t)
    print(f"{'/metrics scrape':32} {statistics.median(times) * 1000:10.1f}")
    service.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
