"""The HTTP shell of the pod API: aiohttp routes over ``PodService`` (Kubernetes core/v1 Pods).

``ApiServer(service, token, ...)`` serves, on loopback:

- discovery: ``/api``, ``/api/v1`` (pods, pods/status), ``/apis``, ``/version``, health paths,
  and a minimal ``/openapi/v3`` (Pods accept server-side field validation; no schemas);
- pods: ``/api/v1/pods`` and ``/api/v1/namespaces/{ns}/pods[/{name}[/status]]`` with GET (get,
  list, ``watch=true|1``), POST, PUT, PATCH (merge, JSON, strategic), DELETE, deletecollection;
  the legacy ``/api/v1/watch/...`` paths; kubectl's server-side ``Table`` when asked for.
- ``pods/{name}/log``: the pod's sshd log (``tailLines``, ``follow``), for ``kubectl logs``;
- ``events``: list, and create when ``events`` is set (kept as sent: the worker scaler records
  the launcher's end on its Job); the list ignores selectors;
- apps/v1 ``replicasets`` and ``replicasets/{name}/scale`` (``localcluster.replicasets``) when
  ``replicasets`` is set: get, list, create, update, patch, delete; no watch;
- core/v1 ``podtemplates`` and batch/v1 ``jobs`` (``localcluster.objects``) when
  ``podtemplates`` and ``jobs`` are set: get, list, create, delete (``propagationPolicy`` from
  the query or the DeleteOptions body: the owned ReplicaSets are deleted, or orphaned); no Job
  controller, no watch;
- coordination.k8s.io/v1 ``leases`` (``localcluster.leases``) when ``leases`` is set: get,
  list, create, update (409 on a stale resourceVersion), patch, delete; no watch;
- errors as ``Status`` objects; 401 without the bearer token (when a token is set).

A watch stream starts with ADDED events for the current state when no resourceVersion (or
"0") is given, else replays history after it or sends one ERROR event (410 Expired) and
ends. ``allowWatchBookmarks`` adds BOOKMARK events every ``bookmark_interval`` seconds;
``timeoutSeconds`` ends the stream cleanly. Fault injection: ``restart(down_seconds)`` (stop
listening, drop all connections, listen again on the same port; state is kept),
``drop_watches()`` (abort every open watch connection), ``latency`` (seconds added to every
request), ``watch_error`` (an HTTP code, or None: every new watch answers one ERROR event with
that code and ends, as a server does for errors other than 410). ``start()``/``stop()`` are
explicit; nothing starts in the constructor.
"""
from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from . import leases as leasing
from . import pods, replicasets
from .core import PodService, dumps
from .errors import ApiError, BadRequest, InjectedFault, MethodNotAllowed, NotFound, Timeout, Unauthorized
from .leases import Leases
from .objects import Objects
from .replicasets import ReplicaSets
from .selectors import parse_fields, parse_labels
from .store import Event, Scope, watch_view

log = logging.getLogger("localcluster.api")

OPEN_PATHS = {"/healthz", "/livez", "/readyz", "/version"}
VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0-localcluster", "gitCommit": "",
           "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23",
           "compiler": "gc", "platform": "linux/amd64"}
POD_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
API_RESOURCES = {
    "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1",
    "resources": [
        {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod", "verbs": POD_VERBS,
         "shortNames": ["po"], "categories": ["all"]},
        {"name": "pods/status", "singularName": "", "namespaced": True, "kind": "Pod",
         "verbs": ["get", "patch", "update"]},
        {"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]},
        {"name": "events", "singularName": "event", "namespaced": True, "kind": "Event", "verbs": ["create", "list"],
         "shortNames": ["ev"]},
    ],
}


APPS_GROUP = {"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
              "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"}}
