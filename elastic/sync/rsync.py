"""The rsync transport of ``dataset-sync``: what rsync is told, how it runs, what it reports.

``copy_flags`` (pure) is the one flag policy of every rsync that fills a host's staging
directory, the launcher's push and a relay child's pull from a peer alike: ``-rlpt --delete``
with ``--link-dest`` = the current version (unchanged files become hard links, nothing is sent),
the ``--symlinks`` mode's link flag, the manifest file excluded (and so protected from
``--delete``), ``--info=progress2,stats2`` for progress and the transferred-bytes report.
``DAEMON_REFUSED``/``daemon_module_settings`` are what the relay's rsync daemon must say so
that a pull with those flags works and follows no link (``elastic.sync.relay``).
``rsync_argv`` (pure) builds the push command from them. ``parse_progress``/``parse_stats``
(pure) read its output.  ``run_rsync`` runs it, reports progress through a callback, stops it
when the run is cancelled, and returns ``RsyncStats`` or raises ``SyncError``/``SSHError``
(``HostKeyUnverified`` when ssh refused the host key).
"""

from __future__ import annotations

import io
import re
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

from elastic.common.procs import tied_popen
from elastic.errors import ConfigError, Interrupted, RsyncFailed, SyncError
from elastic.ssh.exec import HOST_KEY_FAILURE, ssh_failure
from elastic.sync.cancel import CancelToken
from elastic.sync.manifest import HOST_FILES, SYMLINK_MODES
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


@dataclass(frozen=True)
class RsyncOptions:
    """The rsync transport's own settings: the rsync command on the hosts, the bandwidth cap
    per sender (KiB/s), the ``--symlinks`` mode (``manifest.SYMLINK_MODES``) and rsync's I/O
    timeout in seconds. Checked here (``ConfigError`` names the bad value)."""

    remote_rsync: str = "rsync"
    bwlimit_kbps: int | None = None
    symlinks: str = "refuse"
    io_timeout: int = 120

    def __post_init__(self) -> None:
        if not self.remote_rsync or self.remote_rsync.startswith("-") or any(
                c.isspace() or c in "'\"`$;&|<>()\\" for c in self.remote_rsync):
            raise ConfigError(f"bad remote rsync command {self.remote_rsync!r}")
        if self.symlinks not in SYMLINK_MODES:
            raise ConfigError(f"--symlinks must be one of {', '.join(SYMLINK_MODES)}, got {self.symlinks!r}")
        if self.bwlimit_kbps is not None and self.bwlimit_kbps < 1:
            raise ConfigError(f"--bwlimit must be >= 1 KiB/s, got {self.bwlimit_kbps}")
        if self.io_timeout < 1:
            raise ConfigError(f"rsync I/O timeout must be >= 1 second, got {self.io_timeout}")


LINK_FLAGS = {"refuse": "--safe-links", "copy-unsafe": "--copy-unsafe-links", "keep": "--links"}
"""rsync's link flag for each ``--symlinks`` mode when the source is SRC (see ``link_flag``)."""
DAEMON_REFUSED = ("copy-links", "copy-dirlinks", "copy-unsafe-links", "keep-dirlinks")
"""rsync options that make a sender read through a link, or a receiver write through one: the
relay's daemon refuses them (a peer's module may hold links out of it); no pull uses them."""


def link_flag(symlinks: str, *, from_copy: bool = False) -> str:
    """rsync's link flag for the ``--symlinks`` mode ``symlinks``: ``--safe-links`` for
    ``refuse`` (the manifest already refused unsafe links), ``--copy-unsafe-links`` for
    ``copy-unsafe``, plain ``--links`` for ``keep``.

    ``from_copy``: the source is a verified copy (a relay peer's), not SRC. The mode was applied
    when that copy was made, so its links are the manifest's and are copied as they are:
    ``--links`` for ``keep`` (links out of the tree included), ``--safe-links`` otherwise (such
    a copy holds no unsafe link; following one on the peer is what its daemon refuses).
    The receiver never follows a link (no ``--keep-dirlinks``), so nothing is written outside
    the staging directory."""
    if from_copy and symlinks == "copy-unsafe":
        return LINK_FLAGS["refuse"]
    return LINK_FLAGS[symlinks]


def copy_flags(options: RsyncOptions, current: str, *, checksum: bool = False, from_copy: bool = False) -> list[str]:
    """The flags of every rsync filling a host's staging directory (pure): a push from SRC and,
    with ``from_copy``, a relay pull from a peer's verified copy. ``current``: the host's current
    version (``--link-dest`` base, or ``""``); ``checksum``: compare contents, not size and time
    (an earlier copy did not verify). No source, destination or connection options."""
    flags = ["-rlpt", "--delete", link_flag(options.symlinks, from_copy=from_copy),
             *(f"--exclude=/{n}" for n in HOST_FILES), "--no-inc-recursive", "--info=progress2,stats2", "--no-h",
             f"--timeout={int(options.io_timeout)}"]
    if current:
        flags.append(f"--link-dest=../{current}")
    if checksum:
        flags.append("--checksum")
    if options.bwlimit_kbps:
        flags.append(f"--bwlimit={int(options.bwlimit_kbps)}")
    return flags


def daemon_module_settings() -> list[str]:
    """The rsyncd.conf lines of a relay peer's module that ``copy_flags(from_copy=True)``
    relies on: link targets sent exactly as they are (``munge symlinks = no``: a ``keep`` link
    out of the tree arrives as the manifest lists it), the link-following options refused, the
    host's own files (``manifest.HOST_FILES``) not served."""
    return ["munge symlinks = no", f"refuse options = {' '.join(DAEMON_REFUSED)}",
            f"exclude = {' '.join(f'/{n}' for n in HOST_FILES)}"]


def rsync_argv(src: str, host: str, layout: Layout, current: str, rsh: str, options: RsyncOptions, *,
               checksum: bool = False) -> list[str]:
    """The rsync command copying the local directory ``src`` into ``host``'s staging dir
    (``copy_flags``, then ssh as ``rsh``).

    The remote rsync is a *registered writer* (``remote.writer_rsync_path``): it holds
    ``<state>/writer`` open, so the next run can find and end it if this one dies."""
    return ["rsync", *copy_flags(options, current, checksum=checksum), "-e", rsh,
            f"--rsync-path={writer_rsync_path(layout, options.remote_rsync)}",
            "--", src.rstrip("/") + "/", f"{host}:{layout.staging}/"]


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
              cancel: CancelToken, stdin: bytes | None = None, on_line: Callable[[str], None] | None = None
              ) -> RsyncStats:
    """Run ``argv`` (from ``rsync_argv``, or ssh running a remote rsync) until it ends; blocks.
    ``stdin``: a few bytes written to its stdin (e.g. a secret), else none; ``on_line``: told
    of every other output line as it comes (a remote script's markers).  Raises ``SyncError``
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
                        if on_line is not None:
                            on_line(line)
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
