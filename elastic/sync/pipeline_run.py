"""Pipelined relay, the running part: chunks copied between hosts as a ``ChunkSchedule`` says.

    outcomes = PipelineRun(names, src, layout, expected, options, board, cancel, control_dir).run()

``elastic.sync.relay_run.distribute`` calls it when ``relay.choose_path`` says ``pipeline``.
``peers`` (hosts outside the run that may hold the dataset, e.g. the job's hosts when a late
joiner is prepared) are probed as the relay probes them, at once with the hosts' setup; each
whose current version has this manifest and passes the quick check serves every chunk from the
start (its read-only daemon serves that verified version, ``relay.serve_script`` as in the
relay), before the launcher. Per host, under its DEST lock (held for the whole run,
``elastic.sync.lock``):

1. setup: probe (``remote.probe_script``; a host that already holds the manifest is done; a
   host without rsync leaves the pipeline and is copied on its own by SFTP from the launcher,
   ``hostsync.sync_host``, as on the parallel path, unless ``--transport rsync`` refuses it),
   then empty ``<state>/staging`` and ``<state>/serve`` and create the manifest's directories
   and symlinks in staging (they are small: every host makes its own);
2. each chunk arrives by rsync ``--files-from`` (whole files, NUL-separated list; no shell
   between us and rsync, ``--`` before the paths) -- pushed from SRC by the launcher, or pulled
   by the host from a sender's read-only rsync daemon (``peers.PeerServer`` serving the
   sender's ``serve`` directory, ``relay.serve_script(directory=...)``) -- into staging, where
   its files' SHA-256s are checked against the manifest; then they are hard-linked into
   ``serve``, which the host serves from then on. The sender is free again once the data
   arrived (the launcher after its push; a pull prints ``SENT_MARKER``): the check runs while
   it sends the next chunk, and the host holds the chunk only once the check passed (it
   receives nothing else meanwhile, so nothing writes into staging during its check);
3. once every chunk arrived: the commit (``commit_checked_script``): staging's names against
   the manifest's and each file the very inode its check linked into ``serve``, no content
   read again; then the atomic publish.

Once no chunk can move any more, every server is stopped (while the last hosts commit); at
the end every ``serve`` directory is removed and the locks are released. Failures are
classified for the schedule: a sender whose server is gone, or whose daemon refused the
connection (rsync exit ``pipeline.REFUSED_EXITS``), costs the receiver nothing, and so does a
peer whose chunk does not match the manifest (its copy differs: it serves no one any more);
any other failure is charged to the receiver (and strikes the sender, unless the receiver
itself was unreachable).
"""
from __future__ import annotations

import hashlib
import logging
import queue
import re
import shlex
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from elastic.errors import RsyncFailed, SSHError, SyncError, VerifyFailed
from elastic.ssh.exec import SSHClient
from elastic.sync.cancel import CancelToken
from elastic.sync.hostsync import Expected, HostOutcome, as_sync_error, retryable, sync_host
from elastic.sync.lock import HostLock
from elastic.sync.manifest import Manifest
from elastic.sync.options import SyncOptions
from elastic.sync.peers import PeerServer
from elastic.sync.pipeline import REFUSED_EXITS, ChunkSchedule, chunk_plan
from elastic.sync.progress import ProgressBoard
from elastic.sync.relay import LAUNCHER, PeerSource, is_ip, serve_script
from elastic.sync.remote import (
    Layout,
    new_version_name,
    not_host_files,
    parse_probe,
    probe_script,
    publish_lines,
    writer_rsync_path,
)
from elastic.sync.rsync import RsyncOptions, RsyncProgress, link_flag, run_rsync
from elastic.sync.transport import choose_transport

log = logging.getLogger("dataset-sync")
CHUNK_IO_TIMEOUT = 30   # seconds without data before a chunk's rsync gives up (a sender that vanished)
_EXIT = re.compile(r"\(exit (\d+)\)")


def serve_dir(layout: Layout) -> str:
    """The directory a host serves its verified chunks from during a pipelined run."""
    return f"{layout.state}/serve"


