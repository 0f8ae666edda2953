"""Who holds a worker whose launcher may be gone: the adoption window's rule, pure.

A worker starts **attached** to the launcher that started it (its ssh session, its driver's
lease). When the lease wrapper's watch finds a reason to end it (``lease.decide``: the session
ended, the parent is gone, the driver fell silent) and there is an adoption window, the worker
becomes an **orphan** instead: the training goes on, its output goes to a log on the host, and
the wrapper asks at the same address whether a leader adopted it. An answer that it did makes
it **adopted**: from then on only the adopting leader's lease holds it (the session it had is
gone for good); that lease's silence makes it an orphan again. An orphan nobody adopts within
the window is ended, as a worker without a window is at once: nothing outlives a job that has
no launcher by more than the window.
"""
from __future__ import annotations

from dataclasses import dataclass

ATTACHED, ORPHAN, ADOPTED = "attached", "orphan", "adopted"


@dataclass(frozen=True)
class Step:
    """What the wrapper does now: ``say`` a line (or None), and ``end`` the worker with this
    reason (or None)."""
    say: str | None = None
    end: str | None = None


class Custody:
    """The state (``state``) and its rule; ``window``: seconds an orphan waits (0: none)."""

    def __init__(self, window: float) -> None:
        self.window = window
        self.state = ATTACHED
        self.since = 0.0  # when it became an orphan, or was adopted
        self._why = ""

    def step(self, now: float, why: str | None, adopted_at: float | None) -> Step:
        """One check. ``why``: ``lease.decide``'s reason to end it now (for an adopted worker:
        of the adopting leader's lease alone); ``adopted_at``: when a leader last answered that
        it adopted this worker (None: never)."""
        if self.state == ORPHAN:
            if adopted_at is not None and adopted_at >= self.since:
                self.state, self.since = ADOPTED, now
                return Step(say="adopted by the new leader: the training goes on under its lease")
            if now - self.since > self.window:
                return Step(end=f"{self._why}, and no leader adopted it within {self.window:g} s")
            return Step()
        if why is None:
            return Step()
        if self.window <= 0:
            return Step(end=why)
        self.state, self.since, self._why = ORPHAN, now, why
        return Step(say=f"{why}: the training goes on for up to {self.window:g} s for a new leader to adopt it")


__all__ = ["ADOPTED", "ATTACHED", "ORPHAN", "Custody", "Step"]
