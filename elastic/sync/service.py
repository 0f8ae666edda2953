"""``dataset-sync`` as a service: copy one local directory to many hosts, verified and atomic.

    report = sync_dataset(src, dest, hosts, SyncOptions(ssh_config=..., jobs=4))
    report.ok          # every host has DEST == SRC, checked against the manifest
    report.to_json()   # per-host status, method, files/bytes sent, attempts, error

``sync_dataset`` blocks until every host succeeded or gave up.  Bad input (DEST refused by
``elastic.sync.safety``, a missing SRC, a symlink leaving SRC) raises ``ConfigError`` before any host
is touched; failures of single hosts never raise -- they are in the report, the other hosts
carry on.  Per host, with at most ``jobs`` hosts at once, retried with backoff
(``elastic.sync.retry``) unless the failure cannot heal (host key refused, DEST not managed by us):

0. take the host's lock for DEST (``elastic.sync.lock``: ``flock`` on ``<state>/lock`` held by a
   script on its own SSH connection), so a second sync to the same DEST on the same host
   waits (up to ``lock_timeout`` seconds, then that host fails with ``LockTimeout``) instead
   of writing the same staging directory; it is held until step 3 is done or failed;
1. probe the host over one SSH connection (``elastic.sync.remote.probe_script``): DEST state,
   current version, rsync present.  When the current version's manifest has SRC's digest the
   probe also checks that copy in place -- ``verify_unchanged="quick"``: every path, size and
   mtime (the content was checksummed when that version was made), ``"checksum"``: SHA-256 of
   everything -- and if it holds nothing is copied (``unchanged``); a copy that fails the check
   is copied again with ``rsync --checksum``.  That connection stays open (ControlMaster) for
   the other steps and is closed when the host is done;
2. copy SRC into the staging directory with the host's ``elastic.sync.transport.Transport``:
   rsync with ``--link-dest`` to the current version, or the SFTP fallback when the host has
   no rsync (``transport="auto"``) or when forced;
3. verify and commit in one step on the host: the sorted ``sha256sum`` listing of staging must
   hash to the manifest's ``listing_digest``; then write the manifest, rename staging to a new
   version and swap the DEST symlink.  A difference fails the attempt with the list of
   differences (the next attempt uses ``rsync --checksum``).

``cancel`` (a ``CancelToken``) stops every host: running rsyncs are terminated, DEST keeps its
previous version, and the staging directory is reused by the next run.
"""

from __future__ import annotations

import json
import logging
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from elastic.common.hostlist import Host, validate_host_name
from elastic.common.table import human_bytes, render_table
from elastic.errors import (
    ConfigError,
    DestRefused,
    HostKeyUnverified,
    Interrupted,
    LockTimeout,
    SSHError,
    SyncError,
    VerifyFailed,
)
from elastic.ssh.exec import SSHClient
from elastic.sync.cancel import CancelToken
from elastic.sync.lock import HostLock
from elastic.sync.manifest import (
    Manifest,
    build_manifest,
    cache_path,
    compare,
    listing_digest,
    load_cache,
    parse_listing,
    quick_digest,
    save_cache,
)
from elastic.sync.progress import ProgressBoard
from elastic.sync.relay import LAUNCHER, PeerSource
from elastic.sync.remote import (
    Layout,
    listing_script,
    new_version_name,
    parse_probe,
    probe_script,
    verify_commit_script,
)
from elastic.sync.retry import RetryPolicy, retry_call
from elastic.sync.rsync import RsyncOptions
from elastic.sync.safety import DEFAULT_ALLOWED_ROOTS, check_dest, check_source
from elastic.sync.transport import TRANSPORTS, CopyJob, choose_transport

log = logging.getLogger("dataset-sync")


