"""Stop at once when the training rejects its input on every rank of the first world.

A bad training flag makes every rank exit 2 within seconds. horovodrun counts those as
failures and waits for other hosts (blacklisting these) until ``--elastic-timeout`` or the
stall watchdog ends it: GPUs held for up to an hour for nothing, and then exit 1. When the
first ``world_size`` worker exits (the first world's, from the driver's first ``reset``
event) are all 2 and no rank has committed (no ``progress`` event), the input is bad: the
launcher stops horovodrun and exits 2 (bad input: the launcher Job fails without a retry).

``first_world_rejected(records)`` is pure: the first world's size when that holds, else None.
``BadInputPolicy`` is the launcher monitor's policy (``elastic.launch.monitor``): one
``Stop`` (exit 2) when that holds; done once it cannot hold any more.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from elastic.launch.decisions import Decision, Stop, Tick
from elastic.launch.events import Record
from shared.event_kinds import Kind
from shared.exitcodes import EXIT_USAGE

BAD_INPUT = EXIT_USAGE  # 2


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


class FirstWorld:
    """Folds the driver's records in order; ``rejected`` is the first world's size once its
    ranks all exited 2 before any commit, else None (and stays None once anything else came)."""

    def __init__(self) -> None:
        self.world_size: int | None = None
        self.exits = 0
        self.settled = False  # a commit, or an exit other than 2: never bad input
        self.rejected: int | None = None

    def observe(self, records: Iterable[Record]) -> int | None:
        for r in records:
            if self.settled or self.rejected is not None:
                break
            if r.kind == Kind.RESET and self.world_size is None:
                self.world_size = _count(r.detail.get("world_size"))
                if self.world_size is None:
                    self.settled = True  # a reset we cannot read: do not guess
            elif r.kind == Kind.PROGRESS:
                self.settled = True
            elif r.kind == Kind.WORKER_EXIT and self.world_size is not None:
                code = r.detail.get("exit_code")
                if not (isinstance(code, int) and not isinstance(code, bool) and code == BAD_INPUT):
                    self.settled = True
                    continue
                self.exits += 1
                if self.exits >= self.world_size:
                    self.rejected = self.world_size
        return self.rejected


def first_world_rejected(records: Iterable[Record]) -> int | None:
    """The first world's size when its ranks all exited 2 before any commit, else None. Pure."""
    return FirstWorld().observe(records)


class BadInputPolicy:
    """Decides ``Stop(..., 2)`` once the first world's ranks all exited 2 before any commit."""

    def __init__(self) -> None:
        self._world = FirstWorld()
        self.fired = False

    @property
    def done(self) -> bool:
        return self.fired or self._world.settled

    def step(self, records: Sequence[Record], tick: Tick) -> list[Decision]:
        size = self._world.observe(records)
        if size is None or self.fired:
            return []
        self.fired = True
        return [Stop(f"all {size} ranks of the first world exited 2 (bad input) before any commit: stopping",
                     BAD_INPUT)]
