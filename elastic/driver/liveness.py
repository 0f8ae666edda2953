"""The failure detector's decisions, pure: time comes in as arguments, decisions go out as values.

The driver pings every worker of the current world on an interval (``Ping``). A ping the driver
actually sent either comes back (``answered``) or fails at its deadline (``failed``); a progress
report (``heard``) counts as an answer. The rules, each with its reason:

- **Silent**: a ping sent since the last re-baseline failed and nothing was heard since. A
  ping still queued proves nothing: only a sent one can fail.
- **Lost** (``Lose``): silent, nothing heard for ``timeout``, and at least ``pings_to_lose``
  sent pings failed in a row. A worker whose one failed ping was a fluke gets its next ping
  sent before it can be lost, however long the queue in front of it.
- **Retry** (``Ping``, between rounds): a silent worker short of those failed pings, with no
  ping under way, gets its next one at the last moment it can still fail by the timeout
  (``retry_at``): the loss comes at its deadline, not at the next round, however long the rounds.
- **Lag** (``Rebaseline``): the detector woke more than ``lag_limit`` after it meant to (the
  driver was stopped, throttled or paused): what it missed proves nothing against a worker,
  so every worker counts as seen now.
- **Total silence** (``Rebaseline``, once): every worker of the world is silent and none has
  answered since the detector last forgave a total silence. It cannot tell its own network
  from theirs, so it forgives once; any answer from anyone proves its own network and ends the
  forgiveness; a second total silence loses them. A silent *majority* while others answer is
  no doubt about the driver: the others' answers prove its pings go out, so the silent are lost.

Nothing here reads a clock: ``now`` is whatever clock the caller keeps (``time.monotonic()``
in the driver, virtual time in ``elastic.simulation``).
"""
from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

Key = Hashable  # a worker: (host, slot) in the driver


@dataclass(frozen=True)
class Settings:
    """The detector's timing, in seconds."""
    timeout: float = 5.0  # nothing heard for this long, and silent: lost
    ping_timeout: float = 1.0  # a ping's deadline
    interval: float = 1.0  # a ping round
    lag_limit: float = 1.0  # a wake-up this late means the driver itself stalled
    heard_margin: float = 0.5  # see heard_window
    pings_to_lose: int = 2  # failed pings in a row before a loss

    @property
    def heard_window(self) -> float:
        """A worker heard from within this long is not pinged: the pings after it still get
        two chances before its timeout."""
        return max(0.0, self.timeout - self.ping_timeout - self.interval - self.heard_margin)


@dataclass(frozen=True)
class Ping:
    """Queue one ping to each of keys (report ``sent`` when one actually leaves)."""
    keys: tuple[Key, ...]


@dataclass(frozen=True)
class Lose:
    """Give these workers up: silent for the timeout."""
    keys: tuple[Key, ...]
    reason: str


@dataclass(frozen=True)
class Rebaseline:
    """The detector suspects itself: nobody is lost for the silence so far."""
    reason: str
    silent: int
    world: int


Decision = Ping | Lose | Rebaseline


@dataclass
class _Watched:
    last_seen: float  # when it was last heard (an answer counts from its ping's send time)
    heard: float | None = None  # its last progress report
    queued: bool = False  # a ping is queued or under way
    failed: int = 0  # sent pings that failed since last_seen (and since the baseline)
    silent_since: float | None = None  # the send time of the first of those