@dataclass(frozen=True)
class SyncOptions:
    """How to sync; checked in ``__post_init__`` (``ConfigError`` names the bad value)."""

    ssh_config: str | None = None
    jobs: int = 8
    allowed_roots: tuple[str, ...] = DEFAULT_ALLOWED_ROOTS
    transport: str = "auto"
    remote_rsync: str = "rsync"
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    bwlimit_kbps: int | None = None
    connect_timeout: int = 10
    command_timeout: float = 600.0
    verify_unchanged: str = "quick"
    hash_cache: bool = True
    cache_dir: str | None = None
    lock_timeout: float = 600.0
    symlinks: str = "refuse"

    def __post_init__(self) -> None:
        self.rsync  # noqa: B018 - builds RsyncOptions, which checks --symlinks, --remote-rsync, --bwlimit
        if self.jobs < 1:
            raise ConfigError(f"--jobs must be >= 1, got {self.jobs}")
        if self.transport not in TRANSPORTS:
            raise ConfigError(f"--transport must be one of {', '.join(TRANSPORTS)}, got {self.transport!r}")
        if self.verify_unchanged not in ("quick", "checksum"):
            raise ConfigError(f"--verify-unchanged must be quick or checksum, got {self.verify_unchanged!r}")
        if not 0 <= self.lock_timeout < 10**7:
            raise ConfigError(f"--lock-timeout must be >= 0 seconds, got {self.lock_timeout}")

    @property
    def rsync(self) -> RsyncOptions:
        """The rsync transport's settings (``ConfigError`` for a bad one)."""
        return RsyncOptions(self.remote_rsync, self.bwlimit_kbps, self.symlinks)


@dataclass(frozen=True)
class HostOutcome:
    """What happened on one host."""

    host: str
    ok: bool
    method: str = "-"
    files_sent: int = 0
    bytes_sent: int = 0
    seconds: float = 0.0
    attempts: int = 0
    version: str = ""
    error: str = ""
    unchanged: bool = False
    source: str = "launcher"   # who served the copy: "launcher" or the peer host (relay)


@dataclass(frozen=True)
class SyncReport:
    """The result of a run: the manifest's summary and one outcome per host (input order)."""

    src: str
    dest: str
    digest: str
    files: int
    total_bytes: int
    seconds: float
    hosts: tuple[HostOutcome, ...]

    @property
    def ok(self) -> bool:
        return all(h.ok for h in self.hosts)

    @property
    def failed(self) -> list[str]:
        return [h.host for h in self.hosts if not h.ok]

    def to_json(self) -> str:
        doc = asdict(self)
        doc["ok"] = self.ok
        return json.dumps(doc, indent=1) + "\n"


def render_report(report: SyncReport) -> str:
    """The per-host result table printed at the end of a run."""
    rows = [[h.host, "ok" if h.ok else "FAILED", h.method, h.source if h.ok and not h.unchanged else "-",
             "unchanged" if h.unchanged else ("new copy" if h.ok else "-"), h.files_sent, human_bytes(h.bytes_sent),
             f"{h.seconds:.1f}", h.attempts, h.error] for h in report.hosts]
    return render_table(["HOST", "STATUS", "METHOD", "SOURCE", "CHANGE", "FILES SENT", "BYTES SENT", "SECONDS",
                         "ATTEMPTS", "ERROR"], rows)


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, (SSHError, SyncError)) and not isinstance(
        exc, (HostKeyUnverified, DestRefused, Interrupted, ConfigError, LockTimeout))


@dataclass
class _Attempt:
    method: str = "-"
    files: int = 0
    bytes: int = 0
    version: str = ""
    unchanged: bool = False
    source: str = "launcher"


class _Expected:
    """What every host is checked against: computed once per run, on first use, because an
    unchanged host needs only the quick digest (thread-safe)."""

    def __init__(self, manifest: Manifest) -> None:
        self.manifest = manifest
        self._lock = threading.Lock()
        self._values: dict[str, object] = {}

    def _get(self, key: str, compute):
        with self._lock:
            if key not in self._values:
                self._values[key] = compute()
            return self._values[key]

    @property
    def listing(self) -> str:
        return self._get("listing", lambda: listing_digest(self.manifest))

    @property
    def quick(self) -> str:
        return self._get("quick", lambda: quick_digest(self.manifest))

    @property
    def document(self) -> bytes:
        """The manifest file written with the data."""
        return self._get("document", lambda: self.manifest.to_json().encode())


