"""The gate on rank requests while a driver adopts a running world.

A worker between two worlds (in a reset, fork patch 0112's ``wait_for_driver``) asks the
driver that adopts it for its rank once that driver holds its notification service, which
may be before the driver knows the world it adopts, and before the registration barrier of
its first world exists. Such a request waits at the gate (its HTTP handler thread blocks:
Gloo's HTTP store gives up on a 404 or a refused connection, not on a slow answer):

- ``closed`` (adopting): it waits until the gate opens or refuses;
- ``open`` (the first world's registration barrier is set up, or no adoption): it goes on as
  any rank request;
- ``refusing`` (the adoption failed: the job starts again once the unadopted workers ended):
  it is answered that the worker is in no world (the fork's invalid slot: the worker ends),
  since no process of the world to come has started yet.

Thread-safe; no clock reads (``wait`` takes the caller's bound).
"""
from __future__ import annotations

import threading

CLOSED, OPEN, REFUSING = "closed", "open", "refusing"


class RankGate:
    """Where rank requests stand while a world is adopted; open unless ``close``d."""

    def __init__(self) -> None:
        self._state = OPEN
        self._changed = threading.Condition()

    @property
    def state(self) -> str:
        with self._changed:
            return self._state

    def close(self) -> None:
        self._set(CLOSED)

    def open(self) -> None:
        self._set(OPEN)

    def refuse(self) -> None:
        self._set(REFUSING)

    def _set(self, state: str) -> None:
        with self._changed:
            self._state = state
            self._changed.notify_all()

    def wait(self, timeout: float | None = None) -> str:
        """The state once it is not ``closed``, or ``closed`` after ``timeout`` seconds."""
        with self._changed:
            self._changed.wait_for(lambda: self._state != CLOSED, timeout)
            return self._state
