"""The per-host engine's pure parts: which failures another attempt may heal, and the report's
line for a host (the attempts themselves run against pods in test_dataset_sync.py and
test_relay.py, through both callers)."""
from __future__ import annotations

import pytest

from elastic.errors import (
    ConfigError,
    DestRefused,
    HostKeyUnverified,
    Interrupted,
    LockTimeout,
    RsyncFailed,
    SSHError,
    SyncError,
    VerifyFailed,
)
from elastic.ssh.exec import SSHClient
from elastic.sync.cancel import CancelToken
from elastic.sync.hostsync import Attempt, Expected, HostSync, as_sync_error, retryable
from elastic.sync.manifest import FileEntry, Manifest
from elastic.sync.options import SyncOptions
from elastic.sync.progress import ProgressBoard
from elastic.sync.relay import LAUNCHER
from elastic.sync.remote import Layout


@pytest.mark.parametrize("exc, heals", [
    (SSHError("h: connection refused"), True), (RsyncFailed("h: rsync failed"), True),
    (VerifyFailed("h: copy does not match"), True), (SyncError("h: probe failed"), True),
    (HostKeyUnverified("h: host key changed"), False), (DestRefused("h: not managed"), False),
    (Interrupted("h: interrupted"), False), (ConfigError("bad"), False), (LockTimeout("h: waited"), False),
    (ValueError("a bug"), False),
])
def test_only_failures_another_attempt_may_heal_are_retried(exc, heals):
    assert retryable(exc) is heals


def test_a_foreign_error_becomes_a_sync_error_naming_it_and_ours_stay_as_they_are():
    ours = VerifyFailed("h: copy does not match")
    assert as_sync_error("h", ours) is ours
    wrapped = as_sync_error("h", KeyError("x"))
    assert type(wrapped) is SyncError and str(wrapped) == "h: unexpected error: KeyError('x')"


def _worker() -> HostSync:
    manifest = Manifest({"a.bin": FileEntry(3, "ab" * 32)})
    return HostSync("10.0.0.1", "/src", Layout("/data/x"), Expected(manifest), SyncOptions(), SSHClient(),
                    ProgressBoard(["10.0.0.1"], 1, 3), CancelToken())


def test_the_report_line_says_who_served_a_new_copy_and_no_one_for_an_unchanged_one():
    worker = _worker()
    line = worker.outcome(Attempt("rsync", 1, 3, "v-1", source="10.0.0.2"), 1.5, 2)
    assert (line.ok, line.method, line.files_sent, line.bytes_sent, line.version, line.source, line.attempts) == \
        (True, "rsync", 1, 3, "v-1", "10.0.0.2", 2)
    assert worker.outcome(Attempt("rsync"), 0.1, 1).source == LAUNCHER
    assert worker.outcome(Attempt("rsync", version="v-0", unchanged=True), 0.1, 1).source == "-"


def test_a_failed_host_reports_what_its_last_attempt_sent():
    worker = _worker()
    worker.last = Attempt("sftp", 4, 400)
    line = worker.failure(SSHError("10.0.0.1: no route"), 9.0, 3)
    assert (line.ok, line.method, line.files_sent, line.bytes_sent, line.error, line.source, line.attempts) == \
        (False, "sftp", 4, 400, "10.0.0.1: no route", "-", 3)
