"""Joins: which slots get a joiner, when the world is told of the joiners that wait, which
joiners are given up, and when a failed joiner's host gets joiners again. Pure: no threads,
no clock, no I/O; events in (``started``, ``ready``, ``taken``, ``ended``, ``tick``),
decisions out (``Spawn``, ``Tell``, ``Drop``, ``Release``).

A joiner is a worker started on a free slot while the world trains (spawn first). It waits at
the rendezvous once its set-up is done; the world is then told (``Tell``) and its next reset
takes it in. A host's slots are taken in as a prefix (local ranks are 0..n-1): a joiner on
slot 1 is taken in only with slot 0 in the world or taken in with it.

The rules (``docs/driver.md``, "Joins' rules"), each with its reason where it is decided:

- spawn: a free slot of a listed host beyond its world's slots, within ``--max-np`` counting
  every listed host's world slots (a host whose removal is held counts too), the host
  discovered and not refused;
- tell: a joiner waits and no other still starts: the world is told now; else at most
  ``sibling_wait`` later, without the slow ones;
- deadline: a joiner not waiting ``deadline`` after its start is dropped and its host refused;
- failed: a joiner that ended before it was taken in is dropped and its host refused;
- stranded: a joiner that waits on a slot above a slot of its host that has no worker and
  gets none (its host refused) is dropped, its host not refused for it: it could only be
  taken in with that slot, and would hold its memory until the refusal ends (for ever, the
  fork's refusal);
- refusal: ``base * 2**(n-1)`` for the n-th in a row, at most ``longest`` (``Cooldowns``);
  once over and the host still listed: ``Release``, the host gets joiners again;
- left: a joiner whose slot is no longer listed is dropped, its host's refusal forgotten (a
  pod that comes back is a new chance).
"""
from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from elastic.driver.cooldowns import Cooldowns

Key = tuple[str, int]  # (host, slot)


@dataclass(frozen=True)
class Spawn:
    """Start a joiner on this slot."""
    key: Key


@dataclass(frozen=True)
class Tell:
    """Tell the coordinator: these joiners wait at the rendezvous (its next reset takes them)."""
    keys: tuple[Key, ...]
    alone: bool = False  # the sibling wait ran out: others still start


@dataclass(frozen=True)
class Drop:
    """Give up this joiner (end its process, answer its rank request with no slot); with
    refuse, its host gets no joiner until ``until``."""
    key: Key
    reason: str
    refuse: bool
    until: float | None = None


@dataclass(frozen=True)
class Release:
    """The refusal of host is over: it gets joiners again."""
    host: str
    after: float


Decision = Spawn | Tell | Drop | Release


@dataclass
class Settings:
    deadline: float = 300.0  # a joiner not waiting this long after its start is dropped
    sibling_wait: float = 5.0  # a waiting joiner is held back this long for siblings still starting
    refusal: float = 15.0  # a failed joiner's host: the first refusal
    longest: float = 600.0  # the longest refusal; a host not refused this long starts again


@dataclass
class Joiner:
    started: float
    ready: float | None = None  # waits at the rendezvous since
    told: bool = False  # the world was told of it


@dataclass(frozen=True)
class View:
    """One joiner as the driver sees it (for ``stranded``): waiting or still starting."""
    ready: bool


def stranded(joiners: Mapping[Key, View], members: Collection[Key], refused: Iterable[str]) -> list[Key]:
    """The waiting joiners that can never be taken in as things stand: on a refused host, a
    slot below them has neither a member of the world nor a joiner; none will start there
    before the refusal ends, and a host's slots are taken in as a prefix."""
    refused = set(refused)
    return [key for key, view in sorted(joiners.items())
            if view.ready and key[0] in refused and _gap(key, joiners, members) is not None]


def admitted(host: str, slots: int, members: Collection[Key], waiting: Iterable[Key]) -> int:
    """How many of host's slots the next world takes: its first slots that have a member of
    the world or a waiting joiner, up to the first that has neither (a prefix: local ranks
    are 0..n-1)."""
    taken = set(waiting) | set(members)
    n = 0
    while n < slots and (host, n) in taken:
        n += 1
    return n


