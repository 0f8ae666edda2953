"""Where the discovery service's pods come from: the ``HostSource`` seam.

``DiscoveryService`` takes a ``HostSource`` and never knows which one: it starts it, drains
the pods that changed, turns them into hosts with its rules, and serves the result. Two
implementations:

- ``KubernetesSource(api)``: the API server's list + watch of the job's pods
  (``discovery.watch.PodWatcher``) into a ``discovery.cache.PodCache``; the daemon's source.
- ``StaticFileSource(path)``: the pods of a JSON file (``kubectl get pods -o json``'s
  ``{"items": [...]}``, or a plain list), read once; for a fixed set of hosts and for tests.

A new source (Ray nodes, a cloud's instance list) implements the protocol below and hands the
service pod-shaped dicts (``metadata.name/namespace/uid``, ``status.podIP``, the ``Ready``
condition...: what ``discovery.hosts`` reads).
"""
from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any, Protocol

from discovery.cache import PodCache
from discovery.errors import ConfigError
from discovery.kube import PodAPI
from discovery.watch import PodWatcher, WatchStatus

Changes = dict[str, "dict[str, Any] | None"]


class HostSource(Protocol):
    """The contract between a source of pods and ``DiscoveryService``.

    - ``start(on_change)`` begins delivering and returns at once; from then on the source
      calls ``on_change()`` (from any thread; it must not block) after ``drain()`` has more to
      hand over. Called once.
    - ``stop(timeout)`` ends delivery; blocks up to ``timeout`` seconds (the service runs it
      in an executor); safe to call twice and before ``start``.
    - ``drain()`` hands over every pod changed since the last call: pod key
      (``namespace/name``) -> the pod now, ``None`` when it is gone. One caller, the
      service's publisher; the next call starts empty.
    - ``status`` is a ``WatchStatus``: ``synced`` once the first complete set of pods is in
      (the service serves nothing before), ``disconnected_since`` the monotonic time since
      which the data may be out of date (``None``: current), ``fatal`` a message once the
      source has given up for good.
    - ``alive``: the source still delivers (false before ``start``, after ``stop`` or a fatal end).
    """

    def start(self, on_change: Callable[[], None]) -> None: ...

    def stop(self, timeout: float = 10.0) -> None: ...

    def drain(self) -> Changes: ...

    @property
    def status(self) -> WatchStatus: ...

    @property
    def alive(self) -> bool: ...


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


def read_pods_file(path: str) -> list[dict[str, Any]]:
    """The pods of a JSON file: ``{"items": [...]}`` (``kubectl get pods -o json``) or a list.
    ``ConfigError`` naming the file when it cannot be read or is not that shape."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as exc:
        raise ConfigError(f"cannot read pods file {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise ConfigError(f"pods file {path} is not JSON: {exc}") from exc
    items = data.get("items") if isinstance(data, dict) else data
    if not isinstance(items, list) or not all(isinstance(p, dict) and isinstance(p.get("metadata"), dict)
                                              for p in items):
        raise ConfigError(f"pods file {path}: expected a list of pods or {{\"items\": [...]}}")
    return items


class StaticFileSource:
    """A fixed set of pods, read from a JSON file when constructed (``ConfigError`` if bad);
    synced and current from ``start`` on, never changes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._pods = read_pods_file(path)
        self._cache = PodCache()
        self._started = threading.Event()
        self._stopped = threading.Event()

    def start(self, on_change: Callable[[], None]) -> None:
        self._cache.replace(self._pods)
        self._started.set()
        on_change()

    def stop(self, timeout: float = 10.0) -> None:
        self._stopped.set()

    def drain(self) -> Changes:
        return self._cache.drain()[1]

    @property
    def status(self) -> WatchStatus:
        return WatchStatus(synced=True, connected=True) if self._started.is_set() else WatchStatus()

    @property
    def alive(self) -> bool:
        return self._started.is_set() and not self._stopped.is_set()
