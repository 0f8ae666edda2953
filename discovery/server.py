"""HTTP endpoints (aiohttp) over the service's current ``HostTable``.

- ``GET /hosts[?group=G]``  ``host:slots`` lines (text). 503 until the first sync. With
  ``--group-by`` a ``group`` is required (400 without). Headers: ``X-Discovery-Age``
  (seconds the list may be out of date), ``X-Discovery-Stale`` (``0``/``1``),
  ``X-Discovery-Generation``; with a group, ``X-Discovery-Group``: ``known`` (some selected
  pod has carried that label value, even if none is ready yet) or ``unknown`` (none ever did:
  a typo, or the job's pods are not created yet); the body is empty in both cases.
- ``GET /hosts?wait=GEN[&timeout=S]``  long poll: as ``/hosts``, but answers only once the
  served table's generation differs from GEN (at once if it already does), or after S
  seconds (default 30, at most 300) with the current one. The same fallbacks hold: the last
  good list while the API is down, 503 while not synced, never a partial list.
- ``GET /hosts.json[?group=G]``  hosts, skipped pods with reasons, waiting counts and the
  waiting pods with reasons (the first 100), pods being prepared, resourceVersion,
  staleness, watch counters; ``group_known`` as above.
- ``GET /healthz``  200 while the watch thread runs and has not given up.
- ``GET /readyz``   200 once synced and not stale; 503 with the reason otherwise.
- ``GET /metrics``  Prometheus text.

With a token every endpoint but ``/healthz`` and ``/readyz`` needs
``Authorization: Bearer <token>``. Handlers never block: they read immutable state.
"""
from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from discovery.service import DiscoveryService
from shared import discovery_wire as wire
from shared.hosts_document import HostsDocument, PreparingHost, ServedHost, SkippedPod, WaitingPod, WatchStatus

WAITING_PODS_SHOWN = 100  # /hosts.json names this many waiting pods; "waiting" counts them all
ROUTES, OPEN_ROUTES = wire.ROUTES, wire.OPEN_ROUTES


class ServiceCollector:
    """Exports the service's state at scrape time (no bookkeeping on the hot path)."""

    def __init__(self, svc: DiscoveryService) -> None:
        self.svc = svc

    def collect(self) -> Iterable[Any]:
        svc, s, t = self.svc, self.svc.status, self.svc.table
        yield GaugeMetricFamily("discovery_pods_seen", "Pods the watch selects", value=t.pods_seen)
        yield GaugeMetricFamily("discovery_hosts_served", "Hosts served on /hosts", value=t.served)
        g = GaugeMetricFamily("discovery_pods_skipped", "Pods skipped, by reason kind", labels=["reason"])
        kinds: dict[str, int] = {}
        for sk in t.skipped:
            kind = sk.reason.split(":")[0]
            kinds[kind] = kinds.get(kind, 0) + 1
        for kind, n in sorted(kinds.items()):
            g.add_metric([kind], n)
        if not kinds:
            g.add_metric(["none"], 0)
        yield g
        yield GaugeMetricFamily("discovery_pods_preparing", "Hosts waiting for --prepare-cmd",
                                value=len(t.preparing))
        yield CounterMetricFamily("discovery_watch_restarts", "Watch reconnects after errors",
                                  value=s.restarts)
        yield CounterMetricFamily("discovery_relists", "LISTs after the first one", value=s.relists)
        yield CounterMetricFamily("discovery_watch_events", "Watch events received", value=s.events)
        age = -1.0 if s.last_event_at is None else time.monotonic() - s.last_event_at
        yield GaugeMetricFamily("discovery_last_event_age_seconds",
                                "Seconds since the last watch event or list (-1: never)", value=age)
        yield GaugeMetricFamily("discovery_staleness_seconds",
                                "Seconds the served list may be out of date", value=svc.age())
        yield GaugeMetricFamily("discovery_synced", "1 once the first list is applied",
                                value=1 if s.synced else 0)
        if svc.admission is not None:
            yield CounterMetricFamily("discovery_prepare_runs", "Prepare command runs",
                                      value=svc.admission.runs)
            yield CounterMetricFamily("discovery_prepare_failures", "Prepare command failures",
                                      value=svc.admission.failures)
            if svc.admission.gate is not None:
                yield GaugeMetricFamily("discovery_prepare_waiting_to_lead",
                                        "Preparations waiting until this pod leads (--prepare-leader-lease)",
                                        value=svc.admission.gate.waiting)
        yield CounterMetricFamily("discovery_hostfile_errors", "Failed hostfile writes",
                                  value=svc.hostfile_errors)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

LONG_POLL_DEFAULT, LONG_POLL_MAX = 30.0, 300.0


async def wait_for_generation(svc: DiscoveryService, query: Any) -> None:
    """Block until the served table's generation differs from ``query['wait']`` or the
    ``timeout`` (seconds) passes; HTTPBadRequest names a bad value. Never raises otherwise."""
    try:
        seen = int(query["wait"])
        timeout = float(query.get("timeout", LONG_POLL_DEFAULT))
    except ValueError:
        raise web.HTTPBadRequest(text="wait wants a generation (integer), timeout seconds\n") from None
    if not 0 <= timeout <= LONG_POLL_MAX:
        raise web.HTTPBadRequest(text=f"timeout must be 0..{LONG_POLL_MAX:.0f} seconds\n")
    try:
        await svc.wait_for(lambda t: t.generation != seen, timeout)
    except asyncio.TimeoutError:
        pass