APPS_RESOURCES = {
    "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "apps/v1",
    "resources": [
        {"name": "replicasets", "singularName": "replicaset", "namespaced": True, "kind": "ReplicaSet",
         "verbs": ["create", "delete", "get", "list", "patch", "update"], "shortNames": ["rs"], "categories": ["all"]},
        {"name": "replicasets/scale", "singularName": "", "namespaced": True, "group": "autoscaling",
         "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]},
    ],
}

PODTEMPLATES = {"name": "podtemplates", "singularName": "podtemplate", "namespaced": True, "kind": "PodTemplate",
                "verbs": ["create", "delete", "get", "list"]}
BATCH_GROUP = {"name": "batch", "versions": [{"groupVersion": "batch/v1", "version": "v1"}],
               "preferredVersion": {"groupVersion": "batch/v1", "version": "v1"}}
BATCH_RESOURCES = {
    "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "batch/v1",
    "resources": [{"name": "jobs", "singularName": "job", "namespaced": True, "kind": "Job",
                   "verbs": ["create", "delete", "get", "list"], "categories": ["all"]}],
}


COORDINATION_GROUP = {"name": leasing.GROUP, "versions": [{"groupVersion": leasing.API_VERSION, "version": "v1"}],
                      "preferredVersion": {"groupVersion": leasing.API_VERSION, "version": "v1"}}
COORDINATION_RESOURCES = {
    "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": leasing.API_VERSION,
    "resources": [
        {"name": "leases", "singularName": "lease", "namespaced": True, "kind": "Lease",
         "verbs": ["create", "delete", "get", "list", "patch", "update"]},
    ],
}


# A minimal OpenAPI v3 description of core/v1: enough for kubectl to see that Pods support
# server-side field validation (so `kubectl apply`/`create -f` need no client-side schema).
OPENAPI_HASH = "localcluster-1"
OPENAPI_ROOT = {"paths": {"api/v1": {"serverRelativeURL": f"/openapi/v3/api/v1?hash={OPENAPI_HASH}"}}}
OPENAPI_V1 = {
    "openapi": "3.0.0",
    "info": {"title": "Kubernetes (localcluster)", "version": "v1.32.0"},
    "paths": {"/api/v1/namespaces/{namespace}/pods/{name}": {"patch": {
        "operationId": "patchCoreV1NamespacedPod",
        "x-kubernetes-action": "patch",
        "x-kubernetes-group-version-kind": {"group": "", "kind": "Pod", "version": "v1"},
        "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}}],
        "responses": {"200": {"description": "OK"}},
    }}},
    "components": {"schemas": {
        "io.k8s.api.core.v1.Pod": {
            "description": "Pod is a collection of containers that can run on a host.",
            "type": "object",
            "x-kubernetes-group-version-kind": [{"group": "", "kind": "Pod", "version": "v1"}],
        },
    }},
}


def _json(obj, status: int = 200, warnings: list[str] | None = None) -> web.Response:
    resp = web.Response(body=dumps(obj), status=status, content_type="application/json")
    for w in warnings or []:
        text = w.replace("\\", "\\\\").replace('"', '\\"')
        resp.headers.add("Warning", f'299 - "{text}"')
    return resp


def _field_validation(query, body) -> list[str]:
    """``fieldValidation``: Strict -> 400 on unknown fields; Warn (default) -> warnings; Ignore."""
    mode = query.get("fieldValidation") or "Warn"
    if mode not in ("Strict", "Warn", "Ignore"):
        raise BadRequest(f"fieldValidation must be Strict, Warn or Ignore, got {mode!r}")
    unknown = [] if mode == "Ignore" else pods.unknown_fields(body)
    if unknown and mode == "Strict":
        raise BadRequest("strict decoding error: " + ", ".join(f'unknown field "{f}"' for f in unknown))
    return [f'unknown field "{f}"' for f in unknown]


def _status(err: ApiError) -> web.Response:
    return _json(err.status(), err.code)


def _flag(value: str | None) -> bool:
    return (value or "").lower() in ("1", "true", "yes")


def _int_param(query, key: str) -> int | None:
    value = query.get(key)
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError:
        raise BadRequest(f"invalid value for {key}: {value!r} is not an integer") from None


def _wants_table(request: web.Request) -> bool:
    return "as=Table" in request.headers.get("Accept", "")


def _encode_continue(rv: int, key: tuple[str, str]) -> str:
    return base64.urlsafe_b64encode(json.dumps({"rv": rv, "start": list(key)}).encode()).decode()


def _decode_continue(token: str) -> tuple[str, str]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        return data["start"][0], data["start"][1]
    except Exception:
        raise BadRequest(f"invalid continue token {token!r}") from None


class _Watch:
    """One open watch stream: a queue fed by the store and a way to drop it."""

    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.queue: asyncio.Queue = asyncio.Queue()

    def drop(self) -> None:
        self.queue.put_nowait(None)


class ApiServer:
    """The loopback pod API. ``start(host, port)`` -> the bound port; ``stop()``; faults."""

    def __init__(self, service: PodService, token: str | None = None, bookmark_interval: float = 5.0) -> None:
        self.service = service
        self.token = token
        self.bookmark_interval = bookmark_interval
        self.latency = 0.0
        self.watch_error: int | None = None
        self.host = "127.0.0.1"
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._watches: set[_Watch] = set()
        self._ssl = None
        # pod -> its log file, for pods/log (set by the owner of the kubelet); None: no logs
        self.log_path: Callable[[dict], Path | None] | None = None
        # apps/v1 ReplicaSets (localcluster.replicasets), served when set
        self.replicasets: ReplicaSets | None = None
        # core/v1 PodTemplates and batch/v1 Jobs (localcluster.objects), served when set
        self.podtemplates: Objects | None = None
        self.jobs: Objects | None = None
        # core/v1 Events (localcluster.objects), stored when set; else an empty list
        self.events: Objects | None = None
        # coordination.k8s.io/v1 Leases (localcluster.leases), served when set
        self.leases: Leases | None = None

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self, host: str = "127.0.0.1", port: int = 0, ssl_context=None) -> int:
        """Listen on ``host:port`` (0 = any free port; HTTPS with ``ssl_context``); returns the
        port. Does not block."""
        self.host = host
        if ssl_context is not None:
            self._ssl = ssl_context
        app = web.Application(middlewares=[self._middleware], client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0,
                               handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, host, port, reuse_address=True, ssl_context=self._ssl)
        await site.start()
        self._runner = runner
        self.port = runner.addresses[0][1]
        return self.port

    async def stop(self) -> None:
        """Stop listening and close every connection (watches end abruptly)."""
        self.drop_watches()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def restart(self, down_seconds: float) -> None:
        """Go away for ``down_seconds`` (connections refused), then listen on the same port."""
        if self._runner is not None:
            await self.stop()
        await asyncio.sleep(max(0.0, down_seconds))
        for _ in range(50):
            try:
                await self.start(self.host, self.port)
                return
            except OSError:  # the port may linger briefly
                await asyncio.sleep(0.1)
        await self.start(self.host, self.port)

    def drop_watches(self) -> int:
        """Abort every open watch connection; returns how many there were."""
        watches = list(self._watches)
        for w in watches:
            w.drop()
        return len(watches)

    @property
    def open_watches(self) -> int:
        return len(self._watches)

    # -- plumbing --------------------------------------------------------------------------
    @web.middleware
    async def _middleware(self, request: web.Request, handler):
        if self.latency > 0:
            await asyncio.sleep(self.latency)
        try:
            if self.token and request.path not in OPEN_PATHS:
                auth = request.headers.get("Authorization", "")
                if auth != f"Bearer {self.token}":
                    raise Unauthorized("Unauthorized")
            return await handler(request)
        except ApiError as err:
            return _status(err)
        except web.HTTPException:
            raise
        except Exception:  # a bug: answer like Kubernetes does, keep serving
            log.exception("%s %s failed", request.method, request.path_qs)
            return _status(ApiError("Internal error occurred: see the cluster's daemon.log"))

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        method = request.method
        if parts in (["healthz"], ["livez"], ["readyz"]):
            return web.Response(text="ok")
        if parts == ["version"]:
            return _json(VERSION)
        if parts == ["api"]:
            return _json({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{self.host}:{self.port}"}]})
        if parts == ["apis"]:
            groups = [APPS_GROUP] if self.replicasets is not None else []
            groups += [BATCH_GROUP] if self.jobs is not None else []
            groups += [COORDINATION_GROUP] if self.leases is not None else []
            return _json({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        if parts[:2] == ["apis", "apps"] and self.replicasets is not None:
            return await self._apps(request, parts[2:])
        if parts[:2] == ["apis", "batch"] and self.jobs is not None:
            return await self._batch(request, parts[2:])
        if parts[:2] == ["apis", leasing.GROUP] and self.leases is not None:
            return await self._coordination(request, parts[2:])
        if parts == ["api", "v1"]:
            if self.podtemplates is None:
                return _json(API_RESOURCES)
            return _json({**API_RESOURCES, "resources": [*API_RESOURCES["resources"], PODTEMPLATES]})
        if parts == ["openapi", "v3"]:
            return _json(OPENAPI_ROOT)
        if parts == ["openapi", "v3", "api", "v1"]:
            return _json(OPENAPI_V1)
        if len(parts) >= 2 and parts[:2] == ["api", "v1"]:
            rest = parts[2:]
            watch_path = bool(rest) and rest[0] == "watch"
            if watch_path:
                rest = rest[1:]
            namespace = None
            if len(rest) >= 2 and rest[0] == "namespaces":
                namespace = rest[1]
                if len(rest) == 2 and method == "GET" and not watch_path:
                    return _json(_namespace(namespace))
                rest = rest[2:]
            elif rest == ["namespaces"] and method == "GET":
                return _json({"kind": "NamespaceList", "apiVersion": "v1", "metadata": {},
                              "items": [_namespace("default")]})
            if rest == ["events"] and not watch_path and not _flag(request.query.get("watch")):
                # the events clients create (the worker scaler's on its Job), kept as sent; the
                # list ignores selectors (`kubectl describe` asks with one and shows them all)
                if method == "POST" and namespace is not None and self.events is not None:
                    return _json(self.events.create(namespace, await self._body(request)), 201)
                if method == "GET":
                    items = self.events.in_namespace(namespace) if self.events is not None else []
                    return _json({"kind": "EventList", "apiVersion": "v1", "items": items,
                                  "metadata": {"resourceVersion": str(self.service.store.resource_version)}})
            if (rest and rest[0] == "podtemplates" and len(rest) <= 2 and namespace is not None and not watch_path
                    and self.podtemplates is not None):
                return await self._objects(request, self.podtemplates, namespace, rest[1] if len(rest) == 2 else None)
            if rest and rest[0] == "pods" and len(rest) <= 3:
                name = rest[1] if len(rest) >= 2 else None
                sub = rest[2] if len(rest) == 3 else None
                if sub == "log" and name is not None and namespace is not None and method == "GET" and not watch_path:
                    return await self._log(request, namespace, name)
                if sub not in (None, "status") or (name is None and namespace is None and method != "GET"):
                    raise NotFound("the server could not find the requested resource")
                if watch_path:
                    if method != "GET" or sub:
                        raise MethodNotAllowed("watch paths only support GET")
                    return await self._watch(request, namespace, name)
                return await self._pods(request, namespace, name, sub)
        raise NotFound("the server could not find the requested resource")

    async def _apps(self, request: web.Request, rest: list[str]) -> web.Response:
        """``/apis/apps``, ``/apis/apps/v1`` and ``/apis/apps/v1/namespaces/{ns}/replicasets
        [/{name}[/scale]]``: GET, POST, PUT, PATCH, DELETE (``localcluster.replicasets``)."""
        sets, method = self.replicasets, request.method
        assert sets is not None
        if rest == []:
            return _json({"kind": "APIGroup", "apiVersion": "v1", **APPS_GROUP})
        if rest == ["v1"]:
            return _json(APPS_RESOURCES)
        if len(rest) < 4 or rest[:2] != ["v1", "namespaces"] or rest[3] != "replicasets" or len(rest) > 6:
            raise NotFound("the server could not find the requested resource")
        namespace = rest[2]
        name = rest[4] if len(rest) >= 5 else None
        sub = rest[5] if len(rest) == 6 else None
        if sub not in (None, "scale"):
            raise NotFound("the server could not find the requested resource")
        if name is None:
            if method == "GET":
                items = sets.in_namespace(namespace)
                return _json({"kind": "ReplicaSetList", "apiVersion": "apps/v1", "items": items,
                              "metadata": {"resourceVersion": "0"}})
            if method == "POST":
                return _json(sets.create(namespace, replicasets.body_of(await request.read())), 201)
            raise MethodNotAllowed(f"{method} is not supported on this path")
        if method == "GET":
            return _json(sets.scale(namespace, name) if sub else sets.get(namespace, name))
        if method == "PATCH":
            result = sets.patch(namespace, name, request.headers.get("Content-Type", ""), await request.read(), sub)
        elif method == "PUT":
            result = sets.replace(namespace, name, replicasets.body_of(await request.read()), sub)
        elif method == "DELETE" and sub is None:
            return _json(sets.delete(namespace, name))
        else:
            raise MethodNotAllowed(f"{method} is not supported on this path")
        sets.reconcile()  # the controller acts on the new spec at once
        return _json(result)

    async def _batch(self, request: web.Request, rest: list[str]) -> web.Response:
        """``/apis/batch``, ``/apis/batch/v1`` and ``/apis/batch/v1/namespaces/{ns}/jobs[/{name}]``."""
        assert self.jobs is not None
        if rest == []:
            return _json({"kind": "APIGroup", "apiVersion": "v1", **BATCH_GROUP})
        if rest == ["v1"]:
            return _json(BATCH_RESOURCES)
        if not (4 <= len(rest) <= 5 and rest[:2] == ["v1", "namespaces"] and rest[3] == "jobs"):
            raise NotFound("the server could not find the requested resource")
        return await self._objects(request, self.jobs, rest[2], rest[4] if len(rest) == 5 else None)

    async def _objects(self, request: web.Request, objects: Objects, namespace: str,
                       name: str | None) -> web.Response:
        """GET (one or a list), POST, DELETE of a ``localcluster.objects`` kind."""
        method = request.method
        if name is None and method == "GET":
            return _json({"kind": f"{objects.singular}List", "apiVersion": objects.api_version,
                          "items": objects.in_namespace(namespace), "metadata": {"resourceVersion": "0"}})
        if name is None and method == "POST":
            return _json(objects.create(namespace, await self._body(request)), 201)
        if name is not None and method == "GET":
            return _json(objects.get(namespace, name))
        if name is not None and method == "DELETE":
            opts = await self._body(request) or {}
            if not isinstance(opts, dict):
                raise BadRequest("the body of a delete must be DeleteOptions")
            return _json(objects.delete(namespace, name, request.query.get("propagationPolicy")
                                        or opts.get("propagationPolicy")))
        raise MethodNotAllowed(f"{method} is not supported on this path")

    async def _coordination(self, request: web.Request, rest: list[str]) -> web.Response:
        """``/apis/coordination.k8s.io[/v1]`` and ``.../v1/namespaces/{ns}/leases[/{name}]``:
        GET, POST, PUT, PATCH, DELETE (``localcluster.leases``)."""
        leases, method = self.leases, request.method
        assert leases is not None
        if rest == []:
            return _json({"kind": "APIGroup", "apiVersion": "v1", **COORDINATION_GROUP})
        if rest == ["v1"]:
            return _json(COORDINATION_RESOURCES)
        if len(rest) not in (4, 5) or rest[:2] != ["v1", "namespaces"] or rest[3] != "leases":
            raise NotFound("the server could not find the requested resource")
        namespace, name = rest[2], (rest[4] if len(rest) == 5 else None)
        if name is None:
            if method == "GET":
                if _flag(request.query.get("watch")):
                    raise MethodNotAllowed("watching leases is not supported here")
                items, rv = leases.in_namespace(namespace), str(leases.resource_version)
                if _wants_table(request):
                    return _json(leasing.table(items, self.service.clock(), request.query.get("includeObject",
                                                                                           "Metadata"), rv))
                return _json({"kind": "LeaseList", "apiVersion": leasing.API_VERSION, "items": items,
                              "metadata": {"resourceVersion": rv}})
            if method == "POST":
                return _json(leases.create(namespace, leasing.body_of(await request.read())), 201)
            raise MethodNotAllowed(f"{method} is not supported on this path")
        if method == "GET":
            lease = leases.get(namespace, name)
            if _wants_table(request):
                return _json(leasing.table([lease], self.service.clock(), request.query.get("includeObject",
                                                                                          "Metadata"),
                                           lease["metadata"]["resourceVersion"]))
            return _json(lease)
        if method == "PUT":
            return _json(leases.replace(namespace, name, leasing.body_of(await request.read())))
        if method == "PATCH":
            return _json(leases.patch(namespace, name, request.headers.get("Content-Type", ""), await request.read()))
        if method == "DELETE":
            return _json(leases.delete(namespace, name))
        raise MethodNotAllowed(f"{method} is not supported on this path")

    async def _log(self, request: web.Request, namespace: str, name: str) -> web.StreamResponse:
        """``pods/{name}/log``: the pod's sshd log (``tailLines``, ``follow`` until the pod is gone)."""
        pod = self.service.get(namespace, name)
        path = self.log_path(pod) if self.log_path is not None else None
        if path is None:
            raise BadRequest(f'pod "{name}" does not run on this machine (node "{pod["spec"].get("nodeName")}")',
                             name=name)
        tail = _int_param(request.query, "tailLines")
        try:
            data = path.read_bytes()
        except OSError:
            data = b""
        lines = data.splitlines(keepends=True)
        if tail is not None:
            lines = lines[-tail:] if tail > 0 else []
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        await resp.write(b"".join(lines))
        if _flag(request.query.get("follow")):
            offset, uid = len(data), pod["metadata"]["uid"]
            while True:
                current = self.service.store.find(namespace, name)
                if current is None or current["metadata"]["uid"] != uid:
                    break
                try:
                    with open(path, "rb") as fh:
                        fh.seek(offset)
                        more = fh.read()
                except OSError:
                    break
                if more:
                    offset += len(more)
                    await resp.write(more)
                await asyncio.sleep(0.2)
        return resp

    async def _body(self, request: web.Request):
        raw = await request.read()
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise BadRequest(f"error decoding the body as JSON: {exc}") from exc

    async def _pods(self, request, namespace, name, sub) -> web.StreamResponse:
        q, method, svc = request.query, request.method, self.service
        if method == "GET":
            if name is None or _flag(q.get("watch")):
                if _flag(q.get("watch")):
                    return await self._watch(request, namespace, name)
                return self._list(request, namespace)
            pod = svc.get(namespace, name)
            return self._render(request, pod)
        if method == "POST" and name is None:
            body = await self._body(request)
            warnings = _field_validation(q, body)
            return _json(svc.create(namespace, body if body is not None else {}), 201, warnings)
        if method == "PUT" and name is not None:
            body = await self._body(request)
            warnings = _field_validation(q, body)
            return _json(svc.replace(namespace, name, body, sub), 200, warnings)
        if method == "PATCH" and name is not None:
            raw = await request.read()
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None  # patch.apply reports it
            warnings = _field_validation(q, body if isinstance(body, dict) else None)
            return _json(svc.patch(namespace, name, request.headers.get("Content-Type", ""), raw, sub), 200,
                         warnings)
        if method == "DELETE" and sub is None:
            opts = await self._body(request) or {}
            if not isinstance(opts, dict):
                raise BadRequest("the body of a delete must be DeleteOptions")
            grace = _int_param(q, "gracePeriodSeconds")
            if grace is None and opts.get("gracePeriodSeconds") is not None:
                grace = int(opts["gracePeriodSeconds"])
            if name is not None:
                return _json(svc.delete(namespace, name, grace, opts.get("preconditions")))
            items, _ = svc.list(self._scope(request, namespace))
            deleted = [svc.delete(namespace, p["metadata"]["name"], grace) for p in items]
            return _json({"kind": "PodList", "apiVersion": "v1",
                          "metadata": {"resourceVersion": str(svc.store.resource_version)}, "items": deleted})
        raise MethodNotAllowed(f"{method} is not supported on this path")

    def _scope(self, request, namespace) -> Scope:
        q = request.query
        return Scope(namespace, parse_labels(q.get("labelSelector")), parse_fields(q.get("fieldSelector")))

    def _render(self, request, pod: dict) -> web.Response:
        if _wants_table(request):
            return _json(pods.table([pod], self.service.clock(), request.query.get("includeObject", "Metadata"),
                                    pod["metadata"]["resourceVersion"]))
        return _json(pod)

    def _list(self, request, namespace) -> web.Response:
        q = request.query
        items, rv = self.service.list(self._scope(request, namespace))
        meta: dict = {"resourceVersion": str(rv)}
        if q.get("continue"):
            start = _decode_continue(q["continue"])
            items = [p for p in items if (p["metadata"]["namespace"], p["metadata"]["name"]) > start]
        limit = _int_param(q, "limit")
        if limit and limit > 0 and len(items) > limit:
            last = items[limit - 1]["metadata"]
            meta["continue"] = _encode_continue(rv, (last["namespace"], last["name"]))
            meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        if _wants_table(request):
            return _json(pods.table(items, self.service.clock(), q.get("includeObject", "Metadata"), str(rv))
                         | {"metadata": meta})
        return _json({"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": items})

    # -- watch -----------------------------------------------------------------------------
    async def _watch(self, request: web.Request, namespace: str | None, name: str | None) -> web.StreamResponse:
        q = request.query
        scope = self._scope(request, namespace)
        if name is not None:
            scope = Scope(namespace, scope.labels, parse_fields(
                ",".join(x for x in (q.get("fieldSelector"), f"metadata.name={name}") if x)))
        timeout = _int_param(q, "timeoutSeconds")
        bookmarks = _flag(q.get("allowWatchBookmarks"))
        send_initial = q.get("sendInitialEvents")
        rv_param = q.get("resourceVersion") or ""
        if rv_param and not rv_param.isdigit():
            raise BadRequest(f"invalid resource version {rv_param!r}")
        table = _wants_table(request)
        include = q.get("includeObject", "Metadata")
        store = self.service.store
        if rv_param and int(rv_param) > store.resource_version:  # e.g. from before a `down` + `up`
            raise Timeout(f"Too large resource version: {rv_param}, current: {store.resource_version}")
        watch = _Watch(request)
        token = store.subscribe(watch.queue.put_nowait)
        self._watches.add(watch)
        resp = web.StreamResponse(headers={"Content-Type": "application/json", "Cache-Control": "no-cache, private"})
        resp.enable_chunked_encoding()
        try:
            initial: list[tuple[str, dict]] = []
            start = store.resource_version
            error = None
            if _flag(send_initial) or rv_param in ("", "0"):
                initial = [("ADDED", p) for p in store.list(scope)[0]]
            else:
                try:
                    start = int(rv_param)
                    initial = [v for v in (watch_view(e, scope) for e in store.events_since(start)) if v]
                    start = max(start, store.resource_version)
                except ApiError as err:
                    error = err
            await resp.prepare(request)

            async def send(kind: str, obj: dict) -> None:
                if table and kind in ("ADDED", "MODIFIED", "DELETED"):
                    obj = pods.table([obj], self.service.clock(), include, obj["metadata"]["resourceVersion"])
                await resp.write(dumps({"type": kind, "object": obj}) + b"\n")

            if error is None and self.watch_error is not None:
                error = InjectedFault(f"injected watch failure ({self.watch_error})", self.watch_error)
            if error is not None:
                await send("ERROR", error.status())
                return resp
            for kind, obj in initial:
                await send(kind, obj)
            if _flag(send_initial) and bookmarks:
                await send("BOOKMARK", _bookmark(store.resource_version, initial_end=True))
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout if timeout else None
            next_bookmark = loop.time() + self.bookmark_interval
            while True:
                now = loop.time()
                if deadline is not None and now >= deadline:
                    return resp
                wait = min(x for x in (deadline, next_bookmark, now + 1.0) if x is not None) - now
                try:
                    item = await asyncio.wait_for(watch.queue.get(), max(0.0, wait))
                except asyncio.TimeoutError:
                    transport = request.transport
                    if transport is None or transport.is_closing():
                        return resp
                    if bookmarks and loop.time() >= next_bookmark:
                        await send("BOOKMARK", _bookmark(store.resource_version))
                        next_bookmark = loop.time() + self.bookmark_interval
                    continue
                if item is None:  # dropped
                    if request.transport is not None:
                        request.transport.abort()
                    return resp
                event: Event = item
                if event.resource_version > start:
                    view = watch_view(event, scope)
                    if view:
                        await send(*view)
                if bookmarks and loop.time() >= next_bookmark:  # also while events keep coming
                    await send("BOOKMARK", _bookmark(store.resource_version))
                    next_bookmark = loop.time() + self.bookmark_interval
        finally:
            store.unsubscribe(token)
            self._watches.discard(watch)


def _bookmark(rv: int, initial_end: bool = False) -> dict:
    meta: dict = {"resourceVersion": str(rv)}
    if initial_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    return {"kind": "Pod", "apiVersion": "v1", "metadata": meta}


def _namespace(name: str) -> dict:
    return {"kind": "Namespace", "apiVersion": "v1",
            "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}
