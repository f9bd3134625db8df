"""docs/kubernetes.md's kubectl tutorial, played on a KWOK cluster: its tour.yaml and train.yaml as written, what
``kubectl get pods`` and ``kubectl describe pod`` show there, read back from the API server.

The fixture cluster is the tutorial's: two 32-core nodes, the Job controller, the PodGroup CRD. kubectl's
commands are sent as the API requests they make (``apply`` a create, ``describe`` the pod and its events found
by the involved object's uid), so the test needs no kubectl.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from tests.support.serve import Server, wait_for

from flotilla.kubernetes.client import KubeError, pod_path

pytestmark = pytest.mark.kwok

DOC = Path(__file__).resolve().parents[2] / "docs" / "kubernetes.md"


def tutorial() -> str:
    text = DOC.read_text()
    start = text.index("## Tutorial: a Job with kubectl")
    return text[start:text.index("\n## ", start + 1)]


def block_after(text: str, marker: str, lang: str) -> str:
    """The first ```lang block after ``marker``."""
    rest = text[text.index(marker):]
    match = re.search(rf"```{lang}\n(.*?)```", rest, re.S)
    assert match, f"no {lang} block after {marker}"
    return match.group(1)


def describe(cluster, namespace: str, name: str) -> tuple[dict, list[tuple[str, str, str, str]]]:
    """What ``kubectl describe pod`` shows: the conditions, and the events (type, reason, from, message)."""
    pod = cluster.client.get(pod_path(namespace, name))
    uid = pod["metadata"]["uid"]
    events = cluster.client.get(f"/api/v1/namespaces/{namespace}/events", fieldSelector=(
        f"involvedObject.name={name},involvedObject.namespace={namespace},involvedObject.kind=Pod,"
        f"involvedObject.uid={uid}"))["items"]
    return ({c["type"]: c for c in pod["status"].get("conditions") or ()},
            [(e["type"], e["reason"], e["source"]["component"], e["message"]) for e in events])


def job_pods(cluster, namespace: str, job: str) -> list[dict]:
    return [p for p in cluster.client.get(pod_path(namespace))["items"]
            if (p["metadata"].get("labels") or {}).get("job-name") == job and not p["metadata"].get("deletionTimestamp")]


def test_the_kubectl_tutorial_runs_as_written(kwok, tmp_path):
    cluster = kwok["a"]
    text = tutorial()
    tour = block_after(text, "`tour.yaml`", "yaml")
    train = yaml.safe_load(block_after(text, "`train.yaml`", "yaml"))
    console = block_after(text, "`train.yaml`", "console")
    waiting = re.search(r"Warning\s+FailedScheduling\s+\S+\s+flotilla\s+(flotilla: .*)", console).group(1).strip()
    refused = re.search(r"the same Job created in namespace `default` gets `(flotilla: [^`]*)`",
                        " ".join(text.split())).group(1)
    assert "kubectl create namespace team-a" in text and "--controllers jobs" in text

    config = yaml.safe_load(tour)
    assert config["clusters"] == [{"name": "tour", "kind": "kubernetes", "context": "kwok-tour"}]
    config["clusters"][0].update(kubeconfig=cluster.kubeconfig, context=cluster.context)
    config["store"] = {"url": "sqlite:///DB"}
    config["server"] = {"listen": "127.0.0.1:PORT"}
    cluster.create_namespace("team-a")
    srv = Server(tmp_path, yaml.safe_dump(config)).start()
    try:
        cluster.client.post("/apis/batch/v1/namespaces/team-a/jobs", train)

        # kubectl get pods -o wide: two Running, one on each node; the third Pending, told why.
        def settled():
            pods = job_pods(cluster, "team-a", "train")
            running = [p for p in pods if p["status"].get("phase") == "Running"]
            pending = [p for p in pods if p["status"].get("phase") == "Pending"
                       and "PodScheduled" in describe(cluster, "team-a", p["metadata"]["name"])[0]]
            return (running, pending) if len(running) == 2 and len(pending) == 1 else None
        running, [pending] = wait_for(settled, timeout=90)
        assert sorted(p["spec"]["nodeName"] for p in running) == ["node-1", "node-2"]
        conditions, events = describe(cluster, "team-a", pending["metadata"]["name"])
        scheduled = conditions["PodScheduled"]
        assert (scheduled["status"], scheduled["reason"], scheduled["message"]) == ("False", "Unschedulable", waiting)
        assert events == [("Warning", "FailedScheduling", "flotilla", waiting)]

        # The same Job in a namespace the queue does not list: refused, told why, never bound.
        cluster.client.post("/apis/batch/v1/namespaces/default/jobs", {**train, "metadata": {"name": "train"}})
        refusals = wait_for(lambda: (lambda ps: ps if len(ps) == 3 and all(
            "PodScheduled" in describe(cluster, "default", p["metadata"]["name"])[0] for p in ps) else None)(
            job_pods(cluster, "default", "train")), timeout=60)
        for pod in refusals:
            conditions, events = describe(cluster, "default", pod["metadata"]["name"])
            assert (conditions["PodScheduled"]["message"], pod["spec"].get("nodeName")) == (refused, None)
            assert events == [("Warning", "FailedScheduling", "flotilla", refused)]

        # kubectl delete job train: its pods go.
        cluster.client.delete("/apis/batch/v1/namespaces/team-a/jobs/train", {"propagationPolicy": "Background"})
        wait_for(lambda: not job_pods(cluster, "team-a", "train"), timeout=60)
    finally:
        srv.kill()
        try:
            cluster.client.delete("/apis/batch/v1/namespaces/default/jobs/train", {"propagationPolicy": "Background"})
        except KubeError:
            pass
