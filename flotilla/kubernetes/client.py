"""A thin, fast REST layer over the official ``kubernetes`` client.

The official client (pinned ``kubernetes>=37,<38``) does what is hard to get
right: reading a kubeconfig and one of its contexts, client certificates,
bearer tokens, exec plugins, TLS. Its typed models are another matter: a pod
deserialized into pydantic models costs a millisecond or more, and a
scheduler reading tens of thousands of watch events, or creating thousands
of pods a second, cannot afford that. So this module takes the official
client's configuration and connection pool (``RESTClientObject``) and sends
plain JSON over it: request bodies are dicts serialized once, responses and
watch events come back as dicts.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Iterator
from urllib.parse import quote, urlencode

import urllib3
from kubernetes import config as kube_config
from kubernetes.client import Configuration
from kubernetes.client.rest import RESTClientObject


class KubeError(Exception):
    """Base of the errors raised here."""


class Unreachable(KubeError):
    """The API server could not be reached (connection refused, reset, timed out)."""


class ApiError(KubeError):
    """The API server answered with an error status."""

    def __init__(self, status: int, body: Any, method: str = "", path: str = ""):
        self.status = status
        self.body = body
        self.reason = body.get("reason", "") if isinstance(body, dict) else ""
        message = body.get("message", "") if isinstance(body, dict) else str(body)[:300]
        super().__init__(f"{method} {path}: {status} {self.reason} {message}".strip())


class WatchBroken(Unreachable):
    """A watch stream that was flowing ended abruptly; re-watch from the last version before calling it an outage."""


class Gone(ApiError):
    """410: a watch's resource version is too old; relist."""


def load_configuration(kubeconfig: str | None = None, context: str | None = None) -> Configuration:
    """A client configuration from a kubeconfig file (``~`` expanded) and an optional context."""
    cfg = Configuration()
    path = os.path.expanduser(kubeconfig or os.environ.get("KUBECONFIG", "~/.kube/config"))
    kube_config.load_kube_config(config_file=path, context=context, client_configuration=cfg,
                                 persist_config=False)
    return cfg


def load_in_cluster_configuration(token_file: str | None = None, ca_file: str | None = None,
                                  environ: dict | None = None) -> Configuration:
    """The pod's own credentials: its service-account token and CA, through the official in-cluster loader.

    Defaults are the loader's (``/var/run/secrets/kubernetes.io/serviceaccount``
    and ``KUBERNETES_SERVICE_HOST``/``_PORT``); the token is read again when it
    is rotated. Raises ``kubernetes.config.ConfigException`` outside a pod.
    """
    from kubernetes.config import incluster_config

    cfg = Configuration()
    incluster_config.InClusterConfigLoader(
        token_filename=token_file or incluster_config.SERVICE_TOKEN_FILENAME,
        cert_filename=ca_file or incluster_config.SERVICE_CERT_FILENAME,
        environ=os.environ if environ is None else environ).load_and_set(cfg)
    return cfg


def forbidden_message(exc: "ApiError") -> str:
    """A 403 as one line naming the verb and resource that is missing (the API server's own words)."""
    detail = exc.body.get("message", "") if isinstance(exc.body, dict) else str(exc.body)[:300]
    return f"permission missing: {detail or exc} (grant it in the ClusterRole, see deploy/rbac.yaml)"


