"""The dashboard's server side, in-process: queues as a tree, jobs filtered, sorted and paged by the database,
bad query parameters answered 422 on a page (the browser test is test_ui_browser.py)."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from flotilla.scheduler import Scheduler
from flotilla.service.jobspec import prepare
from flotilla.service.server import build_service
from flotilla.service.ui import tree_order
from tests.support.service import config, job, job_file


def test_queues_are_listed_as_a_tree():
    rows = [{"name": n, "parent": p} for n, p in [("b1", "b"), ("a", None), ("b", None), ("a2", "a"), ("a1", "a"),
                                                  ("orphan", "gone")]]
    assert [(r["name"], r["depth"]) for r in tree_order(rows)] == [
        ("a", 0), ("a1", 1), ("a2", 1), ("b", 0), ("b1", 1), ("orphan", 0)]


def test_jobs_are_filtered_sorted_and_paged_by_the_database(tmp_path):
    cfg = config()
    service = build_service(cfg, Scheduler(cfg), store_url=f"sqlite:///{tmp_path}/ui.db")
    for job_set, n in (("big", 120), ("small", 3)):
        body = job_file("A", job_set, [{**job(f"{job_set}-{i}"), "priority": i % 7} for i in range(n)])
        service.store.submit("A", job_set, "alice" if job_set == "big" else "carol", prepare(body, service.settings)[1])
    client = TestClient(service.app)
    client.cookies.set("flotilla_token", "alice-token")

    def listing(query: str) -> tuple[str, list[str]]:
        response = client.get(f"/ui/jobs?queue=A&{query}")
        assert response.status_code == 200
        total = re.search(r'<p id="total">([^<]*)</p>', response.text).group(1)
        return total, re.findall(r'<td class="num">(\d+)</td>', response.text)

    total, priorities = listing("jobSet=big&sort=priority&order=asc&page_number=3")
    assert total == "120 jobs · page 3 of 3"
    assert priorities == ["5"] * 3 + ["6"] * 17    # priority i % 7: 18 of 0, 17 each of 1..6; page 3 is rows 101-120
    assert listing("owner=carol")[0] == "3 jobs · page 1 of 1"
    assert listing("state=running")[0] == "0 jobs · page 1 of 1"
    response = client.get("/ui/jobs?queue=A&sort=nope")
    assert response.status_code == 422
    assert "sort must be one of submitted, priority, state, id, owner, jobSet, updated" in response.text
    client.cookies.set("flotilla_token", "bob-token")
    assert client.get("/ui/jobs?queue=A").status_code == 403
    service.close()


def test_without_tokens_there_is_no_login_and_every_queue_is_open(tmp_path):
    from flotilla.config import parse_config
    from tests.support.service import CONFIG

    text = CONFIG[:CONFIG.index("auth:")] + CONFIG[CONFIG.index("clusters:"):]
    cfg = parse_config(text, "open.yaml")
    service = build_service(cfg, Scheduler(cfg), store_url=f"sqlite:///{tmp_path}/open.db")
    body = job_file("B", "s", [job("x", cpu="100")])
    job_id = service.store.submit("B", "s", "anonymous", prepare(body, service.settings)[1])[0].id
    client = TestClient(service.app, base_url="http://127.0.0.1")   # without tokens, loopback Hosts only
    page = client.get("/ui", follow_redirects=False)
    assert page.status_code == 200 and "local, no authentication" in page.text
    response = client.post(f"/ui/jobs/{job_id}/cancel", follow_redirects=False, headers={"Origin": "http://127.0.0.1"})
    assert (response.status_code, response.headers["location"]) == (303, f"/ui/jobs/{job_id}?done=cancel")
    assert service.store.get_job(job_id)["state"] == "cancelled"
    # A page of another site cannot press the button for the local user.
    response = client.post(f"/ui/jobs/{job_id}/reprioritize", data={"priority": "3"},
                           headers={"Origin": "https://attacker.example"})
    assert response.status_code == 403
    service.close()


def test_the_queues_page_shows_the_tree_of_queues(tmp_path):
    from flotilla.service.loop import service_backends
    from tests.support.service import tree_config

    cfg = tree_config()
    service = build_service(cfg, Scheduler(cfg), store_url=f"sqlite:///{tmp_path}/tree.db",
                            backends=service_backends(cfg), seed=0)
    for queue in ("A1", "A2", "B"):
        body = job_file(queue, "s", [job(f"{queue}-{i}") for i in range(40)])
        service.store.submit(queue, "s", "alice", prepare(body, service.settings)[1])
    assert service.runner.cycle()
    client = TestClient(service.app)
    client.cookies.set("flotilla_token", "alice-token")
    html = client.get("/ui").text
    rows = re.findall(r'<tr data-queue="([^"]+)">\s*<td class="tree" data-depth="(\d+)">', html)
    assert rows == [("A", "0"), ("A1", "1"), ("A2", "1"), ("B", "0")]     # children indented under A
    fair = dict(re.findall(r'<tr data-queue="([^"]+)">.*?<td class="num fair">([^<]+)</td>', html, re.S))
    assert fair == {"A": "50.0%", "A1": "12.5%", "A2": "37.5%", "B": "50.0%"}
    service.close()
