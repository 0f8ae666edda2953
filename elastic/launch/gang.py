"""Gang admission without a gang scheduler: free the workers when the first world cannot form.

Two elastic jobs on a pool capped below the sum of their floors (``--min-np``) can each hold
part of the pool and wait for the rest: neither forms its first world, and horovodrun waits
up to ``--elastic-timeout`` (an hour in deploy/) per try, holding GPUs that the other job
needs. With ``--first-world-timeout T`` the launcher gives up when the driver formed no world
(no ``reset`` event) within a deadline drawn once per run from ``[T, T * (1 + JITTER))``:
it stops horovodrun and exits ``EXIT_NO_CAPACITY`` (75, ``EX_TEMPFAIL``: try again later).
In deploy/, the worker scaler then frees the job's workers and the Job tries again without
counting a failure (its podFailurePolicy ignores 75), so the freed slots go to the job that
was already waiting, which forms its world. The jitter keeps two jobs that started together
from giving up together and retrying in step.

- ``first_world_formed(records)`` (pure): whether the driver's records hold a ``reset``.
- ``deadline_for(timeout, draw)`` (pure): the run's deadline in seconds, ``draw`` in [0, 1).
- ``FirstWorldDeadline(path, seconds, on_timeout)``: follows the events file in one thread
  (``start()``/``stop()``); calls ``on_timeout(seconds)`` once when the deadline passes with
  no world formed, and stops following once one has.
"""
from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable

from elastic.launch.events import Follower, Record
from shared.event_kinds import Kind
from shared.exitcodes import EXIT_NO_CAPACITY
from shared.worker import Worker

__all__ = ["EXIT_NO_CAPACITY", "JITTER", "FirstWorldDeadline", "deadline_for", "first_world_formed"]

JITTER = 0.25


def first_world_formed(records: Iterable[Record]) -> bool:
    """True when the records hold the driver's first ``reset`` (a world of ``--min-np`` or
    more slots was formed). Pure."""
    return any(r.kind == Kind.RESET for r in records)


def deadline_for(timeout: float, draw: float) -> float:
    """The run's first-world deadline: ``timeout`` stretched by up to ``JITTER`` of itself,
    ``draw`` in [0, 1) choosing where. Pure."""
    return timeout * (1.0 + JITTER * min(max(draw, 0.0), 1.0))


class FirstWorldDeadline:
    """Follows the driver's events file; calls ``on_timeout(seconds)`` once when no world
    formed within ``seconds`` of ``start()`` (module docstring)."""

    def __init__(self, path: str, seconds: float, on_timeout: Callable[[float], None],
                 interval: float = 0.5, clock: Callable[[], float] = time.monotonic):
        self.seconds = seconds
        self._follower = Follower(path)
        self._on_timeout, self._interval, self._clock = on_timeout, interval, clock
        self._worker = Worker(self._run, "first-world-deadline")
        self._stop = self._worker.stopping
        self._started = 0.0
        self.formed = False
        self.fired = False

    @classmethod
    def jittered(cls, path: str, timeout: float, on_timeout: Callable[[float], None]) -> FirstWorldDeadline:
        """A deadline for ``timeout`` with this run's own jitter (``deadline_for``)."""
        return cls(path, deadline_for(timeout, random.random()), on_timeout)

    def start(self) -> None:
        """Start the clock and follow the events file (once; ``shared.worker``)."""
        self._started = self._clock()
        self._worker.start()

    def stop(self, timeout: float | None = 10.0) -> bool:
        """Stop following; True when the thread has ended (``shared.worker``)."""
        return self._worker.stop(timeout)

    def check(self) -> bool:
        """Read new events; fire when the deadline passed with no world. True once settled
        (a world formed, or fired)."""
        if self.formed or self.fired:
            return True
        if first_world_formed(self._follower.poll()):
            self.formed = True
        elif self._clock() - self._started >= self.seconds:
            self.fired = True
            self._on_timeout(self.seconds)
        return self.formed or self.fired

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            if self.check():
                return
