"""What a launcher policy decides, as values: the runner is the only one that acts on them.

- ``Stop(reason, exit_code)``: end the job now. The runner prints
  ``elastic-run: error: REASON``, stops horovodrun's session, and exits ``exit_code``.
- ``Note(line)``: say something; the job goes on.

A policy (``elastic.launch.monitor.Policy``) returns these from ``step``; the first ``Stop``
of a run wins, and the monitor stops feeding the policies after it.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stop:
    """End the job: say ``reason``, stop horovodrun, exit ``exit_code``."""

    reason: str
    exit_code: int


@dataclass(frozen=True)
class Note:
    """A line for the launcher's log; nothing else changes."""

    line: str


Decision = Stop | Note


@dataclass(frozen=True)
class Tick:
    """When a policy is asked: unix seconds (the driver's records carry these) and monotonic
    seconds (for deadlines a wall-clock step must not move)."""

    wall: float
    monotonic: float
