"""``dataset-sync`` as a service: copy one local directory to many hosts, verified and atomic.

    report = sync_dataset(src, dest, hosts, SyncOptions(ssh_config=..., jobs=4))
    report.ok          # every host has DEST == SRC, checked against the manifest
    report.to_json()   # per-host status, method, files/bytes sent, attempts, error

``sync_dataset`` blocks until every host succeeded or gave up.  Bad input (DEST refused by
``elastic.sync.safety``, a missing SRC, a symlink leaving SRC) raises ``ConfigError`` before any host
is touched; failures of single hosts never raise -- they are in the report, the other hosts
carry on.  Per host, with at most ``jobs`` hosts at once, retried with backoff
(``elastic.sync.retry``) unless the failure cannot heal (host key refused, DEST not managed by us),
each attempt is the per-host engine's (``elastic.sync.hostsync.HostSync``, the relay's too):

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
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

from elastic.common.hostlist import Host, validate_host_name
from elastic.common.table import human_bytes, render_table
from elastic.errors import ConfigError
from elastic.sync.cancel import CancelToken
from elastic.sync.hostsync import Expected, HostOutcome, sync_host
from elastic.sync.manifest import Manifest, build_manifest, cached_manifest
from elastic.sync.options import SyncOptions
from elastic.sync.progress import ProgressBoard
from elastic.sync.remote import Layout
from elastic.sync.safety import check_dest, check_source

__all__ = ["HostOutcome", "SyncOptions", "SyncReport", "prepare", "render_report", "sync_dataset"]

log = logging.getLogger("dataset-sync")


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
    path: str = "parallel"   # how the hosts were served: "parallel", "relay" or "pipeline" (relay.choose_path)

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


def prepare(src: str, dest: str, options: SyncOptions) -> tuple[str, Layout, Manifest]:
    """Check SRC and DEST and build the manifest (raises ``ConfigError``; blocks while hashing;
    files unchanged since the last run are not hashed again, see ``manifest.build_manifest``)."""
    dest_norm = check_dest(dest, options.allowed_roots)
    src_real = check_source(src)
    if not options.hash_cache:
        return src_real, Layout(dest_norm), build_manifest(src_real, symlinks=options.symlinks)
    manifest, _ = cached_manifest(src_real, options.symlinks, options.cache_dir)
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
    expected = Expected(manifest)
    board = ProgressBoard(names, len(manifest.files), manifest.total_bytes)
    if board_hook is not None:
        board_hook(board)

    with tempfile.TemporaryDirectory(prefix="ds-", dir="/tmp") as control_dir:
        def one(host: str) -> HostOutcome:
            return sync_host(host, src_real, layout, expected, options, board, cancel, control_dir)

        with ThreadPoolExecutor(max_workers=min(options.jobs, len(names)), thread_name_prefix="dataset-sync") as pool:
            outcomes = tuple(pool.map(one, names))
    return SyncReport(src_real, layout.dest, manifest.digest, len(manifest.files), manifest.total_bytes,
                      round(time.monotonic() - started, 3), outcomes)