def make_app(svc: DiscoveryService, token: str | None = None) -> web.Application:
    """The aiohttp application. ``token``: required bearer token (None: none required)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServiceCollector(svc))
    latency = Histogram("discovery_request_seconds", "HTTP request latency", ["path"],
                        registry=registry,
                        buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0))
    want = f"Bearer {token}".encode() if token else None

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        start = time.perf_counter()
        path = request.path if request.path in ROUTES else "other"
        try:
            if want is not None and path not in OPEN_ROUTES:
                got = request.headers.get("Authorization", "").encode()
                if not hmac.compare_digest(got, want):
                    return web.Response(status=401, text="unauthorized: bearer token required\n")
            return await handler(request)
        finally:
            latency.labels(path).observe(time.perf_counter() - start)

    def group_of(request: web.Request) -> str | None:
        group = request.query.get("group")
        if svc.rules.group_by is None and group is not None:
            raise web.HTTPBadRequest(text="group given but the daemon runs without --group-by\n")
        if svc.rules.group_by is not None and not group:
            raise web.HTTPBadRequest(text=f"group required: /hosts?group=<{svc.rules.group_by} value>\n")
        return group

    def headers(group: str | None = None) -> dict[str, str]:
        h = {wire.AGE: f"{svc.age():.3f}", wire.STALE: "1" if svc.stale else "0",
             wire.GENERATION: str(svc.table.generation), "Cache-Control": "no-store"}
        if group is not None:
            h[wire.GROUP] = wire.GROUP_KNOWN if group in svc.known_groups else wire.GROUP_UNKNOWN
        return h

    async def hosts(request: web.Request) -> web.Response:
        group = group_of(request)
        if "wait" in request.query:
            await wait_for_generation(svc, request.query)
        table = svc.table
        if not table.synced:
            reason = svc.status.fatal or svc.status.last_error or "first list not done yet"
            return web.Response(status=503, text=f"not synced: {reason}\n", headers=headers())
        return web.Response(body=table.body(group), content_type="text/plain", headers=headers(group))

    async def hosts_json(request: web.Request) -> web.Response:
        group = group_of(request)
        table, s = svc.table, svc.status
        doc = HostsDocument(
            synced=table.synced, stale=svc.stale, age_seconds=round(svc.age(), 3),
            stale_after_seconds=svc.stale_after, generation=table.generation,
            resource_version=s.resource_version, pods_seen=table.pods_seen,
            group_by=svc.rules.group_by, group=group,
            group_known=None if group is None else group in svc.known_groups,
            hosts=tuple(ServedHost(host=h.host, slots=h.slots, pod=h.pod, namespace=h.namespace, uid=h.uid,
                                   ip=h.ip, group=h.group) for h in table.hosts_in(group)),
            skipped=tuple(SkippedPod(pod=k.pod, namespace=k.namespace, uid=k.uid, reason=k.reason)
                          for k in table.skipped),
            waiting=dict(table.waiting),
            preparing=tuple(PreparingHost(host=h.host, pod=h.pod, uid=h.uid) for h in table.preparing),
            waiting_pods=tuple(WaitingPod(pod=w.pod, namespace=w.namespace, reason=w.reason, detail=w.detail)
                               for w in table.waiting_pods[:WAITING_PODS_SHOWN]),
            watch=WatchStatus(connected=s.connected, lists=s.lists, relists=s.relists, restarts=s.restarts,
                              events=s.events, last_error=s.last_error, fatal=s.fatal),
        ).to_json()
        return web.Response(text=json.dumps(doc, indent=1) + "\n", content_type="application/json",
                            headers=headers(group))

    async def healthz(request: web.Request) -> web.Response:
        if svc.status.fatal:
            return web.Response(status=503, text=f"watch stopped: {svc.status.fatal}\n")
        if not svc.source.alive:
            return web.Response(status=503, text="watch thread not running\n")
        return web.Response(text="ok\n")

    async def readyz(request: web.Request) -> web.Response:
        if not svc.table.synced:
            return web.Response(status=503, text="not ready: not synced yet\n", headers=headers())
        if svc.stale:
            why = svc.status.fatal or svc.status.last_error
            return web.Response(status=503, headers=headers(),
                                text=f"not ready: stale for {svc.age():.1f}s: {why}\n")
        return web.Response(text="ok\n", headers=headers())

    async def metrics(request: web.Request) -> web.Response:
        resp = web.Response(body=generate_latest(registry))
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    app = web.Application(middlewares=[middleware])
    app.router.add_get(wire.HOSTS, hosts)
    app.router.add_get(wire.HOSTS_JSON, hosts_json)
    app.router.add_get(wire.HEALTHZ, healthz)
    app.router.add_get(wire.READYZ, readyz)
    app.router.add_get(wire.METRICS, metrics)
    return app
