"""A small standard-library client for the local cluster's pod API and admin API.

``Client(api_url, token, ca_file=...)`` (``https`` URLs are verified against ``ca_file``):
``request(method, path, body=None, content_type=...)`` -> the decoded JSON body. An error
response becomes the matching ``ApiError`` subclass (by HTTP code and reason); an unreachable
server becomes ``ClusterError``. Used by the CLI and the test handle, which must not depend on
the ``kubernetes`` package to start or stop a cluster.
"""
from __future__ import annotations

import http.client
import json
import ssl
import urllib.parse

from . import errors
from .errors import ApiError, ClusterError

_BY_CODE = {400: errors.BadRequest, 401: errors.Unauthorized, 404: errors.NotFound,
            405: errors.MethodNotAllowed, 409: errors.Conflict, 410: errors.Expired,
            415: errors.UnsupportedMediaType, 422: errors.Invalid, 504: errors.Timeout}


class Client:
    """Blocking JSON-over-HTTP calls to ``api_url`` with an optional bearer token."""

    def __init__(self, api_url: str, token: str | None = None, timeout: float = 10.0,
                 ca_file: str | None = None) -> None:
        parsed = urllib.parse.urlsplit(api_url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"api_url must be http(s)://host:port, got {api_url!r}")
        self._ssl = ssl.create_default_context(cafile=ca_file) if parsed.scheme == "https" else None
        self.api_url = api_url
        self.host, self.port = parsed.hostname, parsed.port or 80
        self.token = token
        self.timeout = timeout

    def request(self, method: str, path: str, body=None, content_type: str = "application/json",
                query: dict | None = None):
        if query:
            path += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        conn: http.client.HTTPConnection  # HTTPSConnection is one
        if self._ssl is not None:
            conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=self._ssl)
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            raise ClusterError(f"cannot reach the cluster API at {self.api_url}: {exc}") from exc
        finally:
            conn.close()
        try:
            decoded = json.loads(raw) if raw else None
        except ValueError:
            decoded = None
        if resp.status >= 400:
            message = (decoded or {}).get("message") if isinstance(decoded, dict) else None
            message = message or raw.decode(errors="replace").strip() or resp.reason
            cls = _BY_CODE.get(resp.status, ApiError)
            if resp.status == 409 and isinstance(decoded, dict) and decoded.get("reason") == "AlreadyExists":
                cls = errors.AlreadyExists
            err = cls(message)
            if cls is ApiError:
                err.code = resp.status
            raise err
        return decoded

    # convenience ------------------------------------------------------------------------
    def list_pods(self, namespace: str | None = "default", label_selector: str | None = None) -> list[dict]:
        path = "/api/v1/pods" if namespace is None else f"/api/v1/namespaces/{namespace}/pods"
        return self.request("GET", path, query={"labelSelector": label_selector})["items"]

    def get_pod(self, name: str, namespace: str = "default") -> dict:
        return self.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")

    def create_pod(self, pod: dict, namespace: str = "default") -> dict:
        return self.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)

    def delete_pod(self, name: str, namespace: str = "default", grace_seconds: int | None = None) -> dict:
        return self.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}",
                            query={"gracePeriodSeconds": grace_seconds})

    def patch_pod(self, name: str, patch, namespace: str = "default", subresource: str | None = None,
                  content_type: str = "application/merge-patch+json") -> dict:
        path = f"/api/v1/namespaces/{namespace}/pods/{name}" + (f"/{subresource}" if subresource else "")
        return self.request("PATCH", path, patch, content_type=content_type)
