"""Leaving on request: SIGTERM (pod deletion, eviction) and SIGUSR1 (checkpoint at the next commit).

``StopFlags.install()`` sets handlers: SIGTERM marks ``term`` so the training loop leaves right
after its next commit, and arms a timer that ends the process with ``EXIT_TERM`` after
``grace`` seconds in case the loop is stuck in a collective. SIGUSR1 marks ``checkpoint``.
The exit code is non-zero on purpose: horovodrun treats a worker that exits 0 as the end of
the whole job, and any other code as a lost worker.

A second SIGTERM ends the process at once, but only when it comes *later* than the first
(``repeat_after`` seconds, 1 s by default; ``TermRule``): one SIGTERM sent to a process
group (``kill -- -PGID``, ``timeout``, a container stop) reaches the trainer twice, directly
and forwarded by horovodrun, within milliseconds, and must count once, or the trainer would
leave without the commit and the checkpoint the first one asked for.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from shared.exitcodes import exit_for_signal

EXIT_TERM = exit_for_signal(signal.SIGTERM)  # 143, what a shell reports for a SIGTERMed process

FIRST, SAME, AGAIN = "first", "same", "again"


class TermRule:
    """When a SIGTERM counts. Pure: ``arrive(now)`` returns ``FIRST`` for the first one,
    ``SAME`` for one within ``repeat_after`` seconds of the first (the same request,
    delivered twice: ignore it), ``AGAIN`` for a later one (a real second request)."""

    def __init__(self, repeat_after: float = 1.0):
        self.repeat_after = repeat_after
        self.first: float | None = None

    def arrive(self, now: float) -> str:
        if self.first is None:
            self.first = now
            return FIRST
        return SAME if now - self.first <= self.repeat_after else AGAIN


class StopFlags:
    """Flags set by signal handlers; read by the training loop between steps."""

    def __init__(self, grace: float = 20.0, repeat_after: float = 1.0):
        self.grace = grace
        self.term = False
        self.term_at: float | None = None  # time.monotonic() of the first SIGTERM
        self.checkpoint = False
        self.rule = TermRule(repeat_after)
        self._timer: threading.Timer | None = None

    def install(self) -> StopFlags:
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGUSR1, self._on_usr1)
        return self

    def remaining(self) -> float | None:
        """Seconds of the grace left since the first SIGTERM (None: no SIGTERM yet)."""
        if self.term_at is None:
            return None
        return max(0.0, self.grace - (time.monotonic() - self.term_at))

    def _on_term(self, signum, frame) -> None:
        kind = self.rule.arrive(time.monotonic())
        if kind == AGAIN:
            leave(EXIT_TERM, "second SIGTERM, leaving now")
        if kind == SAME:
            return
        self.term = True
        self.term_at = time.monotonic()
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
