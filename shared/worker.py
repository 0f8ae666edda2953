"""The one background-thread lifecycle: start once, stop with a deadline, errors surfaced.

``Worker(target, name, wake=None)`` runs ``target()`` in one daemon thread named ``name``.

- ``start()`` starts the thread; a second ``start()`` does nothing (a worker never restarts:
  ``start()`` after ``stop()`` does nothing either).
- ``stopping`` is the ``threading.Event`` the target watches: ``stop()`` sets it. A target
  loops ``while not stopping.wait(interval)`` (or checks it between blocking calls).
- ``stop(timeout)`` sets ``stopping``, calls ``wake()`` (what unblocks the target sooner:
  notify a condition, shut a response down), then waits up to ``timeout`` seconds for the
  thread to end (``None``: as long as it takes; ``0``: not at all) and returns whether it has
  ended. Called from the worker's own thread (e.g. from a callback the target runs) it does
  not wait. Safe to call any number of times, before ``start()`` included.
- An exception that ends the target is not printed by the thread: it is kept and raised by
  the next ``stop()`` that sees the thread ended (once), so the owner learns of it where it
  stops the worker; ``error`` holds it meanwhile.

Standard library only (``shared``).
"""
from __future__ import annotations

import threading
from collections.abc import Callable


class Worker:
    """One background thread with one stop rule (see the module docstring)."""

    def __init__(self, target: Callable[[], None], name: str, *, wake: Callable[[], None] | None = None):
        self._target, self._name, self._wake = target, name, wake
        self.stopping = threading.Event()
        self.error: BaseException | None = None
        self._raised = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self._name

    @property
    def started(self) -> bool:
        return self._thread is not None

    @property
    def alive(self) -> bool:
        """True while the thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the thread (once; see the module docstring)."""
        with self._lock:
            if self._thread is not None or self.stopping.is_set():
                return
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()

    def stop(self, timeout: float | None = 10.0) -> bool:
        """Ask the target to end and wait up to ``timeout`` seconds; True when the thread has
        ended (or never started). Raises the exception the target died of, once."""
        self.stopping.set()
        if self._wake is not None:
            self._wake()
        thread = self._thread
        if thread is None:
            return True
        if thread is not threading.current_thread() and timeout != 0:
            thread.join(timeout)
        if thread.is_alive():
            return False
        if self.error is not None and not self._raised:
            self._raised = True
            raise self.error
        return True

    def _run(self) -> None:
        try:
            self._target()
        except BaseException as exc:  # noqa: BLE001 - kept for stop() to raise where the owner is
            self.error = exc