class _HostSync:
    """The per-host pipeline (one instance per host, used by one worker thread)."""

    def __init__(self, host: str, src: str, layout: Layout, expected: _Expected, options: SyncOptions,
                 client: SSHClient, board: ProgressBoard, cancel: CancelToken) -> None:
        self.host, self.src, self.layout, self.manifest = host, src, layout, expected.manifest
        self.options, self.client, self.board, self.cancel = options, client, board, cancel
        self.checksum = False
        self.wanted = expected
        self.last = _Attempt()
        # relay: pull from the peer this returns (it blocks until the peer serves) instead of pushing SRC
        self.peer: Callable[[], PeerSource] | None = None

    def _check(self) -> None:
        if self.cancel.cancelled:
            raise Interrupted(f"{self.host}: interrupted")

    def _run(self, script: str, what: str, stdin: bytes | None = None) -> bytes:
        self._check()
        t0 = time.monotonic()
        proc = self.client.run(self.host, script, stdin=stdin, timeout=self.options.command_timeout)
        log.debug("%s: %s took %.3fs", self.host, what, time.monotonic() - t0)
        if proc.returncode != 0:
            detail = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            raise SyncError(f"{self.host}: {what} failed (exit {proc.returncode}): {(detail or ['no message'])[-1]}")
        return proc.stdout

    def attempt(self, number: int) -> _Attempt:
        self.last = result = _Attempt()
        self.board.update(self.host, phase="connecting", bytes_sent=0, files_sent=0, checked=0)
        # The probe's connection stays open as the master the later steps reuse; it also answers
        # the common case alone (the host already has this dataset).
        check = "checksum" if self.checksum or self.options.verify_unchanged == "checksum" else "quick"
        lock = HostLock(self.host, self.layout, self.options.ssh_config, self.options.lock_timeout, self.cancel,
                        self.options.connect_timeout, on_wait=self._waiting)
        with lock:  # one sync per DEST and host at a time (elastic.sync.lock); held until the commit is done
            try:
                return self._attempt(result, check)
            finally:
                self.client.close_master(self.host)

    def _job(self) -> CopyJob:
        return CopyJob(self.host, self.src, self.layout, self.manifest, self.client, self.board, self.cancel,
                       self._run, checksum=self.checksum, peer=self.peer)

    def _waiting(self) -> None:
        log.warning("%s: another dataset-sync to %s is running on the host; waiting up to %gs for it",
                    self.host, self.layout.dest, self.options.lock_timeout)
        self.board.update(self.host, phase="waiting for lock")

    def _attempt(self, result: _Attempt, check: str) -> _Attempt:
        probe = parse_probe(self._run(probe_script(self.layout, self.options.remote_rsync, self.manifest.digest, check,
                                                   self.wanted.listing if check == "checksum" else self.wanted.quick),
                                      "probe").decode())
        transport = choose_transport(self.options.transport, probe.has_rsync, self.host, self.options.rsync)
        result.method = transport.name
        if probe.unchanged:
            result.unchanged, result.version = True, probe.current
            self.board.update(self.host, checked=len(self.manifest.files), total=len(self.manifest.files))
            return result
        if probe.current and probe.current_digest == self.manifest.digest:
            log.warning("%s: the current copy differs from its manifest; copying again", self.host)
            self.checksum = True
        self.board.update(self.host, phase="copying")
        transport.copy(self._job(), probe.current, result)
        self.board.update(self.host, phase="verifying")
        version = new_version_name(self.manifest.digest)
        out = self._run(verify_commit_script(self.layout, self.wanted.listing, version, probe.current),
                        "verification and commit", stdin=self.wanted.document).decode()
        if "verify=mismatch" in out:
            self.checksum = True
            listing = parse_listing(self._run(listing_script(self.layout.staging), "listing staging"))
            problems = compare(self.manifest, listing) or ["listing differs"]
            more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
            raise VerifyFailed(f"{self.host}: copy does not match the manifest: {'; '.join(problems[:3])}{more}")
        if f"committed={version}" not in out:
            raise SyncError(f"{self.host}: commit did not confirm: {out.strip()[:200]!r}")
        result.version = version
        return result


