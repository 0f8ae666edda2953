"""Whether the launcher that runs this horovodrun still leads its job: the driver's own check
before it acts on the workers (an abort of their collectives, a host-change notification).

``elastic-run --leader-election`` fences itself when its leadership ends
(``elastic.launch.fencing``): it kills horovodrun's session. But a leader paused past its
Lease (SIGSTOP, a frozen node) wakes with all its processes at once, and horovodrun's threads
run in the same moments as the fence: an ssh client whose session sshd ended during the pause
exits 255 at once, and the driver answers that exit by aborting the collectives of the world,
by then the world the new leader adopted (measured on the local cluster with horovodrun woken
first: 24 ms from the wake to the abort, and the adopted training processes died). So the
fence also writes where its leadership ends, its ``valid_until`` by ``time.monotonic()``
(CLOCK_MONOTONIC: one clock for every process of the host, running on while a process is
stopped), to the file ``ELASTIC_LEADER_VALID_UNTIL`` names, before horovodrun starts and at
each renewal; ``still_leads`` reads it, and past it the driver does not act: the fence is
about to end it. The file's value is never later than the fence's own (it is written after
each renewal), so the driver stops acting no later than the fence trips.

Without the variable (no election) the launcher leads. A file that cannot be read or parsed:
not leading (the fence writes it before horovodrun starts).

Not closed by this: a check passed just before a pause (the act then lands after it: only a
token the workers check would close that), and the acts it does not guard (the rendezvous
server's answers to requests queued while paused; pings, which change nothing): the fence's
kill, within milliseconds of the wake, bounds them.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping

from elastic.environment import ELASTIC_LEADER_VALID_UNTIL


def still_leads(env: Mapping[str, str] = os.environ, clock: Callable[[], float] = time.monotonic) -> bool:
    """True without ``ELASTIC_LEADER_VALID_UNTIL``, or while ``clock()`` is before the time
    in the file it names (module docstring)."""
    path = env.get(ELASTIC_LEADER_VALID_UNTIL)
    if not path:
        return True
    try:
        with open(path, encoding="ascii") as f:
            until = float(f.read().strip())
    except (OSError, ValueError):
        return False
    return clock() < until
