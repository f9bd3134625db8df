"""A config reload applies auth at once: a removed token gets 401 on its next request and its open streams end;
an added token, new groups, new adminGroups and new OIDC settings work without a restart."""

from __future__ import annotations

import json
import signal
import subprocess

import httpx
import structlog
from fastapi.testclient import TestClient

from tests.support.serve import FLOTILLA, REPO, Server, env_for
from tests.support.service import CONFIG, headers, job, job_file
from tests.support.auth import _service, ALICE

SERVE = CONFIG.replace("cycle: {period: 0.2s}", "cycle: {period: 0.2s}\nserver: {listen: 127.0.0.1:PORT}\n"
                       "store: {url: 'sqlite:///DB'}")


def unauthenticated(message: str) -> dict:
    return {"error": {"code": "unauthenticated", "message": message, "field": None, "errors": []}}


def test_sighup_revokes_a_static_token_and_ends_its_streams(tmp_path):
    srv = Server(tmp_path, SERVE).start()
    watcher = None
    try:
        with srv.http("alice") as alice, srv.http("root") as root, srv.http("bob") as bob:
            assert root.post("/v1/queues/A/cordon").status_code == 200      # nothing runs: the events stay put
            assert alice.post("/v1/submit", json=job_file("A", "w", [job("x")])).status_code == 200
            watcher = subprocess.Popen([*FLOTILLA, "watch", "A", "w", "--output", "json"], cwd=REPO,
                                       env=env_for("alice-token", srv.url), stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
            events = []
            with alice.stream("GET", "/v1/queues/A/jobsets/w/events", params={"follow": "true"},
                              timeout=httpx.Timeout(60.0)) as stream:
                for line in stream.iter_lines():
                    if not line.strip():
                        continue
                    events.append(json.loads(line))
                    if len(events) == 2:   # submitted, queued: now the token is removed and the server told
                        cli_events = [json.loads(watcher.stdout.readline())["kind"] for _ in range(2)]
                        srv.config.write_text(srv.config.read_text().replace(ALICE, ""))
                        srv.proc.send_signal(signal.SIGHUP)
            assert [(e["kind"], e.get("reason")) for e in events] == [
                ("submitted", "by alice"), ("queued", ""),
                ("end", "the bearer token no longer authenticates (unknown bearer token)")]
            r = alice.get("/v1/queues")
            assert (r.status_code, r.json()) == (401, unauthenticated("unknown bearer token"))
            r = alice.post("/v1/submit", json=job_file("A", "w", [job("y")]))
            assert (r.status_code, r.json()) == (401, unauthenticated("unknown bearer token"))
            assert bob.get("/v1/queues").status_code == 200                  # the other tokens are unchanged
            out, err = watcher.communicate(timeout=60)
            assert (watcher.returncode, err.strip().splitlines()[-1]) == (3, "error: 401: unknown bearer token")
            assert (cli_events, out) == (["submitted", "queued"], "")      # then it ended, saying why
        assert "config.auth_applied" in srv.log.read_text()
        assert "reload_needs_restart" not in srv.log.read_text()
        assert [j["clientId"] for j in srv.store().list_jobs("A", "w")] == ["x"]
    finally:
        if watcher is not None and watcher.poll() is None:
            watcher.kill()
        srv.kill(signal.SIGTERM)


def test_a_reload_adds_tokens_and_changes_groups_and_admin_groups_at_once(tmp_path):
    service, path = _service(tmp_path, CONFIG)
    client = TestClient(service.app)
    assert client.post("/v1/submit", json=job_file("A", "w", [job("x")]), headers=headers("carol")).status_code == 200
    assert client.post("/v1/queues", json={"name": "C"}, headers=headers("dave")).status_code == 403
    events = []
    with client.stream("GET", "/v1/queues/A/jobsets/w/events", headers=headers("carol")) as stream:
        for line in stream.iter_lines():
            if not line.strip():
                continue
            events.append(json.loads(line))
            if len(events) == 2:   # carol leaves group ml, dave's group becomes an admin group, erin arrives
                path.write_text(CONFIG
                                .replace("{token: carol-token, user: carol, groups: [ml]}",
                                         "{token: carol-token, user: carol}")
                                .replace("adminGroups: [admins]", "adminGroups: [admins, other]")
                                .replace("  adminGroups:", "    - {token: erin-token, user: erin, groups: [ml]}\n"
                                                           "  adminGroups:"))
                with structlog.testing.capture_logs() as logs:
                    assert service.reloader.check() is True
    assert [(e["kind"], e.get("reason")) for e in events] == [
        ("submitted", "by carol"), ("queued", ""), ("end", "user 'carol' may no longer watch queue 'A'")]
    assert [(e["event"], e.get("tokens"), e.get("admin_groups")) for e in logs] == [
        ("config.auth_applied", 6, ["admins", "other"]), ("config.reloaded", None, None)]
    r = client.get("/v1/queues/A/jobsets/w/jobs", headers=headers("carol"))
    assert (r.status_code, r.json()["error"]["message"]) == (403, "user 'carol' may not act in queue 'A'")
    erin = {"Authorization": "Bearer erin-token"}
    assert client.get("/v1/queues/A/jobsets/w/jobs", headers=erin).status_code == 200
    assert client.post("/v1/queues", json={"name": "C"}, headers=headers("dave")).status_code == 200
    service.close()


def test_a_server_sent_events_stream_ends_with_an_end_event_when_its_token_is_removed(tmp_path):
    service, path = _service(tmp_path, CONFIG)
    client = TestClient(service.app)
    assert client.post("/v1/queues/A/cordon", headers=headers("root")).status_code == 200
    assert client.post("/v1/submit", json=job_file("A", "w", [job("x")]), headers=headers("alice")).status_code == 200
    frames = []
    with client.stream("GET", "/v1/queues/A/jobsets/w/events?format=sse", headers=headers("alice")) as stream:
        for line in stream.iter_lines():
            if line.startswith("event: "):
                frames.append(line.removeprefix("event: "))
                if len(frames) == 2:
                    path.write_text(CONFIG.replace(ALICE, ""))
                    assert service.reloader.check() is True
            elif line.startswith("data: ") and frames[-1] == "end":
                end = json.loads(line.removeprefix("data: "))
    assert frames == ["submitted", "queued", "end"]
    assert end["reason"] == "the bearer token no longer authenticates (unknown bearer token)"
    service.close()


def test_a_reload_changes_the_oidc_settings_and_keeps_the_key_cache_of_an_unchanged_jwks_url(tmp_path):
    # a closed loopback port: the reload's prefetch of the keys fails at once, and nothing leaves the machine
    oidc = "  oidc: {issuer: 'https://idp.example.com', audience: flotilla, jwksUrl: 'http://127.0.0.1:9/k'}\n"
    text = CONFIG.replace("  adminGroups: [admins]\n", "  adminGroups: [admins]\n" + oidc)
    service, path = _service(tmp_path, text)
    keys = service.authenticator.oidc.keys
    path.write_text(text.replace("audience: flotilla", "audience: flotilla-prod"))
    assert service.reloader.check() is True
    assert (service.authenticator.oidc.settings.audience, service.authenticator.oidc.keys) == ("flotilla-prod", keys)
    path.write_text(text.replace("127.0.0.1:9/k", "127.0.0.1:9/keys"))
    assert service.reloader.check() is True
    assert service.authenticator.oidc.keys is not keys
    assert service.authenticator.oidc.keys.url == "http://127.0.0.1:9/keys"
    path.write_text(CONFIG)                                        # oidc removed: static tokens only
    assert service.reloader.check() is True
    assert service.authenticator.oidc is None
    assert TestClient(service.app).get("/v1/queues", headers=headers("alice")).status_code == 200
    service.close()


def test_removing_every_credential_refuses_everyone_until_a_restart(tmp_path):
    service, path = _service(tmp_path, CONFIG)
    client = TestClient(service.app)
    path.write_text(CONFIG.split("auth:\n")[0] + "clusters:\n" + CONFIG.split("clusters:\n")[1])
    with structlog.testing.capture_logs() as logs:
        assert service.reloader.check() is True
    assert [(e["event"], e.get("tokens")) for e in logs] == [("config.auth_applied", 0), ("config.reloaded", None)]
    r = client.get("/v1/queues", headers=headers("root"))
    assert (r.status_code, r.json()) == (401, unauthenticated("unknown bearer token"))
    service.close()


def test_a_service_started_without_auth_names_added_tokens_as_needing_a_restart(tmp_path):
    open_config = CONFIG.split("auth:\n")[0] + "clusters:\n" + CONFIG.split("clusters:\n")[1]
    service, path = _service(tmp_path, open_config)
    client = TestClient(service.app, base_url="http://127.0.0.1")
    path.write_text(CONFIG)
    with structlog.testing.capture_logs() as logs:
        assert service.reloader.check() is True
    assert [(e["event"], e.get("sections")) for e in logs] == [
        ("config.reload_needs_restart", ["auth"]), ("config.reloaded", None)]
    assert client.post("/v1/queues", json={"name": "C"}).status_code == 200   # still the open, loopback mode
    service.close()
