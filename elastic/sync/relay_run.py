"""Dataset relay, the running part: peer servers and the scheduler of the copy tree.

    report = distribute(src, dest, hosts, options, relay="auto", peers=[...])

``distribute`` is what ``dataset-sync`` calls: it decides (``relay.choose_path``, the one place
of the rule) between the plain parallel sync (``service.sync_dataset``), the relay and the
chunk-by-chunk relay (``elastic.sync.pipeline_run``, whose senders include the peers too), and
returns the same ``SyncReport``, whose ``path`` names the one taken and whose ``source`` per
host says who served its copy.

The relay (see ``elastic.sync.relay`` for the channel and its threat model):

1. ``peers`` (hosts outside this run that may hold the dataset, e.g. the job's current hosts
   when one late joiner is prepared) are probed over SSH, at most 8 at once (a peer that is
   gone costs one connect timeout); each whose current version has this manifest and passes
   the quick check becomes a sender;
2. the launcher is a sender too. A free sender is paired with a pending host
   (``relay.assign``: peers first); each host runs the per-host engine of the parallel path
   (``elastic.sync.hostsync.HostSync``: lock, probe, copy, verify against the manifest, atomic
   publish), pulling from its peer when the sender is one. A host that committed becomes a
   sender for the rest of the run;
3. a peer is served by a ``PeerServer``: the read-only rsync daemon started over the
   launcher's SSH session on first use and stopped at the end of the run;
4. a failed attempt is retried at once from another sender (the one that failed is not asked
   again for that host); a peer whose server died, or whose copy failed verification at a
   child, serves no one else. A host fails after ``options.retry.attempts`` attempts, or at once
   for a failure that cannot heal (host key, DEST refused, lock timeout).

Blocks until every host is done; failures of single hosts are in the report, never raised.
"""
from __future__ import annotations

import logging
import queue
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from elastic.common.hostlist import Host
from elastic.common.table import human_bytes
from elastic.errors import ConfigError, SSHError, SyncError, VerifyFailed
from elastic.ssh.exec import SSHClient
from elastic.sync.cancel import CancelToken
from elastic.sync.hostsync import Attempt, Expected, HostOutcome, HostSync, as_sync_error, retryable
from elastic.sync.options import SyncOptions
from elastic.sync.peers import PeerServer
from elastic.sync.pipeline_run import PipelineRun
from elastic.sync.progress import ProgressBoard
from elastic.sync.relay import LAUNCHER, PeerSource, RelaySchedule, choose_path, serve_script
from elastic.sync.remote import parse_probe, probe_script
from elastic.sync.service import SyncReport, prepare, sync_dataset

log = logging.getLogger("dataset-sync")


@dataclass
class _Done:
    host: str
    sender: str
    result: Attempt | None = None
    error: BaseException | None = None


def distribute(src: str, dest: str, hosts: list[Host], options: SyncOptions | None = None, *,
               relay: str = "auto", peers: Sequence[str] = (), cancel: CancelToken | None = None,
               board_hook=None, on_assign: Callable[[str, str], None] | None = None,
               on_transfer: Callable[[str, str, int], None] | None = None) -> SyncReport:
    """Sync ``src`` to ``dest`` on ``hosts``, by relay or not (``relay``: auto|on|off|pipeline,
    ``relay.choose_path``); see the module docstring. ``on_assign(sender, host)`` is told of each copy started,
    ``on_transfer(sender, host, chunk)`` of each chunk started by the pipeline (for tests).
    Raises ``ConfigError`` for bad input, like ``sync_dataset``."""
    options = options or SyncOptions()
    names = [h.name for h in hosts]
    peer_names = [p for p in dict.fromkeys(peers) if p not in names]
    path = choose_path(relay, len(names), len(peer_names), options.transport)
    if path == "parallel":
        return sync_dataset(src, dest, hosts, options, cancel=cancel, board_hook=board_hook)
    cancel = cancel or CancelToken()
    if not names:
        raise ConfigError("no hosts to sync to")
    if len(set(names)) != len(names):
        raise ConfigError(f"a host is listed twice: {', '.join(sorted({n for n in names if names.count(n) > 1}))}")
    started = time.monotonic()
    src_real, layout, manifest = prepare(src, dest, options)
    log.info("manifest: %d files, %s, digest %s; %s over %d hosts (+%d peers)", len(manifest.files),
             human_bytes(manifest.total_bytes), manifest.digest[:12], path, len(names), len(peer_names))
    expected = Expected(manifest)
    board = ProgressBoard(names, len(manifest.files), manifest.total_bytes)
    if board_hook is not None:
        board_hook(board)
    with tempfile.TemporaryDirectory(prefix="ds-", dir="/tmp") as control_dir:
        if path == "pipeline":
            outcomes = PipelineRun(names, src_real, layout, expected, options, board, cancel, control_dir,
                                   int(options.chunk_mib * 2**20), on_transfer, peers=peer_names).run()
        else:
            run = _RelayRun(names, peer_names, src_real, layout, expected, options, board, cancel, control_dir,
                            on_assign)
            try:
                outcomes = run.run()
            finally:
                run.stop_servers()
    return SyncReport(src_real, layout.dest, manifest.digest, len(manifest.files), manifest.total_bytes,
                      round(time.monotonic() - started, 3), outcomes, path)


