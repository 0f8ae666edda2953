"""Virtual time: an event queue ordered by (time, order of scheduling)."""
from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Clock:
    now: float = 0.0
    _queue: list[tuple[float, int, Callable[[], None]]] = field(default_factory=list)
    _order: int = 0
    events: int = 0

    def at(self, when: float, action: Callable[[], None]) -> None:
        """Run action at when (now, if when is in the past)."""
        self._order += 1
        heapq.heappush(self._queue, (max(when, self.now), self._order, action))

    def run_until(self, end: float) -> None:
        while self._queue and self._queue[0][0] <= end:
            when, _, action = heapq.heappop(self._queue)
            self.now = when
            self.events += 1
            action()
        self.now = end