def chunk_flags(options: RsyncOptions, current: str, *, from_copy: bool) -> list[str]:
    """Pure: the flags of a chunk's rsync: the listed files only (``--files-from`` is added by
    the caller), permissions and times kept, the ``--symlinks`` mode's link flag, unchanged
    files hard-linked from the host's current version."""
    flags = ["-lpt", "--from0", link_flag(options.symlinks, from_copy=from_copy), "--info=progress2,stats2",
             "--no-h", f"--timeout={min(int(options.io_timeout), CHUNK_IO_TIMEOUT)}"]
    if current:
        flags.append(f"--link-dest=../{current}")
    if options.bwlimit_kbps:
        flags.append(f"--bwlimit={int(options.bwlimit_kbps)}")
    return flags


def setup_script(layout: Layout) -> str:
    """Empty staging and serve; then create, from stdin (NUL-separated: the directories, an
    empty record, then target/path pairs of the symlinks), the manifest's directories and
    links in staging and its directories in serve."""
    q = shlex.quote
    return f"""
set -e
cd -- {q(layout.state)}
rm -rf -- staging serve
mkdir staging serve
in=$(mktemp); trap 'rm -f -- "$in" "$in.d" "$in.l"' EXIT
cat > "$in"
cd staging
# records up to the first empty one: directories; after it: link target, link path, ...
sed -z -n '0,/^$/p' "$in" | sed -z '/^$/d' > "$in.d"
sed -z '0,/^$/d' "$in" > "$in.l"
xargs -0r mkdir -p -- < "$in.d"
(cd ../serve && xargs -0r mkdir -p -- < "$in.d")
xargs -0r -n2 ln -s -- < "$in.l"
echo setup=ok
"""


MISMATCH_EXIT = 97  # a chunk's check failed on the host (its files were removed from staging)
SENT_MARKER = "chunk=sent"  # a pull's line once its rsync ended: the sender's part is over


def _check_link(layout: Layout, expected: str) -> str:
    """Shell lines: check the chunk listed in ``$list`` in staging (the SHA-256 of its files'
    ``sha256sum -z`` records must be ``expected``), then hard-link its files into serve; on a
    mismatch remove them from staging (the next attempt copies them again) and exit 97."""
    q = shlex.quote
    return f"""
cd -- {q(layout.staging)} || exit 3
got=$(xargs -0r sha256sum -z -- < "$list" | sha256sum | cut -c1-64)
if [ "$got" != {q(expected)} ]; then
  xargs -0r rm -f -- < "$list"; echo "error: the chunk does not match the manifest" >&2; exit {MISMATCH_EXIT}
fi
xargs -0r cp -alf --parents -t ../serve -- < "$list" || exit 4
"""


def check_link_script(layout: Layout, expected: str) -> str:
    """Script: ``_check_link`` of the chunk listed on stdin (NUL-separated paths); exit 0 when
    it is in serve, 97 on a mismatch."""
    return f"""
list=$(mktemp) || exit 3; trap 'rm -f -- "$list"' EXIT
cat > "$list"
{_check_link(layout, expected)}"""


def pull_chunk_script(layout: Layout, source: PeerSource, current: str, options: RsyncOptions, expected: str,
                      address: str = "") -> str:
    """Script run on a host over the launcher's SSH session: pull the files listed on stdin
    (after the secret's line; NUL-separated) from ``source`` into staging, print
    ``SENT_MARKER`` once they arrived (the sender is free), then check them and link them into
    serve (``_check_link``, exit 97 on a mismatch) in the same session. Holds
    the writer lock like every rsync filling staging (``remote.writer_rsync_path``)."""
    q = shlex.quote
    opts = [*chunk_flags(options, current, from_copy=True), "--contimeout=10"]
    if address and is_ip(address):
        opts.append(f"--address={address}")
    return f"""
umask 077
exec 8>>{q(layout.writer)} && flock -s 8 || exit 3
pw=$(mktemp) || exit 3; list=$(mktemp) || exit 3
trap 'rm -f -- "$pw" "$list"' EXIT
IFS= read -r secret || exit 3
printf '%s\\n' "$secret" > "$pw"
cat > "$list"
{q(options.remote_rsync)} {' '.join(q(o) for o in opts)} --password-file="$pw" --files-from="$list" \\
  -- {q(source.url())} {q(layout.staging + '/')} || exit $?
echo {SENT_MARKER}
{_check_link(layout, expected)}"""


