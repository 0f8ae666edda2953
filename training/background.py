"""``BackgroundWriter``: run one write at a time in a thread, so the training loop does not wait.

``submit(fn, what)`` starts ``fn()`` in a daemon thread when no write is in flight and returns
True; with one in flight it returns False (the caller skips this write, or ``wait``s first).
``wait(timeout)`` waits for the write in flight (True when none is left). A write that raises
is reported on stderr (``training: error: <what>: <cause>``) and counted in ``failures``;
it never ends training. ``waited`` sums the seconds callers spent in ``wait`` (what the loop
lost to writes), ``last_error`` holds the last failure's message.

Each write runs as work declared for the main thread (Horovod's ``declared_work``, this
project's fork): a rank whose main thread waits for it (``restore`` after a failure) is busy,
not hung, when the driver judges it at the registration barrier's deadline.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable

from shared.worker import Worker


class BackgroundWriter:
    """At most one write in flight; failures reported, not raised."""

    def __init__(self, name: str, report: Callable[[str], None] | None = None):
        self.name = name
        self._worker: Worker | None = None  # one per write (a Worker never restarts)
        self._report = report or _stderr
        self.failures = 0
        self.writes = 0
        self.waited = 0.0
        self.last_error: str | None = None

    def busy(self) -> bool:
        return self._worker is not None and self._worker.alive

    def submit(self, fn: Callable[[], object], what: str) -> bool:
        """Start ``fn`` in the background unless a write is in flight (then False)."""
        if self.busy():
            return False
        self._worker = Worker(lambda: self._run(fn, what), f"{self.name}-writer")
        self._worker.start()
        return True

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the write in flight, at most ``timeout`` seconds; True when none is left."""
        worker = self._worker
        if worker is None:
            return True
        start = time.monotonic()
        try:
            return worker.stop(timeout)
        finally:
            self.waited += time.monotonic() - start

    def _run(self, fn: Callable[[], object], what: str) -> None:
        try:
            with _declared_work():
                fn()
            self.writes += 1
        except Exception as exc:  # a failed write is reported, never fatal
            self.failures += 1
            self.last_error = f"{what}: {exc}".splitlines()[0]
            self._report(self.last_error)


def _declared_work() -> contextlib.AbstractContextManager:
    """Horovod's ``declared_work()`` (the fork's hook), imported at the first write, not at
    import time (tests/test_layout.py: Horovod loads only where the training needs it); a
    Horovod without it, or none, gets a block that does nothing: the main thread is judged
    alone."""
    try:
        from horovod.runner.elastic.worker import declared_work
    except ImportError:  # pragma: no cover - stock Horovod
        return contextlib.nullcontext()
    return declared_work()


def _stderr(message: str) -> None:
    sys.stderr.write(f"training: error: {message}\n")
    sys.stderr.flush()
