"""Config reload: a weight changed in the file changes the next cycle's fair shares; a broken file keeps the old
config and logs the error; a running process reloads on SIGHUP and on a change to its file."""

from __future__ import annotations

import signal

import httpx
import structlog
from prometheus_client.parser import text_string_to_metric_families

from flotilla.scheduler import Scheduler
from flotilla.service.jobspec import prepare
from flotilla.service.loop import service_backends
from flotilla.service.server import build_service
from flotilla.config import load_config
from tests.support.serve import Server, wait_for
from tests.support.service import CONFIG, job, job_file


def fair_shares(service) -> dict[str, float]:
    return {name: q.fair_share for name, q in service.loop.last_decisions.queues.items()}


def submit_both(service):
    for queue, owner in (("A", "alice"), ("B", "bob")):
        _, new = prepare(job_file(queue, "s", [job(f"{queue}{i}", cpu="8") for i in range(8)]), service.settings)
        service.store.submit(queue, "s", owner, new)


def test_a_changed_weight_reaches_the_next_cycle_and_a_broken_file_is_refused(tmp_path):
    path = tmp_path / "serve.yaml"
    path.write_text(CONFIG)
    cfg = load_config(path)
    service = build_service(cfg, Scheduler(cfg), store_url=f"sqlite:///{tmp_path}/r.db",
                            backends=service_backends(cfg), seed=0, config_path=str(path))
    submit_both(service)
    service.runner.cycle()
    assert fair_shares(service) == {"A": 0.5, "B": 0.5}
    assert service.reloader.check() is None                    # nothing changed: nothing done

    path.write_text(CONFIG.replace("{name: A, weight: 1,", "{name: A, weight: 3,"))
    assert service.reloader.check() is True
    service.runner.cycle()
    assert fair_shares(service) == {"A": 0.75, "B": 0.25}
    assert service.store.get_queue("A").weight == 3.0           # every replica sees it through the store

    path.write_text(CONFIG.replace("{name: A, weight: 1,", "{name: A, weight: -2,"))
    with structlog.testing.capture_logs() as logs:
        assert service.reloader.check() is False
    assert [(e["event"], e["log_level"], e["error"]) for e in logs] == [
        ("config.reload_failed", "error", f"{path}:7: queues[0].weight: Input should be greater than 0 (got -2)")]
    service.runner.cycle()
    assert fair_shares(service) == {"A": 0.75, "B": 0.25}       # the running config stays

    path.write_text(CONFIG.replace("cycle: {period: 0.2s}", "cycle: {period: 0.5s}").replace("c2-node", "c3-node"))
    with structlog.testing.capture_logs() as logs:
        assert service.reloader.check() is True
    assert [(e["event"], e.get("sections")) for e in logs] == [
        ("config.reload_needs_restart", ["clusters"]), ("config.reloaded", None)]
    assert (service.loop.settings.cycle_period, service.loop.settings.clusters[1].nodes[0].name) == (0.5, "c2-node-1")
    service.close()


def test_sighup_reloads_a_running_server(tmp_path):
    config = CONFIG.replace("cycle: {period: 0.2s}", "cycle: {period: 0.2s}\nserver: {listen: 127.0.0.1:PORT}\n"
                            "store: {url: 'sqlite:///DB'}")
    srv = Server(tmp_path, config).start()
    try:
        with srv.http("root") as http:
            for queue in ("A", "B"):
                body = job_file(queue, "s", [job(f"{queue}{i}", cpu="8") for i in range(8)])
                assert http.post("/v1/submit", json=body).status_code == 200

            def fair() -> dict:
                out = {}
                for family in text_string_to_metric_families(httpx.get(f"{srv.url}/metrics").text):
                    for sample in family.samples:
                        if sample.name == "flotilla_queue_fair_share":
                            out[sample.labels["queue"]] = sample.value
                return out

            assert wait_for(lambda: fair() == {"A": 0.5, "B": 0.5})
            # SIGHUP reloads even an unchanged file; a changed file is reloaded without a signal.
            srv.proc.send_signal(signal.SIGHUP)
            assert wait_for(lambda: srv.log.read_text().count("config.reloaded") == 1)
            srv.config.write_text(srv.config.read_text().replace("{name: B, weight: 1,", "{name: B, weight: 4,"))
            assert wait_for(lambda: fair() == {"A": 0.2, "B": 0.8})
            assert srv.log.read_text().count("config.reloaded") == 2
    finally:
        srv.kill(signal.SIGTERM)
