"""How a dataset's files reach a host's staging directory: the ``Transport`` seam.

``elastic.sync.service`` probes the host, asks ``choose_transport`` which transport to use,
hands it a ``CopyJob`` and then verifies and commits what it copied; it never knows how the
bytes moved. Two implementations:

- ``RsyncTransport``: rsync over ssh with ``--link-dest`` to the current version (or, in a
  relay round, the host pulls from a peer's read-only rsync daemon), with the flags of
  ``elastic.sync.rsync.copy_flags`` either way; its settings are its own ``RsyncOptions``;
- ``SftpTransport``: the fallback for hosts without rsync: staging is seeded from the current
  version on the host, then the files that differ are sent over SFTP (paramiko).

A new transport (a cloud bucket, a shared filesystem) implements the protocol below; a
``CopyJob`` holds only what every transport needs, a transport's own settings are given to it.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from elastic.errors import DestRefused
from elastic.ssh.exec import SSHClient
from elastic.sync.cancel import CancelToken
from elastic.sync.manifest import Manifest, parse_listing
from elastic.sync.progress import ProgressBoard
from elastic.sync.relay import PeerSource, pull_script
from elastic.sync.remote import Layout, listing_script, seed_staging_script
from elastic.sync.rsync import RsyncOptions, RsyncProgress, rsync_argv, run_rsync

log = logging.getLogger("dataset-sync")
TRANSPORTS = ("auto", "rsync", "sftp")


class CopyResult(Protocol):
    """What a transport reports while and after it copies (the service's per-attempt record)."""

    files: int
    bytes: int
    source: str


@dataclass
class CopyJob:
    """One host's copy, whatever the transport: SRC into ``layout.staging`` on ``host``, checked
    later against ``manifest``. ``client`` reaches the host (its ssh_config and connect
    timeout too); ``run(script, what)`` runs a script on the host over the shared connection
    and returns its stdout (``SyncError`` when it fails); ``peer``, in a relay round, blocks
    until the peer to pull from serves and returns it; ``checksum``: compare contents, not
    size and time (an earlier copy did not verify)."""

    host: str
    src: str
    layout: Layout
    manifest: Manifest
    client: SSHClient
    board: ProgressBoard
    cancel: CancelToken
    run: Callable[[str, str], bytes]
    checksum: bool = False
    peer: Callable[[], PeerSource] | None = None


class Transport(Protocol):
    """The contract between the sync service and a way of copying files to a host.

    ``name`` is the report's ``method``. ``copy(job, current, result)`` blocks until
    ``job.layout.staging`` on ``job.host`` holds every file of SRC (``current``: the host's
    current version, a base to copy against, or ``""``), updating ``result.files``/``bytes``
    (and ``source``: who sent them) and ``job.board`` as it goes. It raises ``SyncError`` (or
    a subclass, ``SSHError``) when the copy failed and ``Interrupted`` once ``job.cancel`` is
    set; it never commits: the service verifies staging against the manifest afterwards.
    """

    name: str

    def copy(self, job: CopyJob, current: str, result: CopyResult) -> None: ...


class RsyncTransport:
    """rsync over ssh (or, in a relay, the host pulls from a peer's rsync daemon)."""

    name = "rsync"

    def __init__(self, options: RsyncOptions) -> None:
        self.options = options

    def copy(self, job: CopyJob, current: str, result: CopyResult) -> None:
        stdin = None
        if job.peer is not None:  # relay: the host pulls from a peer's read-only rsync daemon
            peer = job.peer()
            argv = job.client.argv(job.host, pull_script(job.layout, peer, current, self.options, address=job.host,
                                                         checksum=job.checksum))
            stdin = peer.secret.encode() + b"\n"
            result.source = peer.host
        else:
            argv = rsync_argv(job.src, job.host, job.layout, current, job.client.rsh(), self.options,
                              checksum=job.checksum)

        def progress(p: RsyncProgress) -> None:
            if p.files_sent is None or p.checked is None or p.total is None:  # bytes only
                job.board.update(job.host, bytes_sent=p.bytes)
            else:
                job.board.update(job.host, bytes_sent=p.bytes, files_sent=p.files_sent, checked=p.checked,
                                 total=p.total)

        t0 = time.monotonic()
        stats = run_rsync(argv, job.host, progress, job.cancel, stdin)
        log.debug("%s: rsync took %.3fs", job.host, time.monotonic() - t0)
        result.files, result.bytes = stats.files_transferred, stats.bytes_transferred
        job.board.update(job.host, bytes_sent=stats.bytes_transferred, files_sent=stats.files_transferred,
                         checked=len(job.manifest.files), total=len(job.manifest.files))


class SftpTransport:
    """Seed staging from the current version on the host, then send what differs over SFTP."""

    name = "sftp"

    def copy(self, job: CopyJob, current: str, result: CopyResult) -> None:
        from elastic.sync.sftp import sftp_copy  # paramiko: only when a host needs it

        job.run(seed_staging_script(job.layout, current), "seeding staging from the current version")
        listing = parse_listing(job.run(listing_script(job.layout.staging), "listing staging"))

        def progress(files: int, nbytes: int) -> None:
            result.files, result.bytes = files, nbytes
            job.board.update(job.host, files_sent=files, bytes_sent=nbytes)

        sftp_copy(job.host, job.client.config, job.src, job.layout.staging, job.manifest, listing,
                  progress, job.cancel, timeout=float(job.client.connect_timeout))
        job.board.update(job.host, checked=len(job.manifest.files), total=len(job.manifest.files))


def choose_transport(option: str, has_rsync: bool, host: str, rsync: RsyncOptions) -> Transport:
    """The transport for a host: ``option`` ``"rsync"``/``"sftp"`` forces one (``DestRefused``
    if ``"rsync"`` and the host has none), ``"auto"`` takes rsync when the host has it;
    ``rsync``: the rsync transport's settings, if it is the one."""
    if option == "rsync" and not has_rsync:
        raise DestRefused(f"{host}: no {rsync.remote_rsync} on the host (use --transport auto or sftp)")
    if option == "rsync" or (option == "auto" and has_rsync):
        return RsyncTransport(rsync)
    return SftpTransport()
