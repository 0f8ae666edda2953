"""One ``dataset-sync`` at a time per DEST and host: an exclusive lock held on the host.

Two syncs to the same DEST on one host can overlap (``elastic-run`` for the current hosts
while a long-running discovery daemon's prepare hook syncs a new pod).  Each would write the
same ``staging`` directory; so every attempt on a host first takes the lock and keeps it
until its commit is done (or it failed):

    with HostLock(host, layout, ssh_config, wait_seconds=600, cancel=token):
        ...  # probe, copy (rsync or SFTP), verify and commit

Mechanism: ``flock(1)`` (util-linux) on ``<state>/lock``, taken by a small holder script on
its own SSH connection (not the shared ControlMaster, so closing that does not drop the
lock).  The holder prints ``lock=held`` and then waits for its stdin to end; ``release``
closes stdin.  The kernel drops a ``flock`` when the holder's processes end, so a killed
``dataset-sync``, a dropped connection or a rebooted host leaves no stale lock (sshd ends
the session when the client goes away); the empty ``lock`` file stays and is harmless.
The SFTP fallback needs no other mechanism: it also runs its probe/seed/commit scripts
over SSH, and its SFTP transfers happen while the lock is held.  A host without ``flock``
is refused with a one-line error (``LockUnavailable``, not retried).

A second sync waits up to ``wait_seconds`` (``flock -w``); then ``LockTimeout`` names the
cause.  ``cancel`` aborts the wait.  ``lock_script`` is pure and testable on its own.
"""

from __future__ import annotations

import os
import selectors
import shlex
import subprocess
import time

from elastic.common.procs import tied_popen
from elastic.errors import Interrupted, LockTimeout, LockUnavailable, SSHError, SyncError
from elastic.ssh.exec import SSHClient, ssh_failure
from elastic.sync.cancel import CancelToken
from elastic.sync.remote import Layout

LOCK_NAME = "lock"


def lock_path(layout: Layout) -> str:
    return f"{layout.state}/{LOCK_NAME}"


def lock_script(layout: Layout, wait_seconds: float) -> str:
    """Holder script: prints ``lock=held`` once it holds the lock, then keeps it until its
    stdin ends; prints ``lock=timeout`` after ``wait_seconds`` or ``error=...`` instead."""
    q = shlex.quote
    return f"""
state={q(layout.state)}
if [ -L "$state" ] || {{ [ -e "$state" ] && [ ! -d "$state" ]; }}; then
  echo "error=$state is not a directory"; exit 0
fi
command -v flock >/dev/null 2>&1 || {{ echo "error=the host has no flock (util-linux)"; exit 0; }}
mkdir -p -- "$state" || {{ echo "error=cannot create $state"; exit 0; }}
exec 9>>"$state/{LOCK_NAME}" || {{ echo "error=cannot open $state/{LOCK_NAME}"; exit 0; }}
flock -n 9 || {{ echo lock=waiting; flock -w {max(0.0, wait_seconds):g} 9 || {{ echo lock=timeout; exit 0; }}; }}
echo lock=held
cat >/dev/null
"""


class HostLock:
    """The lock on one host (see the module docstring); a context manager, one use."""

    def __init__(self, host: str, layout: Layout, ssh_config: str | None, wait_seconds: float,
                 cancel: CancelToken | None = None, connect_timeout: int = 10, on_wait=None) -> None:
        self.host, self.layout, self.wait_seconds = host, layout, wait_seconds
        self.client = SSHClient(config=ssh_config, connect_timeout=connect_timeout)
        self.cancel = cancel or CancelToken()
        self.on_wait = on_wait
        self.connect_timeout = connect_timeout
        self._proc: subprocess.Popen | None = None

    def acquire(self) -> None:
        """Block until the lock is held; raise ``LockTimeout``/``LockUnavailable``/``SSHError``."""
        try:
            # killed with the thread that holds the lock, if dataset-sync dies
            self._proc = tied_popen(self.client.argv(self.host, lock_script(self.layout, self.wait_seconds)),
                                    new_session=False, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
        except OSError as exc:
            raise SSHError(f"cannot run {self.client.ssh}: {exc.strerror}") from exc
        stdout = self._proc.stdout
        assert stdout is not None  # stdout=PIPE
        deadline = time.monotonic() + self.wait_seconds + self.connect_timeout + 30
        buffer = b""
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(stdout, selectors.EVENT_READ)
                while True:
                    if self.cancel.cancelled:
                        raise Interrupted(f"{self.host}: interrupted while waiting for the lock")
                    if time.monotonic() > deadline:
                        raise LockTimeout(f"{self.host}: no answer while waiting for the lock on {self.layout.dest}")
                    if not sel.select(timeout=0.2):
                        continue
                    chunk = os.read(stdout.fileno(), 4096)
                    if not chunk:
                        self._fail_closed(buffer)
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for raw in lines:
                        line = raw.decode("utf-8", "replace").strip()
                        if line == "lock=held":
                            return
                        if line == "lock=waiting" and self.on_wait is not None:
                            self.on_wait()
                        elif line == "lock=timeout":
                            raise LockTimeout(
                                f"{self.host}: another dataset-sync to {self.layout.dest} held the host's lock "
                                f"({lock_path(self.layout)}) for more than {self.wait_seconds:g}s; gave up waiting")
                        elif line.startswith("error="):
                            raise LockUnavailable(f"{self.host}: cannot lock {self.layout.dest}: {line[6:]}")
        except BaseException:
            self.release()
            raise

    def _fail_closed(self, buffer: bytes) -> None:
        assert self._proc is not None
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        stderr = self._proc.stderr.read() if self._proc.stderr else b""
        if self._proc.returncode == 255:
            raise ssh_failure(self.host, stderr)
        detail = (stderr or buffer).decode("utf-8", "replace").strip().splitlines()
        raise SyncError(f"{self.host}: the lock holder ended (exit {self._proc.returncode}): "
                              f"{(detail or ['no message'])[-1]}")

    def release(self) -> None:
        """Drop the lock (close the holder's stdin; kill it if it lingers). Safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.stdin:
                proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream:
                stream.close()

    def __enter__(self) -> HostLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
