"""Kubernetes adapter: configure the official client and make the two raw pod calls.

Both calls return undeserialized JSON (``_preload_content=False``): a LIST of 10,000 pods
parsed as plain dicts takes a fraction of the time and memory of ``V1Pod`` objects.
Every library error is wrapped into ``discovery.errors`` (chosen by HTTP status) ``from``
the original.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import kubernetes.client
import kubernetes.config
import urllib3.exceptions
from kubernetes.client.rest import ApiException
from kubernetes.config.config_exception import ConfigException

from discovery.errors import APIConnectionError, ConfigError, api_error_for_status


def load_api_client(kubeconfig: str | None = None) -> kubernetes.client.ApiClient:
    """An ``ApiClient`` from ``kubeconfig`` (or ``$KUBECONFIG``, ``~/.kube/config``), else in-cluster.

    Does not touch the network. Raises ``ConfigError`` naming the file or the cause.
    """
    cfg = kubernetes.client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG") or None
    default = os.path.expanduser("~/.kube/config")
    if path is None and os.path.exists(default):
        path = default
    try:
        if path is not None:
            if not os.path.exists(path):
                raise ConfigError(f"kubeconfig {path} does not exist")
            kubernetes.config.load_kube_config(config_file=path, client_configuration=cfg)
        else:
            kubernetes.config.load_incluster_config(client_configuration=cfg)
    except ConfigException as e:
        where = f"kubeconfig {path}" if path else "no kubeconfig and not in a cluster"
        raise ConfigError(f"{where}: {e}") from e
    except (OSError, ValueError, TypeError, AttributeError) as e:
        raise ConfigError(f"kubeconfig {path}: {e}") from e
    cfg.retries = False
    return kubernetes.client.ApiClient(cfg)


def _wrap(e: BaseException, what: str) -> Exception:
    if isinstance(e, ApiException):
        reason = e.reason or ""
        try:
            body = json.loads(e.body or b"{}")
            reason = body.get("message") or reason
        except (ValueError, AttributeError, TypeError):
            pass
        return api_error_for_status(e.status, f"{what}: HTTP {e.status} {reason}".strip())
    return APIConnectionError(f"{what}: {type(e).__name__}: {e}")


_LIBRARY_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError)


@dataclass(frozen=True)
class PodQuery:
    """Which pods: a namespace (``""``: all namespaces) and label/field selectors."""

    namespace: str
    label_selector: str = ""
    field_selector: str = ""


class PodAPI:
    """The raw pod LIST and WATCH calls. Blocking; safe to use from one thread at a time."""

    def __init__(self, api_client: kubernetes.client.ApiClient, query: PodQuery,
                 connect_timeout: float = 5.0) -> None:
        self._core = kubernetes.client.CoreV1Api(api_client)
        self.query = query
        self._connect_timeout = connect_timeout

    def _call(self, **kw: Any) -> Any:
        q = self.query
        if q.label_selector:
            kw["label_selector"] = q.label_selector
        if q.field_selector:
            kw["field_selector"] = q.field_selector
        if q.namespace:
            return self._core.list_namespaced_pod(q.namespace, **kw)
        return self._core.list_pod_for_all_namespaces(**kw)

    def list(self, read_timeout: float = 60.0) -> tuple[list[dict[str, Any]], str]:
        """One LIST -> ``(pods as dicts, the list's resourceVersion)``. Raises ``APIError``."""
        try:
            resp = self._call(_preload_content=False,
                              _request_timeout=(self._connect_timeout, read_timeout))
            data = resp.data
        except _LIBRARY_ERRORS as e:
            raise _wrap(e, "list pods") from e
        try:
            body = json.loads(data)
            return list(body.get("items") or []), str(body["metadata"]["resourceVersion"])
        except (ValueError, KeyError, TypeError) as e:
            raise APIConnectionError(f"list pods: malformed response: {e}") from e

    def watch(self, resource_version: str, timeout_seconds: int) -> Any:
        """Open one WATCH from ``resource_version`` with bookmarks; returns the open response.

        Read it with ``iter_events``. Raises ``APIError`` (``APIGoneError`` on HTTP 410).
        """
        try:
            return self._call(watch=True, allow_watch_bookmarks=True,
                              resource_version=resource_version, timeout_seconds=timeout_seconds,
                              _preload_content=False,
                              _request_timeout=(self._connect_timeout, timeout_seconds + 30))
        except _LIBRARY_ERRORS as e:
            raise _wrap(e, "watch pods") from e


def iter_events(resp: Any) -> Iterator[dict[str, Any]]:
    """Events (``{"type", "object"}`` dicts) from an open watch response, as they arrive.

    Ends when the server ends the stream; raises ``APIConnectionError`` if it breaks.
    """
    buf = b""
    try:
        for chunk in resp.stream(amt=None, decode_content=True):
            buf += chunk
            while True:
                nl = buf.find(b"\n")
                if nl < 0:
                    break
                line, buf = buf[:nl], buf[nl + 1:]
                if line.strip():
                    yield _event(line)
        if buf.strip():
            yield _event(buf)
    except _LIBRARY_ERRORS as e:
        raise _wrap(e, "watch pods") from e
    finally:
        resp.release_conn()


def _event(line: bytes) -> dict[str, Any]:
    try:
        ev = json.loads(line)
        if not isinstance(ev, dict) or "type" not in ev or not isinstance(ev.get("object"), dict):
            raise ValueError("not a watch event")
        return ev
    except ValueError as e:
        raise APIConnectionError(f"watch pods: malformed event: {e}: {line[:120]!r}") from e
