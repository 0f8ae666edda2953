"""Stop at once when the training rejects its input on every rank of the first world.

A bad training flag makes every rank exit 2 within seconds. horovodrun counts those as
failures and waits for other hosts (blacklisting these) until ``--elastic-timeout`` or the
stall watchdog ends it: GPUs held for up to an hour for nothing, and then exit 1. When the
first ``world_size`` worker exits (the first world's, from the driver's first ``reset``
event) are all 2 and no rank has committed (no ``progress`` event), the input is bad: the
launcher stops horovodrun and exits 2 (bad input: the launcher Job fails without a retry).

``first_world_rejected(records)`` is pure: the first world's size when that holds, else None.
``BadInputWatch(path, on_bad_input)`` follows the events file in one thread
(``start()``/``stop()``) and calls ``on_bad_input(world_size)`` once.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

from elastic.launch.events import Follower, Record
from shared.event_kinds import Kind
from shared.worker import Worker

BAD_INPUT = 2


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


class BadInputWatch:
    """Follows the driver's events file; calls ``on_bad_input(world_size)`` once (module
    docstring)."""

    def __init__(self, path: str, on_bad_input: Callable[[int], None], interval: float = 0.5):
        self._follower = Follower(path)
        self._world = FirstWorld()
        self._on_bad_input, self._interval = on_bad_input, interval
        self._worker = Worker(self._run, "bad-input-watch")
        self._stop = self._worker.stopping
        self.fired = False

    def start(self) -> None:
        """Start following the events file (once; ``shared.worker``)."""
        self._worker.start()

    def stop(self, timeout: float | None = 10.0) -> bool:
        """Stop following; True when the thread has ended (``shared.worker``)."""
        return self._worker.stop(timeout)

    def check(self) -> bool:
        """Read new events; fire when the first world rejected its input. True once fired."""
        if self.fired:
            return True
        size = self._world.observe(self._follower.poll())
        if size is not None:
            self.fired = True
            self._on_bad_input(size)
        return self.fired

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            if self.check() or self._world.settled:
                return
