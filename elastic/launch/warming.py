"""A standby's warm hash cache: while a launcher of ``--leader-election`` stands by, it hashes
its ``--dataset`` source into ``dataset-sync``'s hash cache (``python -m elastic.sync.warm``),
so that once it leads, its first ``dataset-sync`` (and its pod's daemon's: the same cache
directory) only ``stat``s the files. Hashing ImageNet's 140 GB takes minutes; a standby that
took over without this spent them before it prepared its first host.

``CacheWarmer(src).start()`` before the campaign; ``finish()`` when this launcher leads (the
hashing is its sync's first step anyway: waiting for it costs nothing, racing it would hash
twice); ``stop()`` always (ends it if still running: the launcher ended without leading). Its
one line (``warm: N files, H hashed, ...``) or its error goes to the launcher's stderr; a warm
that fails changes nothing (the sync hashes, and reports any error itself).
"""
from __future__ import annotations

import signal
import subprocess
import sys

from elastic.common.procs import kill_group, tied_popen

STOP_WAIT = 5.0  # seconds a stopped warm gets between SIGTERM and SIGKILL


class CacheWarmer:
    """One ``python -m elastic.sync.warm SRC`` in its own process group, tied to the launcher."""

    def __init__(self, src: str, python: str = sys.executable) -> None:
        self.argv = [python, "-m", "elastic.sync.warm", "--", src]
        self._proc: subprocess.Popen | None = None

    def start(self) -> None:
        self._proc = tied_popen(self.argv, stdin=subprocess.DEVNULL, stdout=sys.stderr, stderr=sys.stderr)

    def finish(self) -> int | None:
        """Wait until the warm has ended; its exit code (None if never started)."""
        return None if self._proc is None else self._proc.wait()

    def stop(self) -> None:
        """End the warm if it still runs (SIGTERM to its group, SIGKILL after ``STOP_WAIT``)."""
        if self._proc is None or self._proc.poll() is not None:
            return
        kill_group(self._proc)
        try:
            self._proc.wait(STOP_WAIT)
        except subprocess.TimeoutExpired:
            kill_group(self._proc, signal.SIGKILL)
            self._proc.wait()
