"""The training's output, owned by the lease wrapper while it waits to be adopted.

With an adoption window the wrapper starts the training with its stdout and stderr on pipes
of its own and copies them, unchanged, to the wrapper's own stdout and stderr (the ssh
session's, which horovodrun relays). When that session is gone (a write fails, or its reader
hung up) the rest goes to a log file on the host instead (``Output.detach``), so the training
never meets a closed pipe and trains on while a new leader adopts it; past ``LOG_LIMIT`` bytes
the log keeps only a count of what was dropped. ``Output.close`` waits until the training's
pipes have ended (it exited) and everything read was written.
Standard library only (it runs before anything else on the worker).
"""
from __future__ import annotations

import os
import select
import threading

LOG_LIMIT = 64 << 20  # bytes of a detached training's output kept in its log
CHUNK = 65536
PIPE_BUF = 4096  # a write this small to a pipe that polls writable never blocks
POLL_MS = 200


class Output:
    """Copies the training's pipes (``streams``: pipe read end -> our fd) in a thread each."""

    def __init__(self, streams: dict[int, int], log_path: str) -> None:
        self._streams = streams
        self.log_path = log_path
        self._lock = threading.Lock()
        self._log_fd: int | None = None
        self._detached = False
        self._logged = 0
        self.dropped = 0
        self._threads = [threading.Thread(target=self._copy, args=(src, dst), daemon=True,
                                          name=f"output-{dst}") for src, dst in streams.items()]

    def start(self) -> Output:
        for t in self._threads:
            t.start()
        return self

    @property
    def detached(self) -> bool:
        return self._detached

    def detach(self) -> None:
        """From now on the output goes to the log file (the session's end was seen elsewhere;
        a write waiting for room in the session's pipe gives up within ``POLL_MS``)."""
        self._detached = True

    def note(self, line: bytes) -> None:
        """A line of the wrapper's own, into the log."""
        with self._lock:
            self._to_log(line)

    def _to_log(self, data: bytes) -> None:
        # caller holds _lock
        if self._log_fd is None:
            try:
                self._log_fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            except OSError:
                self._log_fd = -1
        room = max(0, LOG_LIMIT - self._logged)
        if self._log_fd < 0 or room == 0:
            self.dropped += len(data)
            return
        try:
            os.write(self._log_fd, data[:room])
            self._logged += min(room, len(data))
            self.dropped += max(0, len(data) - room)
        except OSError:
            self.dropped += len(data)

    def _send(self, dst: int, data: bytes) -> bytes:
        """Write ``data`` to ``dst`` in pieces a ready pipe takes without blocking, waiting for
        room at most ``POLL_MS`` at a time; what is left once detached or once ``dst`` failed
        (then this detaches: the session is gone)."""
        poller = select.poll()
        poller.register(dst, select.POLLOUT)
        while data and not self._detached:
            ready = poller.poll(POLL_MS)
            if not ready:
                continue  # a session that takes nothing (a half-open connection): until detached
            if ready[0][1] & (select.POLLERR | select.POLLHUP | select.POLLNVAL):
                self._detached = True
                break
            try:
                data = data[os.write(dst, data[:PIPE_BUF]):]
            except OSError:
                self._detached = True
                break
        return data

    def _copy(self, src: int, dst: int) -> None:
        while True:
            try:
                data = os.read(src, CHUNK)
            except OSError:
                data = b""
            if not data:
                os.close(src)
                return
            if not self._detached:
                data = self._send(dst, data)
            if data:
                with self._lock:
                    self._to_log(data)

    def close(self, timeout: float = 2.0) -> None:
        """Wait (up to ``timeout`` s each) until the pipes have ended and been copied."""
        for t in self._threads:
            t.join(timeout)
        with self._lock:
            if self._log_fd is not None and self._log_fd >= 0:
                os.close(self._log_fd)
            self._log_fd = None


def pipes() -> tuple[dict[int, int], tuple[int, int]]:
    """New pipes for the training's stdout and stderr: ({read end: our fd}, (stdout write end,
    stderr write end)) to hand to the child."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    return {out_r: 1, err_r: 2}, (out_w, err_w)