def names_digest(manifest: Manifest) -> str:
    """What ``commit_checked_script`` must find in staging: the SHA-256 of the sorted,
    NUL-terminated records ``D dir``, ``L path\\x01target`` and ``N file`` (the manifest's
    listing with names, not contents, for the files)."""
    records = [b"D " + d.encode() for d in manifest.dirs]
    records += [b"L " + p.encode() + b"\x01" + t.encode() for p, t in manifest.links.items()]
    records += [b"N " + p.encode() for p in manifest.files]
    return hashlib.sha256(b"".join(r + b"\0" for r in sorted(records))).hexdigest()


def commit_checked_script(layout: Layout, names: str, new_version: str, previous: str) -> str:
    """Script that commits staging once every chunk was checked: ``verify=mismatch`` (nothing
    changed) unless staging's directories, links and file names hash to ``names``
    (``names_digest``) and each of its files is the very file its chunk's check hashed -- the
    same inode as in serve, where ``_check_link`` links a file only once its SHA-256 matched
    and nothing else writes (rsync writes a new file and renames it, never into an old one).
    Then ``verify=ok`` and ``remote.publish_lines``. The contents are not read again: what the
    full ``verify_commit_script`` would hash here, every host at the same moment at the end
    of a pipelined run, was hashed chunk by chunk as it arrived."""
    q = shlex.quote
    inodes = f"find . -type f {not_host_files()} -printf '%i %P\\0' | LC_ALL=C sort -z | sha256sum | cut -c1-64"
    return f"""
cd -- {q(layout.state)}/staging || exit 3
got=$({{ find . -mindepth 1 -type d -printf 'D %P\\0'; find . -type l -printf 'L %P\\001%l\\0';
  find . -type f {not_host_files()} -printf 'N %P\\0'; }} | LC_ALL=C sort -z | sha256sum | cut -c1-64)
if [ "$got" != {q(names)} ]; then echo verify=mismatch; exit 0; fi
here=$({inodes})
served=$(cd ../serve && {inodes}) || exit 3
if [ "$here" != "$served" ]; then echo verify=mismatch; exit 0; fi
echo verify=ok
{publish_lines(layout, new_version, previous)}"""


def chunk_digest(paths: Sequence[str], expected: Expected) -> str:
    """What ``check_link_script`` must find for ``paths``: SHA-256 of their ``sha256sum -z`` records."""
    files = expected.manifest.files
    return hashlib.sha256(b"".join(f"{files[p].sha256}  {p}".encode() + b"\0" for p in paths)).hexdigest()


def exit_code(exc: BaseException) -> int | None:
    match = _EXIT.search(str(exc)) if isinstance(exc, RsyncFailed) else None
    return int(match.group(1)) if match else None


@dataclass
class _Event:
    kind: str                 # "sent" | "chunk" | "commit"
    host: str
    sender: str = ""
    chunk: int = -1
    error: BaseException | None = None
    version: str = ""


class _Host:
    """One host's state in the run: its lock, SSH client, current version and counts."""

    def __init__(self, name: str, client: SSHClient, lock: HostLock) -> None:
        self.name, self.client, self.lock = name, client, lock
        self.current = ""
        self.locked = False
        self.files = 0
        self.bytes = 0
        self.from_peers = 0
        self.started = time.monotonic()


