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
size per host. A claimed slot whose Horovod is not initialized (in a reset) leaves the world
incomplete: its peers are between two worlds, which a new rendezvous forms, not an adoption.
Claims of slots outside the world (an older run's straggler) do not stop it; they are left
unadopted and end at their window.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

Slot = tuple[str, int]  # (host, local rank), as the lease claim and the registration name it


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


def decide(claimed: Iterable[Slot], places: Mapping[Slot, Place | None], now: float,
           deadline: float) -> Adopt | Wait | GiveUp:
    """Adopt the world of the ``claimed`` slots' ``places`` (a slot absent from ``places`` has
    not answered yet; None: it answered, not initialized), wait for what is missing until
    ``deadline``, then give up naming it."""
    whole = _whole(set(claimed), places)
    if not isinstance(whole, str):
        return Adopt(whole)
    return Wait(whole) if now < deadline else GiveUp(whole)