@dataclass
class Joins:
    settings: Settings = field(default_factory=Settings)
    joiners: dict[Key, Joiner] = field(default_factory=dict)
    refusals: Cooldowns = field(init=False)
    _sibling_due: float = math.inf  # when the sibling wait of the joiners that wait runs out

    def __post_init__(self) -> None:
        self.refusals = Cooldowns(base=self.settings.refusal, longest=self.settings.longest)

    # -- what to start -----------------------------------------------------------------------
    def spawn(self, listed: Mapping[str, int], members: Collection[Key], discovered: Iterable[str],
              occupied: Iterable[Key], max_np: int, now: float) -> list[Spawn]:
        """The slots that get a joiner now (each is ``started``). listed: the hosts as the
        workers know them, in assignment order, with their slots (a held host too: it counts
        towards max_np with its world's slots and gets no joiner); members: the world's slots;
        occupied: slots where a process runs."""
        discovered, occupied, members = set(discovered), set(occupied), set(members)
        budget, wanted = max_np, []
        for host, slots in listed.items():
            closed = host not in discovered or self.refusals.is_out(host)
            for slot in range(slots):
                if budget <= 0:
                    break
                if (host, slot) in members:
                    budget -= 1  # the world's slots count first
                elif not closed and (host, slot) not in occupied:
                    budget -= 1
                    wanted.append((host, slot))
        for key in wanted:
            self.started(key, now)
        return [Spawn(key) for key in wanted]

    def started(self, key: Key, now: float) -> None:
        self.joiners[key] = Joiner(started=now)

    # -- what a joiner does --------------------------------------------------------------------
    def ready(self, key: Key, now: float) -> list[Decision]:
        """key waits at the rendezvous. Tell the world now when no joiner still starts (they
        join in one reset); else wait for them at most ``sibling_wait`` (a slow one never holds
        the others back)."""
        joiner = self.joiners.get(key)
        if joiner is None or joiner.ready is not None:
            return []
        joiner.ready = now
        if self.starting():
            self._sibling_due = min(self._sibling_due, now + self.settings.sibling_wait)
            return []
        return self._tell(alone=False)

    def taken(self, keys: Iterable[Key]) -> None:
        """A reset took these joiners into its world: they are workers now."""
        for key in keys:
            self.joiners.pop(key, None)

    def ended(self, key: Key, why: str, now: float, listed: Iterable[str]) -> list[Decision]:
        """The process of joiner key ended before it was taken in (it failed at start, or died
        waiting): it is dropped and its host refused (a bad node would fail the next one too),
        while still listed."""
        if key not in self.joiners:
            return []
        return self._drop(key, f"exited before it was taken in ({why})", refuse=True, now=now,
                          listed=set(listed))

    def starting(self) -> list[Key]:
        return sorted(k for k, j in self.joiners.items() if j.ready is None)

    def waiting(self) -> list[Key]:
        return sorted(k for k, j in self.joiners.items() if j.ready is not None)

    # -- time passes ---------------------------------------------------------------------------
    def tick(self, now: float, listed: Mapping[str, int], members: Collection[Key]) -> list[Decision]:
        """Deadlines, sibling waits, stranded joiners, refusals that end, slots that left."""
        out: list[Decision] = []
        hosts = set(listed)
        for key in sorted(self.joiners):
            if key[1] >= listed.get(key[0], 0):
                out += self._drop(key, "its host left discovery before it was taken in", refuse=False,
                                  now=now, listed=hosts)
        for host in self.refusals.hosts():
            if host not in hosts:
                self.refusals.forget(host)
        for key, joiner in sorted(self.joiners.items()):
            if joiner.ready is None and now >= joiner.started + self.settings.deadline:
                out += self._drop(key, f"not waiting at the rendezvous {self.settings.deadline:g} s after "
                                  "its start", refuse=True, now=now, listed=hosts)
        for key in self.stranded_keys(members):
            out += self._drop(key, f"slot {_gap(key, self.joiners, members)} of its host has no worker and "
                              "gets none while the host is refused: it cannot be taken in", refuse=False,
                              now=now, listed=hosts)
        if now >= self._sibling_due and any(not j.told for j in self.joiners.values() if j.ready is not None):
            out += self._tell(alone=bool(self.starting()))
        out += [Release(r.host, r.after) for r in self.refusals.due(now, listed=hosts, running=())]
        return out

    def stranded_keys(self, members: Collection[Key]) -> list[Key]:
        """The joiners the stranded rule drops now (``stranded``)."""
        return stranded({k: View(j.ready is not None) for k, j in self.joiners.items()}, members,
                        self.refusals.hosts())

    def due(self) -> float:
        """The next time ``tick`` has something to decide (a deadline, a sibling wait, a
        refusal's end); math.inf: nothing."""
        times = [j.started + self.settings.deadline for j in self.joiners.values() if j.ready is None]
        if any(not j.told for j in self.joiners.values() if j.ready is not None):
            times.append(self._sibling_due)
        times += [u for h in self.refusals.hosts() if (u := self.refusals.until(h)) is not None]
        return min(times, default=math.inf)

    # -- helpers -------------------------------------------------------------------------------
    def _tell(self, alone: bool) -> list[Decision]:
        keys = tuple(k for k in self.waiting() if not self.joiners[k].told)
        self._sibling_due = math.inf
        if not keys:
            return []
        for key in keys:
            self.joiners[key].told = True
        return [Tell(keys, alone=alone)]

    def _drop(self, key: Key, reason: str, refuse: bool, now: float, listed: set[str]) -> list[Decision]:
        if self.joiners.pop(key, None) is None:
            return []
        until = None
        if refuse and key[0] in listed:
            until = self.refusals.keep_out(key[0], f"its joiner {key[0]}[{key[1]}] {reason}", now)
        out: list[Decision] = [Drop(key, reason, refuse=until is not None, until=until)]
        if not self.starting() and any(not j.told for j in self.joiners.values() if j.ready is not None):
            out += self._tell(alone=False)  # the joiners that wait were held back for this one
        return out


def _gap(key: Key, joiners: Mapping[Key, object], members: Collection[Key]) -> int | None:
    """The first slot below key's on its host with neither a member nor a joiner."""
    host, slot = key
    return next((s for s in range(slot) if (host, s) not in joiners and (host, s) not in members), None)