class _RelayRun:
    """One relay run's state; ``run`` is the scheduler loop (the calling thread), copies run on
    worker threads and report back on a queue."""

    def __init__(self, names, peers, src, layout, expected, options, board, cancel, control_dir, on_assign) -> None:
        self.names, self.peers, self.src, self.layout = names, peers, src, layout
        self.expected, self.options, self.board, self.cancel = expected, options, board, cancel
        self.control_dir, self.on_assign = control_dir, on_assign
        self.client = SSHClient(config=options.ssh_config, connect_timeout=options.connect_timeout,
                                control_dir=control_dir)
        self.servers: dict[str, PeerServer] = {}
        self.allow = names + peers
        self._starter = ThreadPoolExecutor(max_workers=8, thread_name_prefix="relay-serve")

    def _server(self, peer: str) -> PeerSource:
        server = self.servers.get(peer)
        if server is None or not server.alive:
            layout, digest, allow, options = self.layout, self.expected.manifest.digest, self.allow, self.options
            server = PeerServer(peer, lambda port: serve_script(layout, digest, peer, port, allow, options.bwlimit_kbps,
                                                                options.remote_rsync),
                                SSHClient(config=options.ssh_config, connect_timeout=options.connect_timeout))
            self.servers[peer] = server
            server.start()
        assert server.source is not None
        return server.source

    def stop_servers(self) -> None:
        self._starter.shutdown(wait=True)
        for server in self.servers.values():
            server.stop()

    def _peer_has_copy(self, peer: str) -> bool:
        """Probe ``peer`` (quick check of its current version against the manifest)."""
        try:
            proc = self.client.run(peer, probe_script(self.layout, self.options.remote_rsync,
                                                      self.expected.manifest.digest, "quick", self.expected.quick),
                                   timeout=self.options.command_timeout)
            ok = proc.returncode == 0 and parse_probe(proc.stdout.decode()).unchanged
        except (SSHError, SyncError) as exc:
            log.warning("peer %s cannot serve: %s", peer, exc)
            return False
        finally:
            self.client.close_master(peer)
        return ok

    def run(self) -> tuple[HostOutcome, ...]:
        with ThreadPoolExecutor(max_workers=8, thread_name_prefix="relay-probe") as pool:
            holders = list(pool.map(self._peer_has_copy, self.peers))
        schedule = RelaySchedule(self.names, [LAUNCHER] + [p for p, ok in zip(self.peers, holders, strict=True) if ok])
        attempts = schedule.attempts
        outcomes: dict[str, HostOutcome] = {}
        workers = {n: HostSync(n, self.src, self.layout, self.expected, self.options,
                               SSHClient(config=self.options.ssh_config, connect_timeout=self.options.connect_timeout,
                                         control_dir=self.control_dir), self.board, self.cancel)
                   for n in self.names}
        first_start: dict[str, float] = {}
        done: queue.Queue[_Done] = queue.Queue()
        while not schedule.finished:
            if self.cancel.cancelled:
                for n in schedule.give_up_pending():
                    outcomes[n] = HostOutcome(n, False, attempts=attempts[n], error=f"{n}: interrupted", source="-")
                if schedule.finished:
                    break
            for sender, host in schedule.next_pairs() if not self.cancel.cancelled else ():
                first_start.setdefault(host, time.monotonic())
                if self.on_assign is not None:
                    self.on_assign(sender, host)
                threading.Thread(target=self._copy, args=(workers[host], sender, attempts[host], done),
                                 name=f"relay {sender}->{host}", daemon=True).start()
            d = done.get()
            host, sender = d.host, d.sender
            seconds = round(time.monotonic() - first_start[host], 3)
            if d.result is not None:  # the attempt returned (d.error is None)
                outcomes[host] = workers[host].outcome(d.result, seconds, attempts[host])
                self.board.update(host, phase="done")
                schedule.succeeded(host, sender)
                continue
            assert d.error is not None
            exc = as_sync_error(host, d.error)
            dead = False
            if sender != LAUNCHER:
                server = self.servers.get(sender)
                if isinstance(exc, VerifyFailed) or (server is not None and server.gone):
                    dead = True  # its copy is bad, or its server is gone: it serves no one else
                    log.warning("peer %s no longer serves (%s)", sender, exc)
            give_up = attempts[host] >= self.options.retry.attempts or not retryable(exc) or self.cancel.cancelled
            schedule.failed(host, sender, dead=dead, retry=not give_up)
            if give_up:
                outcomes[host] = workers[host].failure(exc, seconds, attempts[host])
                self.board.update(host, phase="failed")
            else:
                log.warning("%s (attempt %d, from %s); retrying from another source", exc, attempts[host], sender)
                self.board.update(host, phase="retrying")
        return tuple(outcomes[n] for n in self.names)

    def _copy(self, worker: HostSync, sender: str, number: int, done: queue.Queue[_Done]) -> None:
        """One attempt of ``worker``'s host from ``sender``. The peer's server starts while the
        host takes its lock and is probed; the copy waits for it."""
        try:
            if sender == LAUNCHER:
                worker.peer = None
            else:
                starting = self._starter.submit(self._server, sender)
                worker.peer = starting.result
            done.put(_Done(worker.host, sender, worker.attempt(number)))
        except BaseException as exc:  # noqa: BLE001 - reported to the scheduler, which decides
            done.put(_Done(worker.host, sender, error=exc))
