"""``discovery-daemon``: watch pods, serve hosts. ``main(argv) -> int``.

Every flag also reads an environment variable (shown in ``--help``); flags win.
Exit codes: 0 after a graceful stop (SIGTERM/SIGINT), 1 when the watch gave up (e.g. a bad
selector) or the server cannot bind, 2 for bad settings. Errors are one ``error: ...`` line
on stderr; logs are JSON lines on stderr.
"""
from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import os
import signal
import sys
from collections.abc import Sequence

from discovery.environment import (
    DISCOVERY_ADDRESS,
    DISCOVERY_ADMITTED_FILE,
    DISCOVERY_CLUSTER_DOMAIN,
    DISCOVERY_DEFAULT_SLOTS,
    DISCOVERY_FIELD_SELECTOR,
    DISCOVERY_GROUP_BY,
    DISCOVERY_HOST,
    DISCOVERY_HOSTFILE,
    DISCOVERY_LOG_LEVEL,
    DISCOVERY_PODS_FILE,
    DISCOVERY_PREPARE_CMD,
    DISCOVERY_PREPARE_CONCURRENCY,
    DISCOVERY_PREPARE_LEADER_IDENTITY,
    DISCOVERY_PREPARE_LEADER_LEASE,
    DISCOVERY_PREPARE_RECHECK,
    DISCOVERY_PREPARE_RETRIES,
    DISCOVERY_PREPARE_TIMEOUT,
    DISCOVERY_SOCKET,
    DISCOVERY_STALE_AFTER,
    DISCOVERY_WATCH_TIMEOUT,
)
from discovery.errors import ConfigError, DiscoveryError
from shared.argparser import OneLineParser
from shared.environment import DISCOVERY_NAMESPACE, DISCOVERY_PORT, DISCOVERY_SELECTOR, DISCOVERY_TOKEN
from shared.envvars import env_default, parse_int, parse_positive, parse_seconds
from shared.exitcodes import EXIT_OK
from shared.runner import run_main

log = logging.getLogger("discovery.daemon")


def _int(name: str, value: str | None) -> int | None:
    return parse_int(name, value, ConfigError)


def _float(name: str, value: str | None) -> float:
    return parse_positive(name, value, ConfigError)


