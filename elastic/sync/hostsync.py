"""The per-host sync engine: one host's lock, probe, copy, verification and commit.

Used alike by the parallel path (``elastic.sync.service.sync_dataset``: each host retried with
backoff on its own) and the relay (``elastic.sync.relay_run``: a scheduler picks each
attempt's sender); how the attempts are scheduled is theirs, what one attempt does is here.

    worker = HostSync(host, src, layout, Expected(manifest), options, client, board, cancel)
    result = worker.attempt(n)            # blocks; raises SSHError/SyncError (or any bug)
    worker.outcome(result, seconds, n)    # the report's line; worker.failure(exc, ...) otherwise

One attempt (``HostSync.attempt``), under the host's lock for DEST (``elastic.sync.lock``):
probe the host over one SSH connection (``elastic.sync.remote.probe_script``; it stays open as
the master of the later steps) and stop there when the current copy holds the manifest
(``unchanged``); else pick the host's transport (``elastic.sync.transport.choose_transport``),
copy into staging -- pushed from SRC, or pulled from ``HostSync.peer`` in a relay round -- and
verify and commit on the host in one step. A copy that does not verify raises
``VerifyFailed`` (with the first differences) and makes the next attempt compare contents.
``retryable`` says which failures another attempt may heal.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

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
from elastic.sync.manifest import Manifest, compare, listing_digest, parse_listing, quick_digest
from elastic.sync.options import SyncOptions
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
from elastic.sync.retry import retry_call
from elastic.sync.transport import CopyJob, choose_transport

log = logging.getLogger("dataset-sync")


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
    source: str = LAUNCHER   # who served the copy: "launcher" or the peer host (relay)


def retryable(exc: BaseException) -> bool:
    """Whether another attempt may heal ``exc``: not a refused host key, a refused DEST, an
    interruption, bad input or a lock wait that timed out."""
    return isinstance(exc, (SSHError, SyncError)) and not isinstance(
        exc, (HostKeyUnverified, DestRefused, Interrupted, ConfigError, LockTimeout))


@dataclass
class Attempt:
    """One attempt's record, filled in as it goes: the transport's name, the files and bytes it
    sent, the version it committed (or found ``unchanged``) and who sent the bytes."""

    method: str = "-"
    files: int = 0
    bytes: int = 0
    version: str = ""
    unchanged: bool = False
    source: str = LAUNCHER


class Expected:
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


class HostSync:
    """The per-host pipeline (one instance per host, used by one thread at a time).

    ``attempt(number)`` blocks for one attempt and returns its ``Attempt``, or raises
    ``SSHError``/``SyncError`` (``VerifyFailed``, ``LockTimeout``, ``Interrupted`` once ``cancel``
    is set...); ``last`` is the latest attempt's record either way. ``peer``: set by the relay
    before an attempt, to pull from the peer it returns (it blocks until the peer serves)."""

    def __init__(self, host: str, src: str, layout: Layout, expected: Expected, options: SyncOptions,
                 client: SSHClient, board: ProgressBoard, cancel: CancelToken) -> None:
        self.host, self.src, self.layout, self.manifest = host, src, layout, expected.manifest
        self.options, self.client, self.board, self.cancel = options, client, board, cancel
        self.checksum = False
        self.wanted = expected
        self.last = Attempt()
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

    def attempt(self, number: int) -> Attempt:
        self.last = result = Attempt()
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

    def outcome(self, result: Attempt, seconds: float, attempts: int) -> HostOutcome:
        """The report's line for this host, done after ``attempts`` attempts, the last ``result``."""
        return HostOutcome(self.host, True, result.method, result.files, result.bytes, seconds, attempts,
                           result.version, unchanged=result.unchanged,
                           source="-" if result.unchanged else result.source)

    def failure(self, exc: BaseException, seconds: float, attempts: int) -> HostOutcome:
        """The report's line for this host, given up after ``attempts`` attempts, the last failing with ``exc``."""
        last = self.last
        return HostOutcome(self.host, False, last.method, last.files, last.bytes, seconds, attempts, error=str(exc),
                           source="-")

    def _job(self) -> CopyJob:
        return CopyJob(self.host, self.src, self.layout, self.manifest, self.client, self.board, self.cancel,
                       self._run, checksum=self.checksum, peer=self.peer)

    def _waiting(self) -> None:
        log.warning("%s: another dataset-sync to %s is running on the host; waiting up to %gs for it",
                    self.host, self.layout.dest, self.options.lock_timeout)
        self.board.update(self.host, phase="waiting for lock")

    def _attempt(self, result: Attempt, check: str) -> Attempt:
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


def sync_host(host: str, src: str, layout: Layout, expected: Expected, options: SyncOptions, board: ProgressBoard,
              cancel: CancelToken, control_dir: str) -> HostOutcome:
    """One host synced on its own, as the parallel path does it: ``HostSync`` attempts retried
    with backoff (``options.retry``) while ``retryable``; returns the report's line, never
    raises for that host's failure. The relay's and the pipeline's hosts without rsync come
    here too (``choose_transport`` then picks SFTP, from the launcher)."""
    client = SSHClient(config=options.ssh_config, connect_timeout=options.connect_timeout, control_dir=control_dir)
    worker = HostSync(host, src, layout, expected, options, client, board, cancel)
    t0 = time.monotonic()
    attempts = 0

    def on_retry(attempt: int, exc: BaseException, delay: float) -> None:
        log.warning("%s (attempt %d); retrying in %.1fs", exc, attempt, delay)
        board.update(host, phase="retrying")

    def counted(number: int) -> Attempt:
        nonlocal attempts
        attempts = number
        return worker.attempt(number)

    try:
        result, _ = retry_call(counted, options.retry, retryable, cancel.wait, on_retry)
    except Exception as exc:  # noqa: BLE001 - one host's failure, whatever it is, stays that host's
        board.update(host, phase="failed")
        return worker.failure(as_sync_error(host, exc), round(time.monotonic() - t0, 3), attempts)
    board.update(host, phase="done")
    return worker.outcome(result, round(time.monotonic() - t0, 3), attempts)


def as_sync_error(host: str, exc: BaseException) -> SSHError | SyncError:
    """``exc`` when it is one of ours, else a ``SyncError`` naming it (its traceback goes to the
    debug log): one host's failure, whatever it is, stays that host's."""
    if isinstance(exc, (SSHError, SyncError)):
        return exc
    log.debug("%s: unexpected error", host, exc_info=exc)
    return SyncError(f"{host}: unexpected error: {exc!r}")