def prepare(src: str, dest: str, options: SyncOptions) -> tuple[str, Layout, Manifest]:
    """Check SRC and DEST and build the manifest (raises ``ConfigError``; blocks while hashing;
    files unchanged since the last run are not hashed again, see ``manifest.build_manifest``)."""
    dest_norm = check_dest(dest, options.allowed_roots)
    src_real = check_source(src)
    if not options.hash_cache:
        return src_real, Layout(dest_norm), build_manifest(src_real, symlinks=options.symlinks)
    path = cache_path(src_real, options.cache_dir)
    cache = load_cache(path, src_real)
    before = dict(cache)
    manifest = build_manifest(src_real, cache, options.symlinks)
    if cache != before:
        save_cache(path, src_real, cache)
    return src_real, Layout(dest_norm), manifest


def sync_dataset(src: str, dest: str, hosts: list[Host], options: SyncOptions | None = None, *,
                 cancel: CancelToken | None = None, board_hook=None) -> SyncReport:
    """Sync ``src`` to ``dest`` on every host (see the module docstring); returns the report.

    ``board_hook(board)`` is called with the ``ProgressBoard`` before any host starts (the CLI
    attaches its progress reporter there)."""
    options = options or SyncOptions()
    cancel = cancel or CancelToken()
    if not hosts:
        raise ConfigError("no hosts to sync to")
    names = [validate_host_name(h.name) for h in hosts]  # again: no caller's check is trusted
    if len(set(names)) != len(names):
        raise ConfigError(f"a host is listed twice: {', '.join(sorted({n for n in names if names.count(n) > 1}))}")
    started = time.monotonic()
    src_real, layout, manifest = prepare(src, dest, options)
    log.info("manifest: %d files, %s, digest %s", len(manifest.files), human_bytes(manifest.total_bytes),
             manifest.digest[:12])
    expected = _Expected(manifest)
    board = ProgressBoard(names, len(manifest.files), manifest.total_bytes)
    if board_hook is not None:
        board_hook(board)

    with tempfile.TemporaryDirectory(prefix="ds-", dir="/tmp") as control_dir:
        def one(host: str) -> HostOutcome:
            client = SSHClient(config=options.ssh_config, connect_timeout=options.connect_timeout,
                               control_dir=control_dir)
            worker = _HostSync(host, src_real, layout, expected, options, client, board, cancel)
            t0 = time.monotonic()
            attempts = 0

            def on_retry(attempt: int, exc: BaseException, delay: float) -> None:
                log.warning("%s (attempt %d); retrying in %.1fs", exc, attempt, delay)
                board.update(host, phase="retrying")

            def counted(number: int) -> _Attempt:
                nonlocal attempts
                attempts = number
                return worker.attempt(number)

            try:
                result, _ = retry_call(counted, options.retry, _retryable, cancel.wait, on_retry)
            except Exception as exc:  # noqa: BLE001 - one host's failure, whatever it is, stays that host's
                if not isinstance(exc, (SSHError, SyncError)):
                    log.debug("%s: unexpected error", host, exc_info=True)
                    exc = SyncError(f"{host}: unexpected error: {exc!r}")
                board.update(host, phase="failed")
                last = worker.last
                return HostOutcome(host, False, last.method, last.files, last.bytes,
                                   round(time.monotonic() - t0, 3), attempts, error=str(exc), source="-")
            board.update(host, phase="done")
            return HostOutcome(host, True, result.method, result.files, result.bytes,
                               round(time.monotonic() - t0, 3), attempts, result.version, unchanged=result.unchanged,
                               source="-" if result.unchanged else LAUNCHER)

        with ThreadPoolExecutor(max_workers=min(options.jobs, len(names)), thread_name_prefix="dataset-sync") as pool:
            outcomes = tuple(pool.map(one, names))
    return SyncReport(src_real, layout.dest, manifest.digest, len(manifest.files), manifest.total_bytes,
                      round(time.monotonic() - started, 3), outcomes)
