"""Adoption's decision: whether the workers a new driver hears from make a whole running world
it may take over, and which.

A driver that adopts a running world (a launcher that took over the job while its workers
trained on) started none of them: the world is what the workers say. Two things come from each
worker's slot ``(host, local rank)``: its lease wrapper's claim (``lease_answers.Claim``: the
process waits to be adopted) and its notification service's answer (``Place``: the ranks Gloo
gave it, its commit count; fork patch 0112). ``decide`` is the rule, pure: no clock read, no
I/O. It answers ``Adopt`` with the world by rank once every rank of one world is claimed and
answered, ``Wait`` with what is missing while the deadline has not passed, ``GiveUp`` with the
reason after it (the caller then starts the job as today: a world it cannot reconstruct is not
guessed at).

The world is whole when the answers of the claimed slots name one size N, the ranks 0..N-1
each once, each host's local ranks 0..n-1 (its slots, as Horovod assigns them) and one local
size per host. Claims of slots outside the world (an older run's straggler) do not stop it;
they are left unadopted and end at their window.

A world lost between two worlds (a peer lost while no launcher led: its survivors left the
world for a reset and wait there for a driver, fork patch 0112) cannot be whole: nobody holds
a rank. Once every claimed slot answered that it is between two worlds and the claims have
not changed for ``SETTLE_SECS`` (every wrapper asks each second: all of them have asked),
``decide`` answers ``AdoptInReset``: those processes are taken over and the driver forms the
next world with them, as after a failure it saw. Per host only the slots 0..k-1 are taken
(Horovod numbers a host's slots from 0); a claimed slot above a gap is left to its window.
Some claimed slots still in a world and others between two is a world whose failure is
under way: its members reset once their collectives fail, so the rule waits.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

Slot = tuple[str, int]  # (host, local rank), as the lease claim and the registration name it

# seconds the claims of a world between two worlds must stay the same before it is adopted:
# three of the wrappers' questions (one a second, lease.POLL)
SETTLE_SECS = 3.0


@dataclass(frozen=True)
class Place:
    """Where one worker is in its world, as it answered (0112's ``WorkerWorldResponse``)."""
    host: str
    slot: int
    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int
    commits: int

    @classmethod
    def from_answer(cls, slot: Slot, ranks: Iterable[int] | None, commits: int) -> Place | None:
        """The place in a worker's answer, None while its Horovod is not initialized (or the
        answer is not six whole numbers: anything from the network is checked)."""
        values = tuple(ranks) if ranks is not None else ()
        if len(values) != 6 or not all(isinstance(v, int) and v >= 0 for v in values):
            return None
        rank, size, local_rank, local_size, cross_rank, cross_size = values
        if not (rank < size and local_rank < local_size and cross_rank < cross_size):
            return None
        return cls(slot[0], slot[1], rank, size, local_rank, local_size, cross_rank, cross_size, int(commits))


@dataclass(frozen=True)
class Adopt:
    """Take over this world: its places by rank (rank 0 first: the coordinator)."""
    world: tuple[Place, ...]

    def host_order(self) -> list[str]:
        """The world's hosts in the order of their lowest rank (the assignment order that keeps
        every adopted rank where it is)."""
        order: list[str] = []
        for place in self.world:
            if place.host not in order:
                order.append(place.host)
        return order


@dataclass(frozen=True)
class AdoptInReset:
    """Take over these processes, every one between two worlds (in a reset, waiting for a
    driver): the next world is formed with them, ranks given afresh (``slots`` by host, then
    slot)."""
    slots: tuple[Slot, ...]

    def host_order(self) -> list[str]:
        """The hosts of the adopted processes (first in the next world's assignment: rank 0,
        whose state the world syncs from, is one of the processes that trained)."""
        return list(dict.fromkeys(host for host, _ in self.slots))


@dataclass(frozen=True)
class Wait:
    """Not whole yet: ``missing`` says what is."""
    missing: str


@dataclass(frozen=True)
class GiveUp:
    """The deadline passed with the world not whole: ``reason`` names what was missing."""
    reason: str


def _name(slot: Slot) -> str:
    return f"{slot[0]}[{slot[1]}]"


def _whole(claimed: set[Slot], places: Mapping[Slot, Place | None]) -> tuple[Place, ...] | str:
    """The world the claimed slots' answers make, or what is missing from it."""
    if not claimed:
        return "no worker has asked to be adopted"
    unanswered = sorted(s for s in claimed if s not in places)
    if unanswered:
        return f"no answer yet from {', '.join(map(_name, unanswered[:4]))}" + \
            (f" and {len(unanswered) - 4} more" if len(unanswered) > 4 else "")
    resetting = sorted(s for s in claimed if places[s] is None)
    if resetting:
        return f"{_name(resetting[0])} is between two worlds (its Horovod is not initialized)"
    answered = [p for s in claimed if (p := places[s]) is not None]
    sizes = sorted({p.size for p in answered})
    # the world is the one the most claimed workers name (a straggler of an older world may
    # answer another size)
    size = max(sizes, key=lambda n: (sum(1 for p in answered if p.size == n), n))
    members = [p for p in answered if p.size == size]
    by_rank: dict[int, Place] = {}
    for place in members:
        if place.rank in by_rank:
            return f"rank {place.rank} is claimed by {_name((place.host, place.slot))} and " \
                   f"{_name((by_rank[place.rank].host, by_rank[place.rank].slot))}"
        by_rank[place.rank] = place
    absent = [r for r in range(size) if r not in by_rank]
    if absent:
        return f"rank {absent[0]} of {size} has not asked to be adopted" + \
            (f" ({len(absent)} ranks missing)" if len(absent) > 1 else "")
    per_host: dict[str, list[Place]] = {}
    for place in by_rank.values():
        per_host.setdefault(place.host, []).append(place)
    for host, on_host in per_host.items():
        local_sizes = {p.local_size for p in on_host}
        if local_sizes != {len(on_host)} or {p.slot for p in on_host} != set(range(len(on_host))) \
                or any(p.local_rank != p.slot for p in on_host):
            return f"the local ranks on {host} do not match its slots"
    return tuple(by_rank[r] for r in range(size))


def _between(claimed: set[Slot], places: Mapping[Slot, Place | None]) -> tuple[Slot, ...] | None:
    """The slots to adopt when every claimed slot answered that it is between two worlds (per
    host 0..k-1), None otherwise."""
    if not claimed or any(places.get(s, "unanswered") is not None for s in claimed):
        return None
    taken: list[Slot] = []
    for host in sorted({h for h, _ in claimed}):
        slot = 0
        while (host, slot) in claimed:
            taken.append((host, slot))
            slot += 1
    return tuple(taken) or None


def decide(claimed: Iterable[Slot], places: Mapping[Slot, Place | None], now: float,
           deadline: float, settled_since: float | None = None) -> Adopt | AdoptInReset | Wait | GiveUp:
    """Adopt the world of the ``claimed`` slots' ``places`` (a slot absent from ``places`` has
    not answered yet; None: it answered, not initialized), or their processes between two
    worlds once the claims have been the same since ``settled_since`` for ``SETTLE_SECS``;
    wait for what is missing until ``deadline``, then give up naming it."""
    claimed = set(claimed)
    whole = _whole(claimed, places)
    if not isinstance(whole, str):
        return Adopt(whole)
    between = _between(claimed, places)
    if between is not None:
        if settled_since is not None and now - settled_since >= SETTLE_SECS:
            return AdoptInReset(between)
        whole = f"{len(claimed)} workers are between two worlds; waiting for every one of them to ask"
    return Wait(whole) if now < deadline else GiveUp(whole)
