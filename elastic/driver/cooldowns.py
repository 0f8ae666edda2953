"""Which hosts get no new worker for a while, and when each serves again. Pure.

Two reasons keep a host out:

- **Quarantine**: one of its workers was lost for silence (frozen, hung GPU, vanished node).
- **Refusal**: a joiner started there failed or missed its join deadline.

Both are a cooldown, never for ever: a restarted pod often comes back under the same name,
and a multi-slot pod's other slots may be fine. The cooldown doubles with each one in a row
(``base * 2**(n-1)``, at most ``longest``); a host left alone for ``longest`` starts its count
again. ``due`` releases a host whose cooldown is over, that is still listed and where no worker
the driver gave up still runs (those must end first): it gets workers again.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Release:
    """Host serves again: its cooldown is over."""
    host: str
    after: float  # seconds since it was kept out


@dataclass
class _Out:
    reason: str
    since: float
    until: float


@dataclass
class Cooldowns:
    base: float = 15.0
    longest: float = 600.0
    _out: dict[str, _Out] = field(default_factory=dict)
    _count: dict[str, tuple[int, float]] = field(default_factory=dict)  # host -> (in a row, last)

    def keep_out(self, host: str, reason: str, now: float) -> float:
        """Keep host out (a quarantine or a refusal) from now; returns when it may serve again.
        A host already out keeps its longer cooldown."""
        count, last = self._count.get(host, (0, now))
        if now - last > self.longest:
            count = 0
        current = self._out.get(host)
        if current is None:
            count += 1
        self._count[host] = (count, now)
        until = now + min(self.longest, self.base * 2 ** (count - 1))
        if current is not None:
            until = max(until, current.until)
        self._out[host] = _Out(reason, since=now if current is None else current.since, until=until)
        return until

    def in_a_row(self, host: str) -> int:
        """How many times host was kept out in a row (0: never, or not for ``longest``)."""
        return self._count.get(host, (0, 0.0))[0]

    def is_out(self, host: str) -> bool:
        return host in self._out

    def why(self, host: str) -> str | None:
        out = self._out.get(host)
        return None if out is None else out.reason

    def until(self, host: str) -> float | None:
        out = self._out.get(host)
        return None if out is None else out.until

    def due(self, now: float, listed: Iterable[str], running: Iterable[str]) -> list[Release]:
        """The hosts that serve again at now: cooldown over, still listed, and not in running
        (the hosts where a worker the driver gave up still runs: its exit not seen yet; a
        healthy sibling still training there does not hold the host back). A host out that is
        no longer listed is forgotten (a pod that comes back is a new chance)."""
        listed, running = set(listed), set(running)
        out: list[Release] = []
        for host in sorted(self._out):
            o = self._out[host]
            if host not in listed:
                if host not in running:
                    del self._out[host]
                continue
            if now >= o.until and host not in running:
                del self._out[host]
                out.append(Release(host, after=now - o.since))
        return out

    def hosts(self) -> list[str]:
        """The hosts kept out now (their cooldowns may be over: ``due`` releases them)."""
        return sorted(self._out)

    def forget(self, host: str) -> None:
        """host is out no more (it left discovery); its count stays for the next time."""
        self._out.pop(host, None)
