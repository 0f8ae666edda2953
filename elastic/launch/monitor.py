"""The launcher's one monitor: reads the driver's events file once, in one thread, and feeds
every policy; the runner acts on what they decide (``elastic.launch.decisions``).

A policy is pure but for what it is given: ``step(records, tick) -> list[Decision]`` with the
records appended since the last step (in order) and the time (``Tick``); ``done`` is True once
it has nothing more to decide (it is then no longer asked). The policies: the stall watchdog
(``stall.StallPolicy``), bad input (``badinput.BadInputPolicy``), the first-world deadline
(``gang.FirstWorldPolicy``) and the start-up phases (``phases.PhasePolicy``).

``Monitor(path, policies, act)``: ``check()`` is one round (poll, step each policy not done,
hand each decision to ``act`` in order); ``start()`` runs rounds every ``interval`` seconds in
one thread (``shared.worker``) until ``stop()``, a ``Stop`` decision, or every policy is done.
``act`` runs in the monitor's thread.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

from elastic.launch.decisions import Decision, Stop, Tick
from elastic.launch.events import Follower, Record
from shared.worker import Worker


class Policy(Protocol):
    """See the module docstring."""

    @property
    def done(self) -> bool: ...

    def step(self, records: Sequence[Record], tick: Tick) -> list[Decision]: ...


def now() -> Tick:
    """The current time as a ``Tick``."""
    return Tick(time.time(), time.monotonic())


class Monitor:
    """See the module docstring."""

    def __init__(self, path: str, policies: Sequence[Policy], act: Callable[[Decision], None],
                 interval: float = 0.5, clock: Callable[[], Tick] = now):
        self._follower = Follower(path)
        self._policies = list(policies)
        self._act, self._interval, self._clock = act, interval, clock
        self._worker = Worker(self._run, "launcher-monitor")
        self.stopped: Stop | None = None  # the Stop decided, if any

    def start(self) -> None:
        """Start the rounds (once; ``shared.worker``)."""
        self._worker.start()

    def stop(self, timeout: float | None = 10.0) -> bool:
        """End the rounds; True when the thread has ended (raises what ended it, if anything)."""
        return self._worker.stop(timeout)

    @property
    def finished(self) -> bool:
        """A Stop was decided, or no policy has anything more to decide."""
        return self.stopped is not None or all(p.done for p in self._policies)

    def check(self) -> None:
        """One round: read the new records once, and step every policy that is not done."""
        if self.finished:
            return
        records = self._follower.poll()
        tick = self._clock()
        for policy in self._policies:
            if policy.done:
                continue
            for decision in policy.step(records, tick):
                if isinstance(decision, Stop):
                    if self.stopped is not None:
                        continue
                    self.stopped = decision
                self._act(decision)

    def _run(self) -> None:
        while not self._worker.stopping.wait(self._interval):
            self.check()
            if self.finished:
                return
