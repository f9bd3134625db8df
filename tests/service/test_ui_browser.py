"""The dashboard in Debian's headless Chromium, driven by Playwright, against a real ``flotilla serve``.

Opens the queues page, a queue, a job set and a job; checks the numbers
shown against the API's; cancels a job with the button and sees its state
change; with a token for another queue, the job is not found and a forged
cancel is refused. Takes the screenshots in docs/img/.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.support.serve import Server, wait_for
from tests.support.service import CONFIG, job, job_file

CHROMIUM = os.environ.get("FLOTILLA_CHROMIUM", "/usr/bin/chromium")
DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"


def _browser_or_skip():
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} missing under CI (scripts/test installs Debian's chromium)")
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    return sync_api


SERVE = CONFIG.replace("cycle: {period: 0.2s}", "cycle: {period: 0.2s}\nserver: {listen: 127.0.0.1:PORT}\n"
                       "store: {url: 'sqlite:///DB'}")


def test_dashboard_in_chromium(tmp_path):
    sync_api = _browser_or_skip()
    srv = Server(tmp_path, SERVE).start()
    try:
        with srv.http("alice") as alice, srv.http("bob") as bob:
            # A: 3 jobs that run for an hour (4 cores each) and 2 that fit nowhere (100 cores); B: one runs.
            ids = [j["id"] for j in alice.post("/v1/submit", json=job_file("A", "train", [
                job(f"r{i}", cpu="4", duration="1h") for i in range(3)])).json()["jobs"]]
            big = [j["id"] for j in alice.post("/v1/submit", json=job_file("A", "huge", [
                job(f"h{i}", cpu="100") for i in range(2)])).json()["jobs"]]
            assert bob.post("/v1/submit", json=job_file("B", "b", [job("b0", cpu="2", duration="1h")])).status_code == 200
            counts = wait_for(lambda: (c := alice.get("/v1/queues/A").json()["jobs"])["running"] == 3 and c)
            assert (counts["queued"], counts["running"]) == (2, 3)
            wait_for(lambda: bob.get("/v1/queues/B").json()["jobs"]["running"] == 1)

            with sync_api.sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=["--no-sandbox", "--disable-gpu"])
                page = browser.new_page(viewport={"width": 1100, "height": 700})
                # The Content-Security-Policy blocks nothing the dashboard (or /docs) needs, and no page asks
                # anything of another host.
                blocked, elsewhere = [], []
                page.on("console", lambda msg: blocked.append(msg.text)
                        if "Content Security Policy" in msg.text else None)
                page.on("request", lambda req: elsewhere.append(req.url)
                        if not req.url.startswith((srv.url, "data:")) else None)
                page.goto(f"{srv.url}/ui")
                assert page.url.startswith(f"{srv.url}/ui/login")        # tokens are set: the page asks for one
                page.fill("#token", "wrong")
                page.click("#login")
                assert page.text_content("#login-error") == "unknown token"
                page.fill("#token", "alice-token")
                page.click("#login")

                # Queues: the numbers against the API's, shares against the published cycle.
                row = page.locator('tr[data-queue="A"]')
                assert (row.locator("td.queued").text_content(), row.locator("td.running").text_content()) == ("2", "3")
                b_row = page.locator('tr[data-queue="B"]')
                assert (b_row.locator("td.queued").text_content(), b_row.locator("td.running").text_content()) == \
                    ("0", "1")
                assert row.locator("td.fair").text_content() == "50.0%"
                # 12 of A's cores (the big jobs fit nowhere) out of a pool priced at 32 cores + 4 GPUs.
                assert row.locator("td.share").text_content() == f"{100 * 12 / 36:.1f}%"
                page.screenshot(path=str(tmp_path / "ui-queues.png"))

                # A queue: its counts by state, the API's numbers.
                page.click('tr[data-queue="A"] a')
                api_counts = alice.get("/v1/queues/A").json()["jobs"]
                shown = {s: int(page.text_content(f'td[data-state="{s}"]')) for s in api_counts}
                assert shown == api_counts
                assert page.text_content("#reasons td") == "0/4 nodes are available: 4 Insufficient cpu"

                # A job set, then a job: the table lists the set's jobs; the job page shows why it waits.
                page.click('tr[data-jobset="huge"] a')
                assert page.text_content("#total").startswith("2 jobs")
                assert sorted(page.locator("tr[data-job]").evaluate_all("rows => rows.map(r => r.dataset.job)")) == \
                    sorted(big)
                page.click(f'tr[data-job="{big[0]}"] a')
                assert page.text_content("#state").strip() == "queued"
                assert page.text_content("#waiting") == "0/4 nodes are available: 4 Insufficient cpu"
                assert page.locator("#events li").evaluate_all("items => items.map(i => i.dataset.kind)") == \
                    ["submitted", "queued"]

                # A running job: cancel it with the button; the page and the API both show the change.
                page.goto(f"{srv.url}/ui/jobs/{ids[0]}")
                assert page.text_content("#state").strip() == "running"
                page.screenshot(path=str(tmp_path / "ui-job.png"), full_page=True)
                page.click("#cancel")
                assert page.text_content("#notice") == "cancel requested"
                wait_for(lambda: alice.get(f"/v1/jobs/{ids[0]}").json()["state"] == "cancelled")
                page.reload()
                assert page.text_content("#state").strip() == "cancelled"
                assert page.locator("#cancel").count() == 0
                # Reprioritize through the form.
                page.goto(f"{srv.url}/ui/jobs/{big[1]}")
                page.fill("#new-priority", "7")
                page.click("#reprioritize")
                assert page.text_content("#notice") == "priority set to 7"
                assert alice.get(f"/v1/jobs/{big[1]}").json()["priority"] == 7

                # Bob (queue B) logs in: A's job is not found, and a forged cancel changes nothing.
                page.click("text=log out")
                page.fill("#token", "bob-token")
                page.click("#login")
                response = page.goto(f"{srv.url}/ui/jobs/{ids[1]}")
                assert response.status == 404
                assert page.text_content("#error") == f"job {ids[1]!r} not found"
                assert page.locator("#cancel").count() == 0
                status = page.evaluate(f"fetch('/ui/jobs/{ids[1]}/cancel', {{method: 'POST'}}).then(r => r.status)")
                assert status == 404
                page.goto(f"{srv.url}/ui/queues/A")
                assert page.text_content("#not-mine") == "You may not see this queue's jobs."
                assert alice.get(f"/v1/jobs/{ids[1]}").json()["state"] == "running"

                # /docs: Swagger UI from the server's own files lists the API's operations.
                page.goto(f"{srv.url}/docs")
                page.wait_for_selector(".opblock-summary-path")
                assert "/v1/submit" in page.locator(".opblock-summary-path").all_text_contents()
                assert (blocked, elsewhere) == ([], [])
                browser.close()
            if os.environ.get("FLOTILLA_UPDATE_SCREENSHOTS"):
                for name in ("ui-queues.png", "ui-job.png"):
                    shutil.copy(tmp_path / name, DOCS_IMG / name)
    finally:
        srv.kill()
