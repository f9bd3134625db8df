"""What the sync and async clients share: where the server and token come from, each operation as a request
and a parser of its answer, and turning an error answer into its exception."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import httpx
import yaml

from flotilla.client.errors import error_for
from flotilla.client.models import Cancellation, Job, Queue, QueueDeletion, QueuePending, Submission

DEFAULT_URL = "http://127.0.0.1:8080"


def client_config_path() -> Path:
    return Path(os.environ.get("FLOTILLA_CLIENT_CONFIG") or Path.home() / ".config" / "flotilla" / "client.yaml")


def resolve(url: str | None = None, token: str | None = None) -> tuple[str, str | None]:
    """Server address and token, first found wins: the arguments, ``$FLOTILLA_URL`` / ``$FLOTILLA_TOKEN``, the
    client config file (``$FLOTILLA_CLIENT_CONFIG``, else ``~/.config/flotilla/client.yaml``:
    ``{url: ..., token: ...}``), then ``http://127.0.0.1:8080`` and no token."""
    file: dict = {}
    path = client_config_path()
    if (not url or not token) and path.is_file():
        try:
            loaded = yaml.safe_load(path.read_text())
            file = loaded if isinstance(loaded, dict) else {}
        except (OSError, yaml.YAMLError):
            file = {}
    url = url or os.environ.get("FLOTILLA_URL") or file.get("url") or DEFAULT_URL
    token = token or os.environ.get("FLOTILLA_TOKEN") or file.get("token")
    return str(url).rstrip("/"), token


def headers(token: str | None) -> dict[str, str]:
    # JSON on every request: a local service without tokens refuses state changes that do not say so.
    out = {"Content-Type": "application/json"}
    if token:
        out["Authorization"] = f"Bearer {token}"
    return out


def raise_for_error(response: httpx.Response) -> None:
    """Raise the typed exception of an error answer (the body must have been read)."""
    if response.status_code < 400:
        return
    try:
        body = response.json()
    except ValueError:
        body = None
    raise error_for(response.status_code, body, response.text)


@dataclass(frozen=True)
class Call:
    """One operation: the request to send and how to read a successful answer's JSON."""

    method: str
    path: str
    parse: Callable[[Any], Any]
    json: Any = None
    params: Mapping[str, Any] | None = None

    def request_args(self) -> dict:
        args: dict[str, Any] = {}
        if self.json is not None:
            args["json"] = self.json
        if self.params:
            args["params"] = dict(self.params)
        return args


def _selector(job_set: str | None, job_ids: Iterable[str] | None) -> dict:
    body: dict[str, Any] = {}
    if job_set is not None:
        body["jobSetId"] = job_set
    if job_ids:
        body["jobIds"] = list(job_ids)
    return body


def queue_body(name: str, weight: float, limits: Mapping[str, float] | None, owners: Iterable[str],
               group_owners: Iterable[str], retry_policy: Iterable[Mapping[str, Any]] = ()) -> dict:
    return {"name": name, "weight": weight, "limits": dict(limits or {}), "owners": list(owners),
            "groupOwners": list(group_owners), "retryPolicy": [dict(rule) for rule in retry_policy]}


def read_job_file(path: str | os.PathLike) -> dict:
    """A job file (YAML or JSON) as the mapping ``submit`` sends."""
    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a job file is a mapping with queue, jobSetId and jobs")
    return data


class Calls:
    """Every operation of the API as a :class:`Call`; the clients send them."""

    @staticmethod
    def submit(job_file: Mapping[str, Any]) -> Call:
        return Call("POST", "/v1/submit", Submission.parse, json=dict(job_file))

    @staticmethod
    def status(job_id: str) -> Call:
        return Call("GET", f"/v1/jobs/{job_id}", Job.parse)

    @staticmethod
    def service_status() -> Call:
        return Call("GET", "/v1/status", dict)

    @staticmethod
    def jobs(queue: str, job_set: str, states: Iterable[str] | None = None) -> Call:
        return Call("GET", f"/v1/queues/{queue}/jobsets/{job_set}/jobs",
                    lambda data: [Job.parse(j) for j in data["jobs"]],
                    params={"state": list(states)} if states else None)

    @staticmethod
    def cancel(queue: str, job_set: str | None, job_ids: Iterable[str] | None,
               states: Iterable[str] | None) -> Call:
        body = {"queue": queue, **_selector(job_set, job_ids)}
        if states:
            body["states"] = list(states)
        return Call("POST", "/v1/cancel", Cancellation.parse, json=body)

    @staticmethod
    def reprioritize(queue: str, priority: int, job_set: str | None, job_ids: Iterable[str] | None) -> Call:
        return Call("POST", "/v1/reprioritize", lambda data: list(data["reprioritized"]),
                    json={"queue": queue, "priority": priority, **_selector(job_set, job_ids)})

    @staticmethod
    def queues() -> Call:
        return Call("GET", "/v1/queues", lambda data: [Queue.parse(q) for q in data["queues"]])

    @staticmethod
    def queue(name: str) -> Call:
        return Call("GET", f"/v1/queues/{name}", Queue.parse)

    @staticmethod
    def pending(name: str, limit: int | None) -> Call:
        return Call("GET", f"/v1/queues/{name}/pending", QueuePending.parse,
                    params={"limit": limit} if limit is not None else None)

    @staticmethod
    def create_queue(body: dict) -> Call:
        return Call("POST", "/v1/queues", Queue.parse, json=body)

    @staticmethod
    def update_queue(body: dict) -> Call:
        return Call("PUT", f"/v1/queues/{body['name']}", Queue.parse, json=body)

    @staticmethod
    def delete_queue(name: str, force: bool) -> Call:
        return Call("DELETE", f"/v1/queues/{name}", QueueDeletion.parse, params={"force": "true"} if force else None)

    @staticmethod
    def cordon_queue(name: str, cordon: bool) -> Call:
        return Call("POST", f"/v1/queues/{name}/{'cordon' if cordon else 'uncordon'}",
                    lambda data: bool(data["cordoned"]))

    @staticmethod
    def nodes() -> Call:
        return Call("GET", "/v1/nodes", lambda data: dict(data["nodes"]))

    @staticmethod
    def drain_node(cluster: str, node: str, drain: bool) -> Call:
        return Call("POST", f"/v1/nodes/{cluster}/{node}/{'drain' if drain else 'uncordon'}",
                    lambda data: bool(data["draining"]))

    @staticmethod
    def health() -> Call:
        return Call("GET", "/v1/health", dict)

    @staticmethod
    def set_cluster_available(name: str, available: bool) -> Call:
        return Call("POST", f"/v1/admin/clusters/{name}/{'start' if available else 'stop'}",
                    lambda data: bool(data["available"]))


def log_params(pod: int, tail: int | None, follow: bool, container: str | None = None) -> dict:
    params: dict[str, Any] = {"pod": pod, "follow": str(follow).lower()}
    if tail is not None:
        params["tail"] = tail
    if container is not None:
        params["container"] = container
    return params


def watch_params(after: int, follow: bool) -> dict:
    return {"after": after, "follow": str(follow).lower()}


def event_line(line: str) -> dict | None:
    """One line of a jsonl event stream as JSON, or None for a keep-alive."""
    line = line.strip()
    return json.loads(line) if line else None
