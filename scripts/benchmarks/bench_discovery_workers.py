"""Worker processes for scripts/benchmarks/bench-discovery: each one ends in a result or a one-line error.

``start(name, target, *args)`` forks a process (its own GIL, so the load it makes and the
latencies it measures do not contend with the benchmark) that runs ``target(*args, report)``;
``report(value)`` hands a value to the benchmark (any number of times). The process is named
``name`` for ``ps``/``top`` (``/proc/PID/comm``, 15 bytes at most).

``Worker.result(timeout, what)`` returns the next value reported. It raises ``WorkerFailed`` --
a ``SystemExit`` whose message is one line, so the benchmark ends with it and no traceback --
when the target raised (its one-line message), the process died without reporting (killed,
``os._exit``: its exit code or signal), or ``timeout`` passed. ``Worker.check(what)`` raises
the same at once when the process has ended, for the loops that run beside a worker.
``stop_all()`` terminates, then kills, every worker not yet stopped (call it in ``finally``).
Nothing here waits without a deadline.
"""
from __future__ import annotations

import ctypes
import multiprocessing
import queue
import signal
import time
from collections.abc import Callable
from typing import Any

from shared.exitcodes import EXIT_FAILURE  # bench-discovery puts the clone on sys.path

_CTX = multiprocessing.get_context("fork")
_started: list[Worker] = []


class WorkerFailed(SystemExit):
    """A worker ended without its result; the message is one line."""


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return f"{type(e).__name__}: {text}" if text != type(e).__name__ else text


def _run(name: str, target: Callable[..., Any], args: tuple[Any, ...], q: Any) -> None:
    try:
        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass
    try:
        target(*args, lambda value: q.put(("ok", value)))
    except BaseException as e:  # noqa: B036 -- everything a worker can end with goes to the benchmark
        q.put(("error", _one_line(e)))
        raise SystemExit(EXIT_FAILURE) from None


class Worker:
    def __init__(self, name: str, target: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.name = name
        self._q = _CTX.Queue()
        self.process = _CTX.Process(target=_run, args=(name, target, args, self._q), daemon=True)
        self.process.start()
        self.stopped = False

    def _ended(self, what: str) -> WorkerFailed:
        code = self.process.exitcode
        how = (f"was killed by {signal.Signals(-code).name}" if code is not None and code < 0
               else f"exited with code {code}")
        return WorkerFailed(f"error: {what} ({self.name}, pid {self.process.pid}) {how} before reporting")

    def _get(self, timeout: float) -> tuple[str, Any] | None:
        try:
            item: tuple[str, Any] = self._q.get(timeout=timeout)
            return item
        except queue.Empty:
            return None

    def result(self, timeout: float, what: str) -> Any:
        """The next value reported; ``WorkerFailed`` if it never comes (see the module doc)."""
        deadline = time.monotonic() + timeout
        while True:
            item = self._get(min(0.2, max(0.0, deadline - time.monotonic())))
            if item is None and not self.process.is_alive():
                item = self._get(1.0)  # a value put just before the end is still in the pipe
                if item is None:
                    raise self._ended(what)
            if item is not None:
                kind, value = item
                if kind == "error":
                    raise WorkerFailed(f"error: {what} ({self.name}) failed: {value}")
                return value
            if time.monotonic() > deadline:
                raise WorkerFailed(f"error: {what} ({self.name}) reported nothing in {timeout:g} s")

    def check(self, what: str) -> None:
        """Raise ``WorkerFailed`` at once if the process has ended (its error if it sent one)."""
        if self.process.is_alive():
            return
        item = self._get(0.5)
        if item is not None and item[0] == "error":
            raise WorkerFailed(f"error: {what} ({self.name}) failed: {item[1]}")
        raise self._ended(what)

    def stop(self, timeout: float = 10) -> None:
        """Terminate (SIGTERM, then SIGKILL after ``timeout``) and reap the process."""
        self.stopped = True
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout)
            if self.process.is_alive():
                self.process.kill()
        self.process.join(timeout)


def start(name: str, target: Callable[..., Any], *args: Any) -> Worker:
    """Fork a worker running ``target(*args, report)`` (see the module doc)."""
    w = Worker(name, target, args)
    _started.append(w)
    return w


def stop_all() -> None:
    """Stop every worker started and not yet stopped."""
    while _started:
        w = _started.pop()
        if not w.stopped:
            w.stop()