class KubeClient:
    """JSON over the official client's connection pool; thread-safe.

    ``timeout`` bounds ordinary requests (connect and read); watches use
    their own read timeout a little above the server-side ``timeoutSeconds``.
    """

    def __init__(self, configuration: Configuration, pool_size: int = 32, timeout: float = 10.0,
                 protobuf: bool = True):
        self.protobuf = protobuf
        configuration.connection_pool_maxsize = pool_size
        self.configuration = configuration
        self.host = configuration.host.rstrip("/")
        self.timeout = timeout
        self._rest = RESTClientObject(configuration)
        self._pool: urllib3.PoolManager = self._rest.pool_manager
        self._lock = threading.Lock()
        #: The open watch streams and the stop event each was begun with, for :meth:`end_watches`.
        self._watches: dict[urllib3.BaseHTTPResponse, threading.Event | None] = {}

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | None = None, context: str | None = None, **kwargs) -> "KubeClient":
        return cls(load_configuration(kubeconfig, context), **kwargs)

    @classmethod
    def from_in_cluster(cls, token_file: str | None = None, ca_file: str | None = None, environ: dict | None = None,
                        **kwargs) -> "KubeClient":
        return cls(load_in_cluster_configuration(token_file, ca_file, environ), **kwargs)

    def _headers(self, content_type: str | None = None, accept: str = "application/json") -> dict[str, str]:
        headers = {"Accept": accept, "User-Agent": "flotilla"}
        if content_type:
            headers["Content-Type"] = content_type
        for setting in self.configuration.auth_settings().values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"]] = setting["value"]
        return headers

    def request(self, method: str, path: str, body: Any = None, params: dict | None = None,
                timeout: float | None = None, content_type: str = "application/json", parse: bool = True,
                accept: str = "application/json") -> Any:
        """Send one request; the decoded JSON answer (``parse=False``: None, the answer unread on success)."""
        url = self.host + path
        if params:
            url += "?" + urlencode(params)
        data = None
        if body is not None:
            data = body if isinstance(body, (bytes, str)) else json.dumps(body, separators=(",", ":"))
        t = timeout or self.timeout
        try:
            response = self._pool.request(method, url, body=data,
                                          headers=self._headers(content_type if data is not None else None, accept),
                                          timeout=urllib3.Timeout(connect=min(t, 5.0), read=t), retries=False)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise Unreachable(f"{method} {self.host}{path}: {exc}") from exc
        if not parse and response.status < 400:
            return None
        raw = response.data
        try:
            if raw.startswith(b"k8s\x00"):
                from flotilla.kubernetes.protobuf import decode_status
                payload = decode_status(raw) if response.status >= 400 else raw
            else:
                payload = json.loads(raw) if raw else None
        except ValueError:
            payload = raw.decode("utf-8", "replace")
        if response.status >= 400:
            cls = Gone if response.status == 410 else ApiError
            raise cls(response.status, payload, method, path)
        return payload

    def create_pod(self, namespace: str, manifest: dict) -> None:
        """Create a pod, sent as protobuf when the manifest allows (much cheaper for the API server), else JSON."""
        from flotilla.kubernetes.protobuf import CONTENT_TYPE, Unsupported, encode_pod
        if self.protobuf:
            try:
                body = encode_pod(manifest)
            except Unsupported:
                body = None
            if body is not None:
                self.request("POST", pod_path(namespace), body, content_type=CONTENT_TYPE, accept=CONTENT_TYPE,
                             parse=False)
                return
        self.request("POST", pod_path(namespace), manifest, parse=False)

    def get(self, path: str, **params) -> Any:
        return self.request("GET", path, params=params or None)

    def post(self, path: str, body: Any, parse: bool = True, **params) -> Any:
        return self.request("POST", path, body, params=params or None, parse=parse)

    def delete(self, path: str, body: Any = None, **params) -> Any:
        return self.request("DELETE", path, body, params=params or None)

    def patch(self, path: str, body: Any, kind: str = "application/merge-patch+json") -> Any:
        return self.request("PATCH", path, body, content_type=kind)

    def watch(self, path: str, resource_version: str, timeout_seconds: int = 60,
              stop: threading.Event | None = None, **params) -> Iterator[dict]:
        """Yield watch events (dicts with ``type`` and ``object``) from ``resource_version``, bookmarks included.

        Raises :class:`Gone` when the version is too old (also when the server
        says so inside the stream), :class:`Unreachable` when the connection
        fails or breaks. Returns normally when the server closes the watch,
        and as soon as ``stop`` is set and :meth:`end_watches` is called with
        it, however long the server would have kept the stream open.
        """
        query = {"watch": "1", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
                 "timeoutSeconds": str(timeout_seconds), **params}
        url = f"{self.host}{path}?{urlencode(query)}"
        try:
            response = self._pool.request("GET", url, headers=self._headers(), preload_content=False,
                                          timeout=urllib3.Timeout(connect=5.0, read=timeout_seconds + 15),
                                          retries=False)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise Unreachable(f"watch {self.host}{path}: {exc}") from exc
        with self._lock:
            self._watches[response] = stop
        try:
            # Registered first, checked second: a stop set with end_watches() before this point is seen here,
            # one set after it finds the response registered and shuts it.
            if stop is not None and stop.is_set():
                return
            if response.status >= 400:
                raw = response.read()
                try:
                    payload = json.loads(raw)
                except ValueError:
                    payload = raw.decode("utf-8", "replace")
                raise (Gone if response.status == 410 else ApiError)(response.status, payload, "WATCH", path)
            buffer = b""
            for chunk in response.stream(65536, decode_content=True):
                if stop is not None and stop.is_set():
                    return
                buffer += chunk
                while True:
                    end = buffer.find(b"\n")
                    if end < 0:
                        break
                    line, buffer = buffer[:end], buffer[end + 1:]
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object") or {}
                        code = status.get("code", 500)
                        raise (Gone if code == 410 else ApiError)(code, status, "WATCH", path)
                    yield event
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if stop is not None and stop.is_set():
                return   # shut by end_watches()
            raise WatchBroken(f"watch {self.host}{path} broke: {exc}") from exc
        finally:
            with self._lock:
                self._watches.pop(response, None)
            response.release_conn()

    def end_watches(self, stop: threading.Event) -> None:
        """End now the open watches begun with ``stop`` (set it first): their readers return instead of waiting
        for the server's ``timeoutSeconds``. Watches with another stop event (other users of this client) go on."""
        # Under the lock: a watch ending by itself meanwhile hands its connection back to the pool only after
        # leaving _watches, so no connection another request has taken is shut here.
        with self._lock:
            for response, event in self._watches.items():
                if event is stop:
                    try:
                        response.shutdown()
                    except (OSError, RuntimeError):
                        # Already closed, or read to its end and handed back to the pool by urllib3 (a stream
                        # that ended or an error answer read whole) just before its reader leaves _watches.
                        pass

    def pod_log(self, namespace: str, name: str, *, container: str | None = None, tail_lines: int | None = None,
                limit_bytes: int | None = None, follow: bool = False,
                read_timeout: float | None = None) -> urllib3.BaseHTTPResponse:
        """A pod's container log (``pods/log``, which the API server fetches from the node's kubelet), unread.

        The caller reads or streams the answer and then calls ``release_conn()``;
        another thread may call ``shutdown()`` on it to end a blocked read. With
        ``follow`` the stream ends when the container ends. Raises
        :class:`ApiError` (400 while the container has not started, 404 once the
        pod is gone) or :class:`Unreachable`.
        """
        params: dict[str, str] = {}
        if container:
            params["container"] = container
        if tail_lines is not None:
            params["tailLines"] = str(tail_lines)
        if limit_bytes is not None:
            params["limitBytes"] = str(limit_bytes)
        if follow:
            params["follow"] = "true"
        path = pod_path(namespace, name) + "/log"
        url = f"{self.host}{path}" + (f"?{urlencode(params)}" if params else "")
        try:
            response = self._pool.request("GET", url, headers=self._headers(), preload_content=False, retries=False,
                                          timeout=urllib3.Timeout(connect=5.0, read=read_timeout or self.timeout))
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise Unreachable(f"GET {self.host}{path}: {exc}") from exc
        if response.status >= 400:
            raw = response.read()
            response.release_conn()
            try:
                payload = json.loads(raw)
            except ValueError:
                payload = raw.decode("utf-8", "replace")
            raise ApiError(response.status, payload, "GET", path)
        return response

    def healthy(self, timeout: float = 2.0) -> bool:
        try:
            self.request("GET", "/readyz", timeout=timeout)
            return True
        except KubeError:
            return False

    def close(self) -> None:
        self._pool.clear()


def pod_path(namespace: str, name: str = "") -> str:
    base = f"/api/v1/namespaces/{quote(namespace)}/pods"
    return f"{base}/{quote(name)}" if name else base


__all__ = ["ApiError", "Gone", "KubeClient", "KubeError", "Unreachable", "WatchBroken", "forbidden_message",
           "load_configuration", "load_in_cluster_configuration", "pod_path"]
