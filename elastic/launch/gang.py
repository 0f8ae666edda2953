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

Only a lack of capacity is worth that retry. With a ``judge`` (``elastic.launch.shortfall``:
the daemon's account of every missing worker), the deadline asks it why no world formed: 75
when the missing workers have no place yet; ``EXIT_WORKERS_FAILING`` (69), which the Job
counts, when workers that have their place crash-loop, cannot start, fail their preparation or
stay unready; and no decision yet while enough slots are served (the world is forming: asked
again at the next round).

- ``first_world_formed(records)`` (pure): whether the driver's records hold a ``reset``.
- ``deadline_for(timeout, draw)`` (pure): the run's deadline in seconds, ``draw`` in [0, 1).
- ``FirstWorldPolicy(seconds, min_slots, started, judge=None)``: the launcher monitor's policy
  (``elastic.launch.monitor``): one ``Stop`` when the deadline passes with no world formed (exit
  75 without a ``judge``; ``judge(wall_seconds)`` returns a ``shortfall.Verdict``); done once
  one has.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence

from elastic.launch.decisions import Decision, Stop, Tick
from elastic.launch.events import Record
from elastic.launch.shortfall import Verdict
from shared.event_kinds import Kind
from shared.exitcodes import EXIT_NO_CAPACITY, EXIT_WORKERS_FAILING

__all__ = ["EXIT_NO_CAPACITY", "EXIT_WORKERS_FAILING", "JITTER", "FirstWorldPolicy", "deadline_for",
           "first_world_formed"]

Judge = Callable[[float], Verdict]

JITTER = 0.25


def first_world_formed(records: Iterable[Record]) -> bool:
    """True when the records hold the driver's first ``reset`` (a world of ``--min-np`` or
    more slots was formed). Pure."""
    return any(r.kind == Kind.RESET for r in records)


def deadline_for(timeout: float, draw: float) -> float:
    """The run's first-world deadline: ``timeout`` stretched by up to ``JITTER`` of itself,
    ``draw`` in [0, 1) choosing where. Pure."""
    return timeout * (1.0 + JITTER * min(max(draw, 0.0), 1.0))


class FirstWorldPolicy:
    """Decides a ``Stop`` when no world formed within ``seconds`` of ``started`` (monotonic
    seconds): ``EXIT_NO_CAPACITY``, or what ``judge`` says (module docstring)."""

    def __init__(self, seconds: float, min_slots: int, started: float, judge: Judge | None = None):
        self.seconds, self._min_slots, self._started = seconds, min_slots, started
        self._judge = judge
        self.formed = False
        self.fired = False

    @classmethod
    def jittered(cls, timeout: float, min_slots: int, started: float, judge: Judge | None = None) -> FirstWorldPolicy:
        """A deadline for ``timeout`` with this run's own jitter (``deadline_for``)."""
        return cls(deadline_for(timeout, random.random()), min_slots, started, judge)

    @property
    def done(self) -> bool:
        return self.formed or self.fired

    def step(self, records: Sequence[Record], tick: Tick) -> list[Decision]:
        if self.done:
            return []
        if first_world_formed(records):
            self.formed = True
            return []
        if tick.monotonic - self._started < self.seconds:
            return []
        verdict = self._judge(tick.wall) if self._judge is not None else None
        if verdict is not None and verdict.exit_code is None:
            return []  # enough slots are served: the world is forming
        self.fired = True
        head = (f"no world of --min-np {self._min_slots} slots formed within {self.seconds:.0f} s "
                "(--first-world-timeout)")
        if verdict is not None and verdict.exit_code == EXIT_WORKERS_FAILING:
            return [Stop(f"{head}: {verdict.reason}: exiting {EXIT_WORKERS_FAILING} (workers failing): a retry "
                         "would meet the same failure", EXIT_WORKERS_FAILING)]
        why = f": {verdict.reason}" if verdict is not None else ""
        return [Stop(f"{head}{why}: exiting {EXIT_NO_CAPACITY} (no capacity) so the workers can be freed and the "
                     "job tried again later", EXIT_NO_CAPACITY)]
