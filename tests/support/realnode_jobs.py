"""Jobs through a real ``flotilla serve`` on the real node ``real-1``: submit, events, status."""

import json
from tests.support.serve import Server, cli, write_file


CONFIG = """
priorityClasses:
  - {name: armada-default, priority: 30000, preemptible: false}
defaultPriorityClass: armada-default
queues:
  - {name: A, weight: 1, owners: [alice]}
  - {name: B, weight: 1, owners: [bob]}
evict: {probability: 0}
lease: {timeout: 60s, maxRetries: 1}
gracePeriod: {default: 1s, max: 60s}
cycle: {period: 0.2s}
server: {listen: "127.0.0.1:PORT"}
store: {url: "sqlite:///DB"}
auth:
  tokens:
    - {token: alice-token, user: alice}
    - {token: bob-token, user: bob}
clusters:
"""


def serve(real_node, tmp_path, **cluster) -> Server:
    """``flotilla serve`` on the real node's cluster (namespace: the test's own), finished pods kept for logs."""
    entry = {"name": "real", "kind": "kubernetes", "kubeconfig": real_node.kubeconfig, "context": real_node.context,
             "namespace": real_node.namespace, "stuckPodExpiry": "4s", "nodeLostTimeout": "3s",
             "finishedPodRetention": "10m", **cluster}
    entry = {key: value for key, value in entry.items() if value is not None}   # None: the setting's default
    # Three minutes to come up: the real-node tests run on machines shared with other work, where serve's imports
    # alone have taken over 30 s.
    return Server(tmp_path, CONFIG + f"  - {json.dumps(entry)}\n").start(timeout=180)


def busybox(real_node, command: str, memory: str = "32Mi", **pod) -> dict:
    """A job of one container running ``sh -c COMMAND`` on the local image (never pulled)."""
    container = {"name": "main", "image": real_node.image, "imagePullPolicy": "Never",
                 "command": ["sh", "-c", command],
                 "resources": {"limits": {"cpu": "100m", "memory": memory}}}
    container.update(pod.pop("container", {}))
    return {"podSpec": {"containers": [container], **pod}}


def submit(srv: Server, tmp_path, jobs: list[dict], job_set: str = "s", user: str = "alice",
           queue: str = "A") -> list[str]:
    path = write_file(tmp_path, f"{job_set}.yaml", {"queue": queue, "jobSetId": job_set, "jobs": jobs})
    out = cli(srv, user, "submit", str(path), "--output", "json")
    assert out.returncode == 0, out.stderr
    return [j["id"] for j in json.loads(out.stdout)["jobs"]]


def events(srv: Server, job_set: str = "s", user: str = "alice", queue: str = "A") -> list[dict]:
    out = cli(srv, user, "watch", queue, job_set, "--no-follow", "--output", "json")
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def status(srv: Server, job_id: str, user: str = "alice") -> dict:
    out = cli(srv, user, "status", job_id, "--output", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def kinds(evs: list[dict], job_id: str) -> list[tuple[str, str]]:
    return [(e["kind"], e.get("reason") or "") for e in evs if e["jobId"] == job_id]


def bare_pod(name: str, command: str, image: str, **spec) -> dict:
    """A pod bound to real-1 by nodeName (no scheduler involved)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": "real-1", "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": image, "imagePullPolicy": "Never",
                                     "command": ["sh", "-c", command]}], **spec}}
