"""The driver as the simulation runs it: today's rules and I/O, and the old ones.

``TODAY`` is what the driver does now. Each entry of ``OLD`` changes one thing back to how it
was, so that a test can show the simulation finds what that rule broke (``tests/simulation``).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from elastic.driver import barrier
from elastic.driver.joins import Joins
from elastic.driver.liveness import Liveness


class MajorityDoubt(Liveness):
    """The old self-suspicion: more than half of the world silent at once, the driver suspects
    itself, every time (a silent majority was never lost)."""

    def doubts_itself(self, expired, now):
        world = len(self._watched)
        silent = sum(1 for w in self._watched.values() if self.silent(w))
        if silent * 2 > world:
            return f"{silent} of {world} workers silent at once: the driver suspects itself"
        return None


class StrandedWait(Joins):
    """The old joins: a joiner waiting above a failed sibling's empty slot was never dropped
    (it waited while its host was refused: for ever, with the fork's refusal)."""

    def stranded_keys(self, in_world):
        return []


def one_missing(checked_in: int, size: int) -> bool:
    """The old barrier deadline: it armed only when exactly one worker was missing."""
    return checked_in == size - 1 and size > 0


@dataclass(frozen=True)
class Rules:
    name: str
    liveness: type[Liveness] = Liveness
    pings_to_lose: int = 2  # sent pings that must fail in a row before a loss
    # ping senders for the workers that answered their last ping, and for those that did not;
    # None: one per ping under way (a frozen worker holds its sender for the ping deadline)
    main_threads: int | None = None
    suspect_threads: int | None = None
    backlog: int = 1024  # the rendezvous server's listen backlog
    keep_alive: bool = True  # the lease renews on one kept connection
    refuse_forever: bool = False  # a failed joiner's host never serves again while listed
    barrier_arms: Callable[[int, int], bool] = barrier.arms  # when the barrier deadline arms
    declared_work: bool = True  # a rank's background write counts as its main thread's progress
    joins: type[Joins] = Joins  # the joins' core


TODAY = Rules("today")

OLD = {
    # item: the old rule that broke it
    "silent-majority": replace(TODAY, name="old: a silent majority makes the driver doubt itself",
                               liveness=MajorityDoubt),
    "accept-backlog": replace(TODAY, name="old: backlog 5, a new connection per lease renewal",
                              backlog=5, keep_alive=False),
    "refused-for-ever": replace(TODAY, name="old: a failed joiner's host is refused for ever",
                                refuse_forever=True),
    "suspect-lane": replace(TODAY, name="old: one failed ping and an unsent one lose a worker; 4 suspect senders",
                            pings_to_lose=1, main_threads=4, suspect_threads=4),
    "barrier-one-missing": replace(TODAY, name="old: the barrier deadline arms only with exactly one worker missing",
                                   barrier_arms=one_missing),
    "main-thread-only": replace(TODAY, name="old: the barrier's progress check sees the main thread only",
                                declared_work=False),
    "stranded-wait": replace(TODAY, name="old: a joiner waiting above a failed sibling's slot is never dropped",
                             joins=StrandedWait),
}


def by_name(name: str) -> Rules:
    if name == "today":
        return TODAY
    if name in OLD:
        return OLD[name]
    raise ValueError(f"--rules wants today or one of {', '.join(OLD)}, got {name!r}")
