"""Leaving on request: SIGTERM (pod deletion, eviction) and SIGUSR1 (checkpoint at the next commit).

``StopFlags.install()`` sets handlers: SIGTERM marks ``term`` so the training loop leaves right
after its next commit, and arms a timer that ends the process with ``EXIT_TERM`` after
``grace`` seconds in case the loop is stuck in a collective; a second SIGTERM ends it at
once. SIGUSR1 marks ``checkpoint``. The exit code is non-zero on purpose: horovodrun treats
a worker that exits 0 as the end of the whole job, and any other code as a lost worker.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

EXIT_TERM = 128 + signal.SIGTERM  # 143, what a shell reports for a SIGTERMed process


class StopFlags:
    """Flags set by signal handlers; read by the training loop between steps."""

    def __init__(self, grace: float = 20.0):
        self.grace = grace
        self.term = False
        self.checkpoint = False
        self._timer: threading.Timer | None = None

    def install(self) -> StopFlags:
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGUSR1, self._on_usr1)
        return self

    def _on_term(self, signum, frame) -> None:
        if self.term:
            leave(EXIT_TERM, "second SIGTERM, leaving now")
        self.term = True
        self._timer = threading.Timer(self.grace, leave, (EXIT_TERM, "SIGTERM grace period over"))
        self._timer.daemon = True
        self._timer.start()

    def _on_usr1(self, signum, frame) -> None:
        self.checkpoint = True


def leave(code: int, why: str) -> None:
    """End the process now with ``code`` after one line on stderr (no Horovod shutdown,
    which could wait on peers that are mid-collective)."""
    try:
        sys.stdout.flush()
        sys.stderr.write(f"training: {why} (exit {code})\n")
        sys.stderr.flush()
    finally:
        os._exit(code)
