"""``kubectl flotilla`` (flotilla.kubectl_plugin): the queue of the kubeconfig's current namespace, read from its
``flotilla.io/queue`` label on a real API server (the real node's KWOK cluster), becomes ``FLOTILLA_QUEUE``, which
``submit`` gives a job file that names no queue."""

from __future__ import annotations

import pytest
import yaml

from flotilla import kubectl_plugin
from flotilla.service.cli import _read_job_file

pytestmark = pytest.mark.realnode


def kubeconfig_in(real_node, tmp_path, namespace: str | None) -> str:
    """The node's kubeconfig with its current context switched to the node's, in ``namespace``."""
    from flotilla.kwok.realnode import state_dir

    config = yaml.safe_load((state_dir() / "kubeconfig").read_text())
    config["current-context"] = real_node.context
    for entry in config["contexts"]:
        if entry["name"] == real_node.context:
            entry["context"].pop("namespace", None)
            if namespace:
                entry["context"]["namespace"] = namespace
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_the_current_namespaces_queue_label_names_the_queue(real_node, tmp_path, monkeypatch):
    labelled, plain = f"{real_node.namespace}-q", real_node.namespace
    real_node.client.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": labelled, "labels": {"flotilla.io/queue": "research"}}})
    assert kubectl_plugin.namespace_queue(kubeconfig_in(real_node, tmp_path, labelled)) == (labelled, "research")
    assert kubectl_plugin.namespace_queue(kubeconfig_in(real_node, tmp_path, plain)) == (plain, None)

    monkeypatch.delenv("FLOTILLA_QUEUE", raising=False)
    monkeypatch.setenv("KUBECONFIG", kubeconfig_in(real_node, tmp_path, labelled))
    with pytest.raises(SystemExit) as exit_:
        kubectl_plugin.main(["--version"])
    assert exit_.value.code == 0
    import os
    assert os.environ["FLOTILLA_QUEUE"] == "research"

    job = tmp_path / "job.yaml"
    job.write_text("jobSetId: s\njobs: [{podSpec: {containers: [{name: c, image: busybox}]}}]\n")
    assert _read_job_file(str(job))["queue"] == "research"
    job.write_text("queue: production\njobSetId: s\njobs: []\n")
    assert _read_job_file(str(job))["queue"] == "production"


def test_an_explicit_queue_wins_and_an_unreadable_kubeconfig_leaves_none(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FLOTILLA_QUEUE", "mine")
    with pytest.raises(SystemExit):
        kubectl_plugin.main(["--version"])
    import os
    assert os.environ["FLOTILLA_QUEUE"] == "mine"
    monkeypatch.delenv("FLOTILLA_QUEUE")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(SystemExit):
        kubectl_plugin.main(["--version"])
    assert "FLOTILLA_QUEUE" not in os.environ
    err = capsys.readouterr().err
    assert err.startswith("kubectl flotilla: no queue from the current namespace: ")
    assert len(err.strip().splitlines()) == 1
