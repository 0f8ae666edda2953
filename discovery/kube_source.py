"""``KubernetesSource``: the job's pods from the API server (list + watch into a cache), the
discovery daemon's default ``discovery.source.HostSource``."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from discovery.cache import PodCache
from discovery.kube import PodAPI
from discovery.source import Changes
from discovery.status import WatchStatus
from discovery.watch import PodWatcher


class KubernetesSource:
    """The job's pods from the API server: list + watch (``PodWatcher``) into a ``PodCache``."""

    def __init__(self, api: PodAPI, *, watch_timeout: int = 300, backoff_base: float = 0.2,
                 backoff_cap: float = 5.0, clock: Callable[[], float] | None = None) -> None:
        self.cache = PodCache()
        self._on_change: Callable[[], None] = lambda: None
        extra: dict[str, Any] = {"clock": clock} if clock is not None else {}
        self.watcher = PodWatcher(api, self.cache, on_change=lambda: self._on_change(),
                                  watch_timeout=watch_timeout, backoff_base=backoff_base,
                                  backoff_cap=backoff_cap, **extra)

    def start(self, on_change: Callable[[], None]) -> None:
        self._on_change = on_change
        self.watcher.start()

    def stop(self, timeout: float = 10.0) -> None:
        self.watcher.stop(timeout)

    def drain(self) -> Changes:
        return self.cache.drain()[1]

    @property
    def status(self) -> WatchStatus:
        return self.watcher.status

    @property
    def alive(self) -> bool:
        return self.watcher.alive