class PipelineRun:
    """One pipelined run (see the module docstring); ``run`` is the scheduling loop."""

    def __init__(self, names: list[str], src: str, layout: Layout, expected: Expected, options: SyncOptions,
                 board: ProgressBoard, cancel: CancelToken, control_dir: str, chunk_bytes: int,
                 on_transfer: Callable[[str, str, int], None] | None = None, peers: Sequence[str] = ()) -> None:
        self.names, self.src, self.layout, self.expected = names, src, layout, expected
        self.peers = [p for p in dict.fromkeys(peers) if p not in names]
        self.holding_peers: list[str] = []   # the peers whose probe found this manifest: they serve
        self.fallback: set[str] = set()      # hosts without rsync: copied on their own (sync_host)
        self.options, self.board, self.cancel, self.control_dir = options, board, cancel, control_dir
        self.on_transfer = on_transfer
        manifest = expected.manifest
        self.plan = chunk_plan({p: e.size for p, e in manifest.files.items()}, len(names), chunk_bytes)
        self.digests = [chunk_digest(c, expected) for c in self.plan]
        self.listed_names = names_digest(manifest)
        self.servers: dict[str, PeerServer] = {}
        self._servers_lock = threading.Lock()
        self.hosts: dict[str, _Host] = {}
        self._stopping: threading.Thread | None = None

    # -- per host steps (worker threads) --------------------------------------------------------

    def _client(self) -> SSHClient:
        return SSHClient(config=self.options.ssh_config, connect_timeout=self.options.connect_timeout,
                         control_dir=self.control_dir)

    def _run(self, host: _Host, script: str, what: str, stdin: bytes | None = None) -> str:
        if self.cancel.cancelled:
            raise SyncError(f"{host.name}: interrupted")
        proc = host.client.run(host.name, script, stdin=stdin, timeout=self.options.command_timeout)
        if proc.returncode != 0:
            detail = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            raise SyncError(f"{host.name}: {what} failed (exit {proc.returncode}): {(detail or ['no message'])[-1]}")
        return proc.stdout.decode("utf-8", "replace")

    def _setup(self, name: str) -> HostOutcome | None:
        """Lock, probe and prepare ``name``; an outcome when it is done (unchanged) or failed."""
        host = self.hosts[name]
        try:
            host.lock.__enter__()
            host.locked = True
            probe = parse_probe(self._run(host, probe_script(self.layout, self.options.remote_rsync,
                                                             self.expected.manifest.digest, "quick",
                                                             self.expected.quick), "probe"))
            if probe.unchanged:
                return HostOutcome(name, True, "rsync", version=probe.current, unchanged=True, attempts=1,
                                   source="-", seconds=round(time.monotonic() - host.started, 3))
            if choose_transport(self.options.transport, probe.has_rsync, name, self.options.rsync).name != "rsync":
                # no rsync: out of the pipeline, to the plain path's SFTP from the launcher
                host.lock.release()
                host.locked = False
                host.client.close_master(name)
                self.fallback.add(name)
                log.info("%s: no %s on the host; copied by SFTP from the launcher", name, self.options.remote_rsync)
                return None
            host.current = probe.current
            m = self.expected.manifest
            records = [d.encode() + b"\0" for d in m.dirs] + [b"\0"]
            records += [t.encode() + b"\0" + p.encode() + b"\0" for p, t in m.links.items()]
            out = self._run(host, setup_script(self.layout), "setup", stdin=b"".join(records))
            if "setup=ok" not in out:
                raise SyncError(f"{name}: setup did not confirm: {out.strip()[:200]!r}")
            self.board.update(name, phase="waiting", bytes_sent=0, files_sent=0)
            return None
        except BaseException as exc:  # noqa: BLE001 - one host's failure stays that host's
            err = as_sync_error(name, exc)
            return HostOutcome(name, False, "rsync", attempts=1, error=str(err), source="-",
                               seconds=round(time.monotonic() - host.started, 3))

    def _peer_has_copy(self, peer: str) -> bool:
        """Probe ``peer`` (quick check of its current version against the manifest), as the relay does."""
        client = self._client()
        try:
            proc = client.run(peer, probe_script(self.layout, self.options.remote_rsync,
                                                 self.expected.manifest.digest, "quick", self.expected.quick),
                              timeout=self.options.command_timeout)
            ok = proc.returncode == 0 and parse_probe(proc.stdout.decode("utf-8", "replace")).unchanged
        except (SSHError, SyncError) as exc:
            log.warning("peer %s cannot serve: %s", peer, exc)
            return False
        finally:
            client.close_master(peer)
        if not ok:
            log.info("peer %s does not hold this dataset version; not used", peer)
        return ok

    def _server(self, sender: str) -> PeerSource:
        with self._servers_lock:
            server = self.servers.get(sender)
            if server is None:
                layout, options, allow = self.layout, self.options, list(self.names)
                # a peer serves its verified copy (the version with this manifest), a host its serve directory
                digest, directory = (self.expected.manifest.digest, "") if sender in self.holding_peers \
                    else ("", serve_dir(layout))
                server = PeerServer(sender, lambda port: serve_script(
                    layout, digest, sender, port, allow, options.bwlimit_kbps, options.remote_rsync,
                    directory=directory), SSHClient(config=options.ssh_config,
                                                    connect_timeout=options.connect_timeout))
                self.servers[sender] = server
        if server.source is None and not server.gone:
            with self._start_lock(sender):
                if server.source is None and not server.gone:
                    server.start()
        if server.source is None:
            raise SyncError(f"{sender}: its relay server did not start")
        return server.source

    def _start_lock(self, sender: str) -> threading.Lock:
        with self._servers_lock:
            return self._start_locks.setdefault(sender, threading.Lock())

    def _transfer(self, sender: str, name: str, chunk: int, done: queue.Queue[_Event]) -> None:
        host = self.hosts[name]
        paths = self.plan[chunk]
        listing = b"".join(p.encode() + b"\0" for p in paths)
        try:
            self.board.update(name, phase=f"chunk {chunk + 1}/{len(self.plan)}")
            rsync = self.options.rsync

            def progress(p: RsyncProgress) -> None:
                self.board.update(name, bytes_sent=host.bytes + p.bytes)

            def sent() -> None:  # the data is here; the host checks it while the sender sends again
                done.put(_Event("sent", name, sender, chunk))

            try:
                if sender == LAUNCHER:
                    with tempfile.NamedTemporaryFile(dir=self.control_dir, prefix="chunk-") as files_from:
                        files_from.write(listing)
                        files_from.flush()
                        argv = ["rsync", *chunk_flags(rsync, host.current, from_copy=False),
                                f"--files-from={files_from.name}", "-e", host.client.rsh(),
                                f"--rsync-path={writer_rsync_path(self.layout, rsync.remote_rsync)}",
                                "--", self.src.rstrip("/") + "/", f"{name}:{self.layout.staging}/"]
                        stats = run_rsync(argv, name, progress, self.cancel)
                    sent()
                    self._run(host, check_link_script(self.layout, self.digests[chunk]),
                              f"check of chunk {chunk + 1}", stdin=listing)
                else:
                    source = self._server(sender)
                    argv = host.client.argv(name, pull_chunk_script(self.layout, source, host.current, rsync,
                                                                    self.digests[chunk], address=name))
                    stats = run_rsync(argv, name, progress, self.cancel, source.secret.encode() + b"\n" + listing,
                                      on_line=lambda line: sent() if line.strip() == SENT_MARKER else None)
            except SyncError as exc:
                if f"(exit {MISMATCH_EXIT})" in str(exc):
                    raise VerifyFailed(f"{name}: chunk {chunk + 1} from {sender} does not match the manifest") from exc
                raise
            host.files += stats.files_transferred
            host.bytes += stats.bytes_transferred
            host.from_peers += sender != LAUNCHER
            self.board.update(name, bytes_sent=host.bytes, files_sent=host.files)
            done.put(_Event("chunk", name, sender, chunk))
        except BaseException as exc:  # noqa: BLE001 - reported to the scheduler, which decides
            done.put(_Event("chunk", name, sender, chunk, error=exc))

    def _commit(self, name: str, done: queue.Queue[_Event]) -> None:
        host = self.hosts[name]
        try:
            self.board.update(name, phase="verifying")
            version = new_version_name(self.expected.manifest.digest)
            out = self._run(host, commit_checked_script(self.layout, self.listed_names, version, host.current),
                            "verification and commit", stdin=self.expected.document)
            if "verify=mismatch" in out:
                raise SyncError(f"{name}: copy does not match the manifest")
            if f"committed={version}" not in out:
                raise SyncError(f"{name}: commit did not confirm: {out.strip()[:200]!r}")
            done.put(_Event("commit", name, version=version))
        except BaseException as exc:  # noqa: BLE001
            done.put(_Event("commit", name, error=exc))

    # -- the scheduling loop ---------------------------------------------------------------------

    def run(self) -> tuple[HostOutcome, ...]:
        self._start_locks: dict[str, threading.Lock] = {}
        for n in self.names:
            self.hosts[n] = _Host(n, self._client(), HostLock(
                n, self.layout, self.options.ssh_config, self.options.lock_timeout, self.cancel,
                self.options.connect_timeout))
        outcomes: dict[str, HostOutcome] = {}
        try:
            with ThreadPoolExecutor(max_workers=16, thread_name_prefix="pipeline-setup") as pool:
                setups = pool.map(self._setup, self.names)
                holding = pool.map(self._peer_has_copy, self.peers)   # the peers are probed during the setup
                for n, outcome in zip(self.names, setups, strict=True):
                    if outcome is not None:
                        outcomes[n] = outcome
                        self.board.update(n, phase="done" if outcome.ok else "failed")
                self.holding_peers = [p for p, ok in zip(self.peers, holding, strict=True) if ok]
            active = [n for n in self.names if n not in outcomes and n not in self.fallback]
            fallback = [n for n in self.names if n in self.fallback]
            with ThreadPoolExecutor(max_workers=max(1, min(self.options.jobs, len(fallback))),
                                    thread_name_prefix="pipeline-sftp") as plain:
                alone = {n: plain.submit(sync_host, n, self.src, self.layout, self.expected, self.options, self.board,
                                         self.cancel, self.control_dir) for n in fallback}
                if active:
                    log.info("pipeline: %d chunks to %d hosts from the launcher and %d peers", len(self.plan),
                             len(active), len(self.holding_peers))
                    outcomes.update(self._loop(active))
                outcomes.update({n: f.result() for n, f in alone.items()})
        finally:
            self._finish()
        return tuple(outcomes[n] for n in self.names)

    def _loop(self, active: list[str]) -> dict[str, HostOutcome]:
        schedule = ChunkSchedule(active, len(self.plan), self.options.retry.attempts, peers=self.holding_peers)
        # every host's daemon starts now, off the critical path: a host serves its first chunk at once;
        # so do as many peers' as can send at once (one per receiver), the others on first use
        starter = ThreadPoolExecutor(max_workers=8, thread_name_prefix="pipeline-serve")
        for n in [*self.holding_peers[:len(active)], *active]:
            starter.submit(self._start_quietly, n)
        try:
            return self._schedule(schedule, active)
        finally:
            starter.shutdown(wait=True)

    def _start_quietly(self, sender: str) -> None:
        try:
            self._server(sender)
        except (SSHError, SyncError) as exc:
            log.warning("%s cannot serve: %s", sender, exc)

    def _schedule(self, schedule: ChunkSchedule, active: list[str]) -> dict[str, HostOutcome]:
        done: queue.Queue[_Event] = queue.Queue()
        outcomes: dict[str, HostOutcome] = {}
        committing: set[str] = set()
        errors: dict[str, str] = {}

        def fail(name: str, error: str) -> None:
            h = self.hosts[name]
            if name not in outcomes:
                outcomes[name] = HostOutcome(name, False, "rsync", h.files, h.bytes,
                                             round(time.monotonic() - h.started, 3),
                                             schedule.failures[name] + 1, error=error, source="-")
                self.board.update(name, phase="failed")

        while True:
            if self.cancel.cancelled:
                for n in schedule.give_up_all():
                    fail(n, f"{n}: interrupted")
            else:
                for sender, name, chunk in schedule.next_transfers():
                    if self.on_transfer is not None:
                        self.on_transfer(sender, name, chunk)
                    threading.Thread(target=self._transfer, args=(sender, name, chunk, done),
                                     name=f"chunk {sender}->{name}", daemon=True).start()
                for name in active:
                    if schedule.complete(name) and name not in committing and name not in outcomes:
                        committing.add(name)
                        threading.Thread(target=self._commit, args=(name, done), daemon=True).start()
            if schedule.finished and self._stopping is None:  # no chunk moves any more: end the servers
                self._stopping = threading.Thread(target=self._stop_servers, name="pipeline-stop", daemon=True)
                self._stopping.start()                   # while the last hosts commit
            if schedule.finished and not committing:
                break
            event = done.get()
            name = event.host
            if event.kind == "commit":
                committing.discard(name)
                h = self.hosts[name]
                if event.error is None:
                    outcomes[name] = HostOutcome(
                        name, True, "rsync", h.files, h.bytes, round(time.monotonic() - h.started, 3),
                        schedule.failures[name] + 1, event.version,
                        source=LAUNCHER if not h.from_peers else f"{h.from_peers}/{len(self.plan)} chunks from peers")
                    self.board.update(name, phase="done")
                else:
                    schedule.give_up(name)
                    fail(name, str(as_sync_error(name, event.error)))
                continue
            if event.kind == "sent":
                schedule.sent(event.sender, name, event.chunk)
                continue
            if event.error is None:
                schedule.succeeded(event.sender, name, event.chunk)
                continue
            exc = as_sync_error(name, event.error)
            sender = event.sender
            server = self.servers.get(sender)
            gone = sender != LAUNCHER and ((server is not None and server.gone) or sender in schedule.failed_hosts)
            if sender in self.holding_peers and isinstance(exc, VerifyFailed):
                gone = True  # the peer's copy differs from the manifest: it serves no one else, uncharged
                log.warning("peer %s no longer serves (%s)", sender, exc)
            refused = sender != LAUNCHER and exit_code(exc) in REFUSED_EXITS
            unreachable = isinstance(exc, SSHError)
            given_up = schedule.failed(sender, name, event.chunk, refused=refused, sender_gone=gone,
                                       fatal=not retryable(exc) or self.cancel.cancelled,
                                       blame_sender=not unreachable)
            errors[name] = str(exc)
            if given_up:
                fail(name, str(exc))
            else:
                why = "not charged: the sender is gone" if gone else "not charged: refused by the sender" \
                    if refused else f"failure {schedule.failures[name]} of {schedule.max_attempts}"
                log.warning("%s (chunk %d from %s; %s); trying again", exc, event.chunk + 1, sender, why)
        return outcomes

    def _stop_servers(self) -> None:
        """Stop every server at once (each session ends in its own time; one after another,
        they added up)."""
        with self._servers_lock:
            servers = list(self.servers.values())
        if servers:
            with ThreadPoolExecutor(max_workers=min(32, len(servers)), thread_name_prefix="pipeline-stop") as pool:
                list(pool.map(PeerServer.stop, servers))

    def _finish(self) -> None:
        """Stop the servers (started already once the last chunk moved), remove the serve
        directories, release the locks; every host at once."""
        if self._stopping is not None:
            self._stopping.join()
        self._stop_servers()  # the peers' (and anything left after an error); a stopped one costs nothing

        def one(host: _Host) -> None:
            server = self.servers.get(host.name)
            if server is not None:
                server.stop()
            if not host.locked:
                return
            try:
                host.client.run(host.name, f"rm -rf -- {shlex.quote(serve_dir(self.layout))}", timeout=60)
            except (SSHError, SyncError, OSError) as exc:
                log.debug("%s: cannot remove the served directory: %s", host.name, exc)
            finally:
                host.client.close_master(host.name)
                host.lock.release()

        workers = max(1, min(32, len(self.hosts)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pipeline-end") as pool:
            list(pool.map(one, self.hosts.values()))
