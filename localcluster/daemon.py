"""The cluster's background process: API server + kubelet + admin endpoint in one event loop.

``python -m localcluster.daemon --state-dir DIR [--ssh-port P] [--isolation namespaces|none]
[--runtime processes|containers --image IMAGE [--shared-dir DIR]...]
[--api-port N] [--no-auth] [--history N] [--bookmark-interval S]`` (started by
``local-cluster up`` and ``localcluster.testing.running_cluster``):

1. claims a free ``127.A.B.0/24`` block, makes the cluster key ``DIR/ssh/id_ed25519`` if missing;
2. serves the pod API on ``127.0.0.1`` (bearer token) and the admin API on another loopback
   port (same token): ``POST /restart-api?down=S``, ``/drop-watches``, ``/compact``,
   ``/latency?seconds=S``, ``/fail-watches?code=N`` (0 to stop), ``/shutdown``; ``GET /info``;
3. starts the kubelet, writes ``DIR/kubeconfig`` and, last, ``DIR/state.json`` (atomically):
   its presence means "the API answers";
4. runs until SIGTERM/SIGINT or ``/shutdown``: then stops every pod, removes ``state.json`` and
   ``kubeconfig``, and exits 0. Pods bound to other nodes that are being deleted are removed
   when their grace period ends (no kubelet will report them stopped).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import secrets
import signal
import sys
import time
from datetime import datetime, timezone

from aiohttp import web

from shared.exitcodes import EXIT_FAILURE, EXIT_OK

from . import pods
from .addresses import claim_block
from .api import ApiServer
from .core import PodService
from .errors import LocalClusterError
from .keys import ensure_cluster_key
from .kubelet import Kubelet, managed
from .leases import Leases
from .objects import Objects
from .replicasets import ReplicaSets
from .statefiles import StatePaths, render_kubeconfig, write_atomic
from .store import Event, Store
from .tls import ensure_certs, server_context

log = logging.getLogger("localcluster.daemon")


class Reaper:
    """Removes pods of other nodes once their deletion grace period has passed."""

    def __init__(self, service: PodService) -> None:
        self.service = service
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._token: int | None = None

    def start(self) -> None:
        self._token = self.service.store.subscribe(self._on_event)

    def stop(self) -> None:
        if self._token is not None:
            self.service.store.unsubscribe(self._token)
        for t in self._timers.values():
            t.cancel()
        self._timers.clear()

    def _on_event(self, event: Event) -> None:
        pod, meta = event.object, event.object["metadata"]
        if event.type == "DELETED" or managed(pod) or not meta.get("deletionTimestamp"):
            timer = self._timers.pop(meta["uid"], None) if event.type == "DELETED" else None
            if timer:
                timer.cancel()
            return
        delay = (pods.parse_time(meta["deletionTimestamp"]) - datetime.now(timezone.utc)).total_seconds()
        old = self._timers.pop(meta["uid"], None)
        if old:
            old.cancel()
        loop = asyncio.get_running_loop()
        self._timers[meta["uid"]] = loop.call_later(
            max(0.0, delay), self.service.finish_deletion, meta["namespace"], meta["name"], meta["uid"])


class Daemon:
    """Owns the store, the API server, the kubelet and the admin endpoint of one cluster."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.paths = StatePaths(args.state_dir)
        self.token = None if args.no_auth else secrets.token_urlsafe(24)
        self.admin_token = self.token or secrets.token_urlsafe(24)
        self.store = Store(history_limit=args.history)
        self.service = PodService(self.store)
        self.api = ApiServer(self.service, self.token, bookmark_interval=args.bookmark_interval)
        self.replicasets = ReplicaSets(self.service)
        self.api.replicasets = self.replicasets
        self.api.podtemplates = Objects("podtemplates", "v1", "PodTemplate")
        # deleting a Job deletes (or orphans) the ReplicaSets it owns: the garbage collector
        self.api.jobs = Objects("jobs", "batch/v1", "Job", owned=self.replicasets.collect)
        self.api.leases = Leases()
        self.api.events = Objects("events", "v1", "Event")
        self.kubelet: Kubelet | None = None
        self.reaper = Reaper(self.service)
        self.stopping = asyncio.Event()
        self._admin_runner: web.AppRunner | None = None
        self._bg: set[asyncio.Task] = set()

    async def run(self) -> None:
        args, paths = self.args, self.paths
        paths.root.mkdir(parents=True, exist_ok=True)
        ensure_cluster_key(paths)
        prefix, lock = claim_block()
        self.kubelet = Kubelet(self.service, paths, prefix, args.ssh_port, args.isolation,
                               runtime=args.runtime, image=args.image, shared_dirs=args.shared_dir,
                               capacity=args.capacity)
        self.api.log_path = self.kubelet.log_path
        ca, cert, key = ensure_certs(paths.tls_dir)
        api_port = await self.api.start("127.0.0.1", args.api_port, server_context(cert, key))
        admin_port = await self._start_admin()
        self.reaper.start()
        await self.kubelet.start()
        controller = asyncio.get_running_loop().create_task(self._replicaset_controller())
        api_url = f"https://127.0.0.1:{api_port}"
        write_atomic(paths.kubeconfig, render_kubeconfig(api_url, self.token, ca.read_bytes()), 0o600)
        state = {"pid": os.getpid(), "api": api_url, "admin": f"http://127.0.0.1:{admin_port}",
                 "token": self.token, "admin_token": self.admin_token, "ssh_port": args.ssh_port,
                 "block": prefix + ".0/24", "isolation": args.isolation, "runtime": args.runtime,
                 "image": args.image, "kubeconfig": str(paths.kubeconfig),
                 "identity": str(paths.identity), "ca": str(ca), "state_dir": str(paths.root), "started": time.time()}
        write_atomic(paths.state, json.dumps(state, indent=2) + "\n", 0o600)
        log.info("cluster up: api %s, block %s.0/24, ssh port %d", api_url, prefix, args.ssh_port)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        await self.stopping.wait()
        log.info("shutting down")
        controller.cancel()
        for f in (paths.state, paths.kubeconfig):
            try:
                f.unlink()
            except FileNotFoundError:
                pass
        await self.kubelet.stop()
        self.reaper.stop()
        await self.api.stop()
        if self._admin_runner is not None:
            await self._admin_runner.cleanup()
        lock.close()

    async def _replicaset_controller(self, interval: float = 0.5) -> None:
        """The ReplicaSet controller: a pass every ``interval`` seconds (pods made or gone,
        readiness changed); writes through the API run a pass at once."""
        while True:
            try:
                self.replicasets.reconcile()
            except Exception:  # noqa: BLE001 - one bad pass must not end the controller
                log.exception("replicaset controller pass failed")
            await asyncio.sleep(interval)

    async def _start_admin(self) -> int:
        app = web.Application()
        app.router.add_post("/restart-api", self._restart)
        app.router.add_post("/drop-watches", self._drop)
        app.router.add_post("/compact", self._compact)
        app.router.add_post("/latency", self._latency)
        app.router.add_post("/fail-watches", self._fail_watches)
        app.router.add_post("/shutdown", self._shutdown)
        app.router.add_get("/info", self._info)
        runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._admin_runner = runner
        return runner.addresses[0][1]

    def _authorized(self, request: web.Request) -> None:
        if request.headers.get("Authorization") != f"Bearer {self.admin_token}":
            raise web.HTTPUnauthorized(text="unauthorized\n")

    def _float(self, request: web.Request, key: str) -> float:
        try:
            return float(request.query.get(key, "0"))
        except ValueError:
            raise web.HTTPBadRequest(text=f"{key} must be a number\n") from None

    async def _restart(self, request):
        self._authorized(request)
        down = self._float(request, "down")
        await self.api.stop()
        task = asyncio.create_task(self.api.restart(down))
        self._bg.add(task)
        task.add_done_callback(self._restarted)
        return web.json_response({"restarting": True, "down_seconds": down})

    def _restarted(self, task: asyncio.Task) -> None:
        self._bg.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("the API server could not listen again: %s; stopping the cluster", task.exception())
            self.stopping.set()
        else:
            log.info("API server listening again")

    async def _drop(self, request):
        self._authorized(request)
        return web.json_response({"dropped": self.api.drop_watches()})

    async def _compact(self, request):
        self._authorized(request)
        self.store.compact()
        return web.json_response({"compacted_to": self.store.resource_version})

    async def _latency(self, request):
        self._authorized(request)
        self.api.latency = max(0.0, self._float(request, "seconds"))
        return web.json_response({"latency": self.api.latency})

    async def _fail_watches(self, request):
        self._authorized(request)
        code = int(self._float(request, "code"))
        if code and not 400 <= code < 600:
            raise web.HTTPBadRequest(text="code must be an HTTP error code (400-599) or 0\n")
        self.api.watch_error = code or None
        return web.json_response({"watch_error": self.api.watch_error})

    async def _shutdown(self, request):
        self._authorized(request)
        self.stopping.set()
        return web.json_response({"stopping": True})

    async def _info(self, request):
        self._authorized(request)
        return web.json_response({"pid": os.getpid(), "pods": len(self.store),
                                  "resourceVersion": self.store.resource_version,
                                  "open_watches": self.api.open_watches, "latency": self.api.latency})


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m localcluster.daemon", description=__doc__.split("\n\n")[0])
    p.add_argument("--state-dir", required=True)
    p.add_argument("--ssh-port", type=int, default=2222)
    p.add_argument("--api-port", type=int, default=0)
    p.add_argument("--isolation", choices=["namespaces", "none"], default="namespaces")
    p.add_argument("--runtime", choices=["processes", "containers"], default="processes")
    p.add_argument("--image", default=None, help="worker image of --runtime containers")
    p.add_argument("--shared-dir", action="append", default=[],
                   help="host directory mounted at the same path in every container (repeatable)")
    p.add_argument("--no-auth", action="store_true")
    p.add_argument("--capacity", type=int, default=0,
                   help="most pods the node runs at once; the rest stay Pending (0: no limit)")
    p.add_argument("--history", type=int, default=1000)
    p.add_argument("--bookmark-interval", type=float, default=5.0)
    args = p.parse_args(argv)
    if args.capacity < 0:
        p.error(f"--capacity must be >= 0, got {args.capacity}")
    if (args.runtime == "containers") != bool(args.image):
        p.error("--image is needed with --runtime containers, and only there")
    if args.shared_dir and args.runtime != "containers":
        p.error("--shared-dir is only for --runtime containers")
    if any(not os.path.isabs(d) or not os.path.isdir(d) or ":" in d for d in args.shared_dir):
        p.error(f"--shared-dir must name existing absolute directories without ':', got {args.shared_dir}")
    from pathlib import Path
    args.state_dir = Path(args.state_dir).resolve()
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s",
                        stream=sys.stderr)
    if args.runtime == "processes" and args.isolation == "namespaces" and os.geteuid() != 0:
        print("error: pods with their own hostname and /data need root (namespaces); run as root or "
              "use --isolation none", file=sys.stderr)
        return EXIT_FAILURE
    try:
        asyncio.run(Daemon(args).run())
    except LocalClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