@dataclass
class Liveness:
    """The detector's state for one world. Feed it observations; ``tick`` returns decisions and
    when it wants to be ticked again. Methods that name a worker it does not watch ignore it."""
    settings: Settings = field(default_factory=Settings)
    _watched: dict[Key, _Watched] = field(default_factory=dict)
    _baseline: float = float("-inf")
    _next_round: float | None = None
    _forgiven: bool = False  # a total silence was forgiven and nobody answered since

    # -- observations ---------------------------------------------------------------------------
    def watch(self, keys: Iterable[Key], now: float) -> None:
        """The workers the detector watches from now on (the current world's registered,
        running workers); a new one counts as seen now, one not in keys is forgotten."""
        keys = set(keys)
        for key in list(self._watched):
            if key not in keys:
                del self._watched[key]
        for key in keys:
            if key not in self._watched:
                self._watched[key] = _Watched(last_seen=now)

    def answered(self, key: Key, sent: float) -> None:
        """The ping sent at ``sent`` came back: it lived then."""
        w = self._watched.get(key)
        if w is None:
            return
        w.queued = False
        self._alive(w, sent)

    def failed(self, key: Key, sent: float) -> None:
        """The ping sent at ``sent`` had no answer by its deadline (or could not connect)."""
        w = self._watched.get(key)
        if w is None:
            return
        w.queued = False
        if sent >= self._baseline and sent >= w.last_seen:
            w.failed += 1
            if w.silent_since is None:
                w.silent_since = sent

    def dropped(self, key: Key) -> None:
        """The ping queued for key was never sent (the driver is stopping, or gave it up)."""
        w = self._watched.get(key)
        if w is not None:
            w.queued = False

    def heard(self, key: Key, now: float) -> None:
        """A progress report from key arrived at now: it runs."""
        w = self._watched.get(key)
        if w is None:
            return
        w.heard = now
        self._alive(w, now)

    def _alive(self, w: _Watched, when: float) -> None:
        """w lived at ``when`` (an answer or a report): its failed pings before count no more,
        and the driver's own network is proven (no total silence to forgive)."""
        self._forgiven = False
        if when >= w.last_seen:
            w.last_seen = when
            w.failed = 0
            w.silent_since = None

    # -- decisions ------------------------------------------------------------------------------
    def tick(self, now: float, late: float = 0.0) -> tuple[list[Decision], float]:
        """Decide at ``now``; ``late``: how long after its due time this tick came. Returns the
        decisions (in order) and when the next tick is due."""
        s = self.settings
        out: list[Decision] = []
        if late > s.lag_limit:
            out.append(self._rebaseline(now, f"the driver itself was {late:.1f} s late (stopped, "
                                              "throttled or paused)", silent=0))
            self._next_round = now
        expired = sorted((k for k, w in self._watched.items() if self.expired(w, now)), key=repr)
        if expired:
            doubt = self.doubts_itself(expired, now)
            if doubt is not None:
                out.append(self._rebaseline(now, doubt, silent=len(expired)))
                self._forgiven = True
            else:
                for k in expired:
                    del self._watched[k]
                out.append(Lose(tuple(expired), f"no answer for {s.timeout:g} s"))
        if self._next_round is None or now >= self._next_round:
            self._next_round = max((self._next_round or now) + s.interval, now + s.interval / 100)
            due_pings = sorted((k for k, w in self._watched.items() if self.wants_ping(w, now)), key=repr)
            for k in due_pings:
                self._watched[k].queued = True
            if due_pings:
                out.append(Ping(tuple(due_pings)))
        retries = sorted((k for k, w in self._watched.items() if self.wants_retry(w, now)), key=repr)
        for k in retries:
            self._watched[k].queued = True
        if retries:
            out.append(Ping(tuple(retries)))
        # a worker with enough failed pings expires by time alone; one short of them gets its
        # next ping by its retry time at the latest, and is then woken up by its failure
        due = self._next_round
        for w in self._watched.values():
            if w.failed >= s.pings_to_lose:
                due = min(due, max(now + s.interval / 100, w.last_seen + s.timeout))
            elif w.failed and not w.queued:
                due = min(due, max(now + s.interval / 100, self.retry_at(w)))
        return out, due

    # -- the rules (one each; elastic.simulation replays older ones by overriding them) ----------
    def silent(self, w: _Watched) -> bool:
        """A sent ping failed since it was last heard."""
        return w.failed >= 1

    def expired(self, w: _Watched, now: float) -> bool:
        """Lost: silent through the timeout, after enough sent pings failed in a row."""
        return w.failed >= self.settings.pings_to_lose and now >= w.last_seen + self.settings.timeout

    def wants_ping(self, w: _Watched, now: float) -> bool:
        """One ping at a time, and none for a worker heard from lately."""
        return not w.queued and (w.heard is None or now - w.heard >= self.settings.heard_window)

    def retry_at(self, w: _Watched) -> float:
        """When a silent worker short of its failed pings gets its next one, whatever the round:
        the last moment that ping can still fail by its timeout, so a worker is lost at its
        deadline even when the rounds are longer than it, and a fluke has the most time to end."""
        return w.last_seen + self.settings.timeout - self.settings.ping_timeout

    def wants_retry(self, w: _Watched, now: float) -> bool:
        """Silent, short of the failed pings a loss needs, no ping under way, its retry due."""
        return (not w.queued and 0 < w.failed < self.settings.pings_to_lose
                and now >= self.retry_at(w))

    def doubts_itself(self, expired: list[Key], now: float) -> str | None:
        """Why the driver suspects itself instead of losing the expired workers, or None."""
        world = len(self._watched)
        silent = sum(1 for w in self._watched.values() if self.silent(w))
        if silent == world and not self._forgiven:
            return f"all {world} workers silent at once: the driver suspects itself, once"
        return None

    # -- helpers ------------------------------------------------------------------------------
    def _rebaseline(self, now: float, reason: str, silent: int) -> Rebaseline:
        self._baseline = now
        world = len(self._watched)
        silent = silent or sum(1 for w in self._watched.values() if self.silent(w))
        for w in self._watched.values():
            w.last_seen = max(w.last_seen, now)
            w.failed = 0
            w.silent_since = None
        return Rebaseline(reason, silent=silent, world=world)

    def suspected(self, key: Key) -> bool:
        """Whether key is silent now (its next ping goes on the suspects' lane)."""
        w = self._watched.get(key)
        return w is not None and self.silent(w)

    def silent_since(self, key: Key) -> float | None:
        """When the first of key's failed pings (counted: sent since it was last heard and since
        the baseline) was sent; None while it answers, or when it is not watched."""
        w = self._watched.get(key)
        return None if w is None else w.silent_since

    @property
    def watched(self) -> frozenset[Key]:
        return frozenset(self._watched)

    @property
    def baseline(self) -> float:
        return self._baseline