def _seconds_or_zero(name: str, value: str | None) -> float:
    """``value`` as seconds >= 0 (0: off); ``ConfigError`` naming ``name`` otherwise."""
    return parse_seconds(name, value, ConfigError)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="discovery-daemon",
        description="Watch the pods of a Horovod job and serve them as host:slots lines "
                    "(GET /hosts, /hosts.json, /healthz, /readyz, /metrics).")
    a = p.add_argument
    a("--namespace", default=env_default(DISCOVERY_NAMESPACE, "default"),
      help="namespace to watch; '' for all (env DISCOVERY_NAMESPACE, default 'default')")
    a("--selector", default=env_default(DISCOVERY_SELECTOR),
      help="label selector of the job's pods, required unless --pods-file (env DISCOVERY_SELECTOR)")
    a("--pods-file", default=env_default(DISCOVERY_PODS_FILE), metavar="FILE",
      help="serve the pods of this JSON file (kubectl get pods -o json, or a list of pods), read "
           "once, instead of watching the API server: a fixed set of hosts (env DISCOVERY_PODS_FILE)")
    a("--field-selector", default=env_default(DISCOVERY_FIELD_SELECTOR, ""),
      help="optional field selector (env DISCOVERY_FIELD_SELECTOR)")
    a("--kubeconfig", default=env_default("KUBECONFIG"),
      help="kubeconfig file (env KUBECONFIG; default ~/.kube/config, else in-cluster)")
    a("--host", default=env_default(DISCOVERY_HOST, "127.0.0.1"),
      help="address to listen on (env DISCOVERY_HOST, default 127.0.0.1); "
           "anything but loopback requires --token")
    a("--port", default=env_default(DISCOVERY_PORT, "8642"),
      help="TCP port, 0 for any free one (env DISCOVERY_PORT, default 8642)")
    a("--socket", default=env_default(DISCOVERY_SOCKET),
      help="listen on this unix socket instead of TCP (env DISCOVERY_SOCKET)")
    a("--token", default=env_default(DISCOVERY_TOKEN),
      help="bearer token clients must send (env DISCOVERY_TOKEN)")
    a("--default-slots", default=env_default(DISCOVERY_DEFAULT_SLOTS, "1"),
      help="slots when a pod has neither the elastic-horovod/slots annotation nor a "
           "nvidia.com/gpu limit (env DISCOVERY_DEFAULT_SLOTS, default 1)")
    a("--address", default=env_default(DISCOVERY_ADDRESS, "ip"), choices=("ip", "dns", "name"),
      help="serve pods by IP, by DNS name (headless service) or by name (env DISCOVERY_ADDRESS)")
    a("--cluster-domain", default=env_default(DISCOVERY_CLUSTER_DOMAIN, "cluster.local"),
      help="cluster DNS domain for --address dns (env DISCOVERY_CLUSTER_DOMAIN)")
    a("--group-by", default=env_default(DISCOVERY_GROUP_BY),
      help="serve each value of this pod label separately: /hosts?group=VALUE (env DISCOVERY_GROUP_BY)")
    a("--hostfile", default=env_default(DISCOVERY_HOSTFILE),
      help="also write 'host slots=N' lines (every group's hosts) here, atomically, on every "
           "change (env DISCOVERY_HOSTFILE)")
    a("--prepare-cmd", default=env_default(DISCOVERY_PREPARE_CMD),
      help="run 'CMD HOST' once per pod uid, with DISCOVERY_POD_UID, DISCOVERY_POD_NAME and "
           "DISCOVERY_POD_NAMESPACE in its environment; serve the host only after it exits 0 "
           "(env DISCOVERY_PREPARE_CMD)")
    a("--admitted-file", default=env_default(DISCOVERY_ADMITTED_FILE),
      help="keep the uids the prepare command admitted in this file, and admit them at once when "
           "started again with it (a restarted daemon; env DISCOVERY_ADMITTED_FILE)")
    a("--prepare-concurrency", default=env_default(DISCOVERY_PREPARE_CONCURRENCY, "4"),
      help="prepare commands at once (env DISCOVERY_PREPARE_CONCURRENCY, default 4)")
    a("--prepare-retries", default=env_default(DISCOVERY_PREPARE_RETRIES, "2"),
      help="retries after a failed prepare command (env DISCOVERY_PREPARE_RETRIES, default 2)")
    a("--prepare-recheck", default=env_default(DISCOVERY_PREPARE_RECHECK, "30"),
      help="seconds before a pod whose preparation failed is tried again, doubling up to 300 "
           "(env DISCOVERY_PREPARE_RECHECK, default 30; 0: never again until its uid changes)")
    a("--prepare-leader-lease", default=env_default(DISCOVERY_PREPARE_LEADER_LEASE),
      help="NAMESPACE/NAME: run --prepare-cmd only while this Lease is held by --prepare-leader-identity "
           "(a daemon beside a standby launcher prepares nothing: the hook stops the job's other runs; "
           "env DISCOVERY_PREPARE_LEADER_LEASE)")
    a("--prepare-leader-identity", default=env_default(DISCOVERY_PREPARE_LEADER_IDENTITY),
      help="the identity this pod's launcher leads as (elastic-run --leader-identity; "
           "env DISCOVERY_PREPARE_LEADER_IDENTITY)")
    a("--prepare-timeout", default=env_default(DISCOVERY_PREPARE_TIMEOUT, "600"),
      help="seconds before a prepare command is killed (env DISCOVERY_PREPARE_TIMEOUT, default 600)")
    a("--stale-after", default=env_default(DISCOVERY_STALE_AFTER, "10"),
      help="seconds without the API before the list is reported stale "
           "(env DISCOVERY_STALE_AFTER, default 10)")
    a("--watch-timeout", default=env_default(DISCOVERY_WATCH_TIMEOUT, "300"),
      help="server-side timeout of one watch call, seconds (env DISCOVERY_WATCH_TIMEOUT)")
    a("--log-level", default=env_default(DISCOVERY_LOG_LEVEL, "info"),
      choices=("debug", "info", "warning", "error"), help="(env DISCOVERY_LOG_LEVEL)")
    return p


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def _serve(args: argparse.Namespace, stop: asyncio.Event) -> int:
    from discovery.admission import PrepareSettings
    from discovery.hosts import Rules

    # settings first: a bad flag fails before the slow imports (kubernetes, aiohttp)
    if args.pods_file and args.selector:
        raise ConfigError("--pods-file and --selector exclude each other: a file or the API server")
    if not args.selector and not args.pods_file:
        raise ConfigError("--selector (or DISCOVERY_SELECTOR) is required, e.g. app=elastic-horovod")
    try:
        rules = Rules(default_slots=_int("--default-slots", args.default_slots) or 0,
                      address=args.address, group_by=args.group_by or None,
                      cluster_domain=args.cluster_domain)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    port = _int("--port", args.port)
    if port is None or not 0 <= port <= 65535:
        raise ConfigError(f"--port must be 0..65535, got {args.port!r}")
    if not args.socket and not is_loopback(args.host) and not args.token:
        raise ConfigError(f"listening on non-loopback address {args.host!r} requires --token "
                          "(or DISCOVERY_TOKEN)")
    prepare = None
    if args.prepare_cmd:
        concurrency = _int("--prepare-concurrency", args.prepare_concurrency)
        retries = _int("--prepare-retries", args.prepare_retries)
        assert concurrency is not None and retries is not None  # both options have a default
        prepare = PrepareSettings.parse(args.prepare_cmd, concurrency=concurrency, retries=retries,
                                        timeout=_float("--prepare-timeout", args.prepare_timeout),
                                        admitted_file=args.admitted_file,
                                        recheck=_seconds_or_zero("--prepare-recheck", args.prepare_recheck))
    elif args.admitted_file:
        raise ConfigError("--admitted-file needs --prepare-cmd")
    gate_lease = None
    if args.prepare_leader_lease or args.prepare_leader_identity:
        from discovery.leader_gate import check_identity, parse_lease
        if not (args.prepare_leader_lease and args.prepare_leader_identity):
            raise ConfigError("--prepare-leader-lease and --prepare-leader-identity go together")
        if not args.prepare_cmd:
            raise ConfigError("--prepare-leader-lease needs --prepare-cmd")
        if args.pods_file:
            raise ConfigError("--prepare-leader-lease needs the API server, not --pods-file")
        gate_lease = parse_lease(args.prepare_leader_lease)
        check_identity(args.prepare_leader_identity)
    stale_after = _float("--stale-after", args.stale_after)
    watch_timeout = _int("--watch-timeout", args.watch_timeout) or 0
    if watch_timeout < 1:
        raise ConfigError(f"--watch-timeout must be >= 1, got {args.watch_timeout!r}")
    if args.hostfile and not os.path.isdir(os.path.dirname(os.path.abspath(args.hostfile))):
        raise ConfigError(f"--hostfile directory does not exist: {args.hostfile}")

    if not args.pods_file and args.kubeconfig and not os.path.exists(args.kubeconfig):
        raise ConfigError(f"kubeconfig {args.kubeconfig} does not exist")
    from aiohttp import web

    from discovery.server import make_app
    from discovery.service import DiscoveryService
    from discovery.source import HostSource

    source: HostSource
    if args.pods_file:
        from discovery.file_source import StaticFileSource
        source = StaticFileSource(args.pods_file)
    else:
        from discovery.kube import PodAPI, PodQuery, load_api_client
        from discovery.kube_source import KubernetesSource
        api_client = load_api_client(args.kubeconfig)
        api = PodAPI(api_client, PodQuery(args.namespace, args.selector, args.field_selector))
        source = KubernetesSource(api, watch_timeout=watch_timeout)
    gate = None
    if gate_lease is not None:
        from discovery.leader_gate import LeaderGate, lease_holder
        gate = LeaderGate(lease_holder(api_client, *gate_lease), args.prepare_leader_identity,
                          f"Lease {gate_lease[0]}/{gate_lease[1]}")
    svc = DiscoveryService(source, rules, stale_after=stale_after, hostfile=args.hostfile, prepare=prepare,
                           prepare_gate=gate)
    from discovery.connguard import guarded_runner
    runner = guarded_runner(make_app(svc, args.token), access_log=None, handle_signals=False)
    await runner.setup()
    try:
        try:
            if args.socket:
                site: web.BaseSite = web.UnixSite(runner, args.socket)
            else:
                site = web.TCPSite(runner, args.host, port, reuse_address=True)
            await site.start()
        except OSError as e:
            where = args.socket or f"{args.host}:{port}"
            raise DiscoveryError(f"cannot listen on {where}: {e.strerror or e}") from e
        if args.socket:
            os.chmod(args.socket, 0o660)
            url = f"unix:{args.socket}"
        else:
            sock = site._server.sockets[0]  # type: ignore[union-attr]
            bound = sock.getsockname()
            url = f"http://{args.host if ':' not in args.host else '[' + args.host + ']'}:{bound[1]}"
        async with svc:
            log.info("listening", extra={"fields": {
                "url": url, "namespace": args.namespace, "selector": args.selector,
                "group_by": rules.group_by, "address": rules.address,
                "prepare_cmd": args.prepare_cmd, "hostfile": args.hostfile}})
            assert svc.failed is not None
            fatal = asyncio.get_running_loop().create_task(svc.failed.wait())
            stopper = asyncio.get_running_loop().create_task(stop.wait())
            await asyncio.wait([fatal, stopper], return_when=asyncio.FIRST_COMPLETED)
            for t in (fatal, stopper):
                t.cancel()
            if svc.status.fatal:
                raise DiscoveryError(f"watch stopped: {svc.status.fatal}")
            log.info("stopping")
    finally:
        await runner.cleanup()
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from discovery import logs
    logs.setup(args.log_level)

    async def run() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        return await _serve(args, stop)

    return run_main("discovery-daemon", lambda: asyncio.run(run()), usage=ConfigError, failure=DiscoveryError)


if __name__ == "__main__":
    sys.exit(main())
