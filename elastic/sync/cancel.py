"""Cancellation shared by every worker of one ``dataset-sync`` run.

``CancelToken.cancel()`` (safe from a signal handler) sets the flag, wakes every ``wait`` and
terminates the subprocesses registered with ``track`` (their whole process group, see
``procs.tied_popen``).  Workers check ``cancelled`` between
steps; retry backoff waits with ``wait`` so a cancelled run does not sleep.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from elastic.common.procs import kill_group


class CancelToken:
    """A one-way stop flag that also stops tracked subprocesses."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.RLock()
        self._procs: set[subprocess.Popen] = set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def wait(self, seconds: float) -> bool:
        """Block up to ``seconds``; return True if cancelled meanwhile."""
        return self._event.wait(seconds)

    def cancel(self) -> None:
        """Set the flag and terminate the tracked processes (idempotent)."""
        self._event.set()
        with self._lock:
            procs = list(self._procs)
        for proc in procs:
            if proc.poll() is None:
                kill_group(proc)

    @contextmanager
    def track(self, proc: subprocess.Popen) -> Iterator[subprocess.Popen]:
        """Register ``proc`` for the duration of the block (terminated at once if already cancelled)."""
        with self._lock:
            self._procs.add(proc)
        if self.cancelled and proc.poll() is None:
            kill_group(proc)
        try:
            yield proc
        finally:
            with self._lock:
                self._procs.discard(proc)
