"""The rsync transport of ``dataset-sync``: one rsync over SSH per host, into the staging dir.

``rsync_argv`` (pure) builds the command: ``-rlpt --delete`` into ``staging`` with
``--link-dest`` = the current version (unchanged files become hard links, nothing is sent),
``--safe-links`` (or the ``--symlinks`` mode's flag), the manifest file excluded (and so protected from ``--delete``),
``--info=progress2,stats2`` for progress and the transferred-bytes report.
``parse_progress``/``parse_stats`` (pure) read its output.  ``run_rsync`` runs it, reports
progress through a callback, stops it when the run is cancelled, and returns
``RsyncStats`` or raises ``SyncError``/``SSHError`` (``HostKeyUnverified`` when ssh refused
the host key).
"""

from __future__ import annotations

import io
import re
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

from elastic.common.procs import tied_popen
from elastic.errors import Interrupted, RsyncFailed, SyncError
from elastic.ssh.exec import HOST_KEY_FAILURE, ssh_failure
from elastic.sync.cancel import CancelToken
from elastic.sync.manifest import HOST_FILES
from elastic.sync.remote import Layout, writer_rsync_path

_PROGRESS = re.compile(r"^\s*([\d,]+)\s+\d+%.*?(?:\(xfr#(\d+), (?:to|ir)-chk=(\d+)/(\d+)\))?\s*$")
_STATS = {
    "files": re.compile(r"^Number of regular files transferred: ([\d,]+)", re.M),
    "bytes": re.compile(r"^Total transferred file size: ([\d,]+)", re.M),
    "literal": re.compile(r"^Literal data: ([\d,]+)", re.M),
    "sent": re.compile(r"^Total bytes sent: ([\d,]+)", re.M),
}


@dataclass(frozen=True)
class RsyncProgress:
    """One progress2 line: bytes sent so far, files sent, files checked of the total."""

    bytes: int
    files_sent: int | None = None
    checked: int | None = None
    total: int | None = None


@dataclass(frozen=True)
class RsyncStats:
    """rsync's ``--stats``: regular files sent, their size, literal (new) data, bytes on the wire."""

    files_transferred: int
    bytes_transferred: int
    literal_bytes: int
    bytes_sent: int


_SYMLINK_FLAGS = {"refuse": "--safe-links", "copy-unsafe": "--copy-unsafe-links", "keep": "--links"}


def rsync_argv(src: str, host: str, layout: Layout, current: str, rsh: str, *, remote_rsync: str = "rsync",
               bwlimit_kbps: int | None = None, checksum: bool = False, io_timeout: int = 120,
               symlinks: str = "refuse") -> list[str]:
    """The rsync command copying the local directory ``src`` into ``host``'s staging dir.

    The remote rsync is a *registered writer* (``remote.writer_rsync_path``): it holds
    ``<state>/writer`` open, so the next run can find and end it if this one dies.
    ``symlinks`` (``manifest.SYMLINK_MODES``) picks rsync's link flag: ``--safe-links`` for
    ``refuse`` (the manifest already refused unsafe links), ``--copy-unsafe-links`` for
    ``copy-unsafe``, plain ``--links`` for ``keep``; the receiver never follows a link (no
    ``--keep-dirlinks``), so nothing is written outside the staging directory."""
    argv = ["rsync", "-rlpt", "--delete", _SYMLINK_FLAGS[symlinks], *(f"--exclude=/{n}" for n in HOST_FILES),
            "--no-inc-recursive", "--info=progress2,stats2", "--no-h", f"--timeout={io_timeout}",
            "-e", rsh, f"--rsync-path={writer_rsync_path(layout, remote_rsync)}"]
    if current:
        argv.append(f"--link-dest=../{current}")
    if checksum:
        argv.append("--checksum")
    if bwlimit_kbps:
        argv.append(f"--bwlimit={int(bwlimit_kbps)}")
    return argv + ["--", src.rstrip("/") + "/", f"{host}:{layout.staging}/"]


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def parse_progress(line: str) -> RsyncProgress | None:
    """Parse one ``--info=progress2`` line; None for anything else."""
    match = _PROGRESS.match(line)
    if not match:
        return None
    nbytes, sent, remaining, total = match.groups()
    if sent is None:
        return RsyncProgress(_int(nbytes))
    return RsyncProgress(_int(nbytes), int(sent), int(total) - int(remaining), int(total))


def parse_stats(text: str) -> RsyncStats:
    """Parse the ``--stats`` block; raise ``SyncError`` if it is missing."""
    values = {}
    for key, pattern in _STATS.items():
        match = pattern.search(text)
        if not match:
            raise SyncError(f"rsync printed no statistics ({key} missing)")
        values[key] = _int(match.group(1))
    return RsyncStats(values["files"], values["bytes"], values["literal"], values["sent"])


def run_rsync(argv: list[str], host: str, on_progress: Callable[[RsyncProgress], None],
              cancel: CancelToken, stdin: bytes | None = None) -> RsyncStats:
    """Run ``argv`` (from ``rsync_argv``, or ssh running a remote rsync) until it ends; blocks.
    ``stdin``: a few bytes written to its stdin (e.g. a secret), else none.  Raises ``SyncError``
    on failure, ``SSHError`` when ssh could not connect, ``Interrupted`` when ``cancel`` was cancelled."""
    with tempfile.TemporaryFile() as errors:
        try:
            proc = tied_popen(argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=errors)
        except OSError as exc:
            raise SyncError(f"cannot run rsync: {exc.strerror}") from exc
        if stdin is not None:
            assert proc.stdin is not None
            try:
                proc.stdin.write(stdin)
                proc.stdin.close()
            except BrokenPipeError:
                pass
        output = []
        pending = b""
        stdout = proc.stdout
        assert isinstance(stdout, io.BufferedReader)  # stdout=PIPE, binary, buffered
        with cancel.track(proc), stdout:
            while True:
                chunk = stdout.read1(65536)
                if not chunk:
                    break
                pending += chunk
                *lines, pending = re.split(rb"[\r\n]", pending)
                for raw in lines:
                    line = raw.decode("utf-8", "replace")
                    progress = parse_progress(line)
                    if progress is not None:
                        on_progress(progress)
                    elif line.strip():
                        output.append(line)
            code = proc.wait()
        errors.seek(0)
        stderr = errors.read().decode("utf-8", "replace")
    if cancel.cancelled:
        raise Interrupted(f"{host}: interrupted")
    if code != 0:
        if code == 255 or HOST_KEY_FAILURE in stderr or "ssh: connect to host" in stderr:
            raise ssh_failure(host, stderr)
        messages = [line for line in stderr.splitlines() if line.strip()]
        detail = messages[0] if messages else "no message"
        raise RsyncFailed(f"{host}: rsync failed (exit {code}): {detail}")
    return parse_stats("\n".join(output))
