"""A small httpx client for the API; what the CLI commands use.

Server address and token, first found wins: the arguments (``--url`` and
``--token``), the environment (``FLOTILLA_URL``, ``FLOTILLA_TOKEN``), the
client config file (``$FLOTILLA_CLIENT_CONFIG``, else
``~/.config/flotilla/client.yaml``: ``{url: ..., token: ...}``), then
``http://127.0.0.1:8080`` and no token.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import yaml

DEFAULT_URL = "http://127.0.0.1:8080"


class ClientError(Exception):
    """The server said no (``status`` set) or could not be reached (``status`` 0)."""

    def __init__(self, status: int, message: str, body: Any = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.body = body


def client_config_path() -> Path:
    return Path(os.environ.get("FLOTILLA_CLIENT_CONFIG") or Path.home() / ".config" / "flotilla" / "client.yaml")


def resolve(url: str | None = None, token: str | None = None) -> tuple[str, str | None]:
    file: dict = {}
    path = client_config_path()
    if (not url or not token) and path.is_file():
        try:
            file = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError):
            file = {}
    url = url or os.environ.get("FLOTILLA_URL") or file.get("url") or DEFAULT_URL
    token = token or os.environ.get("FLOTILLA_TOKEN") or file.get("token")
    return url.rstrip("/"), token


def _message(response: httpx.Response) -> tuple[str, Any]:
    """The server's one-line message (``{"error": {"message": ...}}``) and the whole body."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip() or response.reason_phrase, None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"]), body
    return json.dumps(body), body


class Client:
    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 60.0,
                 transport: httpx.BaseTransport | None = None):
        self.url, self.token = resolve(url, token)
        # JSON on every request: a local service without tokens refuses state changes that do not say so.
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout, transport=transport)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def request(self, method: str, path: str, **kwargs) -> Any:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ClientError(0, f"cannot reach {self.url}: {exc}") from None
        if response.status_code >= 400:
            message, body = _message(response)
            raise ClientError(response.status_code, message, body)
        return response.json()

    # -- jobs ------------------------------------------------------------------
    def submit(self, job_file: dict) -> dict:
        return self.request("POST", "/v1/submit", json=job_file)

    def cancel(self, queue: str, job_set: str | None = None, job_ids: list[str] | None = None,
               states: list[str] | None = None) -> dict:
        body: dict[str, Any] = {"queue": queue}
        if job_set is not None:
            body["jobSetId"] = job_set
        if job_ids:
            body["jobIds"] = list(job_ids)
        if states:
            body["states"] = list(states)
        return self.request("POST", "/v1/cancel", json=body)

    def reprioritize(self, queue: str, priority: int, job_set: str | None = None,
                     job_ids: list[str] | None = None) -> dict:
        body: dict[str, Any] = {"queue": queue, "priority": priority}
        if job_set is not None:
            body["jobSetId"] = job_set
        if job_ids:
            body["jobIds"] = list(job_ids)
        return self.request("POST", "/v1/reprioritize", json=body)

    def status(self, job_id: str) -> dict:
        return self.request("GET", f"/v1/jobs/{job_id}")

    def jobs(self, queue: str, job_set: str) -> list[dict]:
        return self.request("GET", f"/v1/queues/{queue}/jobsets/{job_set}/jobs")["jobs"]

    def watch(self, queue: str, job_set: str, after: int = 0, follow: bool = True,
              reconnect: float = 60.0) -> Iterator[dict]:
        """The job set's events, oldest first; after a dropped connection, resumes after the last event seen.

        Gives up when the server has not been reachable for ``reconnect`` seconds. The server's last event
        of kind ``end`` (queue deleted, token revoked or expired, access withdrawn) is not given: the request
        made again then says why, as a :class:`ClientError` (404, 401 or 403).
        """
        position = after
        down_since: float | None = None
        while True:
            try:
                with self.http.stream("GET", f"/v1/queues/{queue}/jobsets/{job_set}/events",
                                      params={"after": position, "follow": str(follow).lower()},
                                      timeout=httpx.Timeout(10.0, read=None)) as response:
                    if response.status_code >= 400:
                        response.read()
                        message, body = _message(response)
                        raise ClientError(response.status_code, message, body)
                    down_since = None
                    for line in response.iter_lines():
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        position = event["id"]
                        if event.get("kind") == "end":
                            break
                        yield event
                if not follow:
                    return
            except (httpx.TransportError, httpx.StreamError) as exc:
                now = time.monotonic()
                down_since = down_since or now
                if now - down_since > reconnect:
                    raise ClientError(0, f"lost {self.url} and could not reconnect: {exc}") from None
            time.sleep(0.5)

    # -- queues ----------------------------------------------------------------
    def queues(self) -> list[dict]:
        return self.request("GET", "/v1/queues")["queues"]

    def queue(self, name: str) -> dict:
        return self.request("GET", f"/v1/queues/{name}")

    def create_queue(self, body: dict) -> dict:
        return self.request("POST", "/v1/queues", json=body)

    def update_queue(self, name: str, body: dict) -> dict:
        return self.request("PUT", f"/v1/queues/{name}", json=body)

    def delete_queue(self, name: str, force: bool = False) -> dict:
        return self.request("DELETE", f"/v1/queues/{name}", params={"force": "true"} if force else None)

    def cordon_queue(self, name: str, cordon: bool) -> dict:
        return self.request("POST", f"/v1/queues/{name}/{'cordon' if cordon else 'uncordon'}")

    # -- nodes -----------------------------------------------------------------
    def nodes(self) -> dict:
        return self.request("GET", "/v1/nodes")["nodes"]

    def drain_node(self, cluster: str, node: str, drain: bool) -> dict:
        return self.request("POST", f"/v1/nodes/{cluster}/{node}/{'drain' if drain else 'uncordon'}")

    def health(self) -> dict:
        return self.request("GET", "/v1/health")

    def cluster(self, name: str, action: str) -> dict:
        return self.request("POST", f"/v1/admin/clusters/{name}/{action}")
