"""The plugin reference is generated from the declarations and current; the policies guide covers every action."""

from __future__ import annotations

from pathlib import Path

from flotilla.actions import ACTIONS
from flotilla.core.extensions import EXTENSION_POINTS
from flotilla.core.reference import render

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_plugin_reference_is_generated_from_the_declarations():
    # Regenerate with scripts/plugins-reference.
    assert (DOCS / "plugins-reference.md").read_text() == render()
    text = render()
    for point in EXTENSION_POINTS:
        assert f"| `{point.name}` | `session.{point.register}` | {point.combine} |" in text, point.name
        assert f"### `{point.name}`" in text, point.name


def test_the_plugin_guide_links_to_the_reference():
    assert "(plugins-reference.md)" in (DOCS / "plugins.md").read_text()


def test_policies_guide_covers_every_action():
    text = (DOCS / "policies.md").read_text()
    for name in ACTIONS:
        assert f"`{name}`" in text, name


def test_the_retry_policy_example_runs_as_the_policies_guide_says(tmp_path):
    """The guide's config and job file, in the service loop on its simulated cluster: the events it shows."""
    import re

    import pytest
    import yaml

    from flotilla.config import parse_config
    from flotilla.config.errors import ConfigError
    from flotilla.scheduler import Scheduler
    from flotilla.service.jobspec import prepare
    from flotilla.service.loop import ServiceLoop, service_backends
    from flotilla.service.settings import from_config
    from flotilla.service.store import Store

    text = (DOCS / "policies.md").read_text()
    section = text[text.index("## Retry policies"):text.index("## Actions in a cycle")]
    config_text, job_text = re.findall(r"```yaml\n(.*?)```", section, re.S)
    shown = re.search(r"\n```\n(running\n.*?)```", section, re.S).group(1)
    cfg = parse_config(config_text, "flotilla.yaml")
    settings = from_config(cfg)
    now = [1_000_000.0]
    store = Store(f"sqlite:///{tmp_path}/docs.db")
    store.sync_queues(settings.queues)
    loop = ServiceLoop(store, settings, Scheduler(cfg), service_backends(cfg, clock=lambda: now[0]),
                       clock=lambda: now[0], seed=0)
    file, new = prepare(yaml.safe_load(job_text), settings)
    [submitted] = store.submit(file.queue, file.jobSetId, "alice", new, now=now[0])
    while store.get_job(submitted.id)["state"] != "failed":
        loop.run_cycle()
        now[0] += 1
    events = [(e["kind"], e["reason"]) for e in store.events(file.queue, file.jobSetId)]
    lines = [tuple(re.split(r"\s{2,}", line, maxsplit=1)) for line in shown.splitlines() if line != "..."]
    assert [(k, r) for k, r in events if k in ("run-failed", "queued", "failed") and r] == [l for l in lines if len(l) == 2]
    assert sum(k == "running" for k, _ in events) == 3
    store.close()
    with pytest.raises(ConfigError) as caught:
        parse_config(config_text.replace("[OOMKilled]", "[OOMkiled]"), "flotilla.yaml")
    assert str(caught.value).startswith("flotilla.yaml:7: queues[0].retryPolicy[2].reasons[0]: unknown reason "
                                        "'OOMkiled' (") and str(caught.value).endswith("did you mean 'OOMKilled'?")
