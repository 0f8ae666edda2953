"""``StaticFileSource``: a fixed set of pods from a JSON file (``kubectl get pods -o json``'s
``{"items": [...]}`` or a plain list), a ``discovery.source.HostSource`` for hosts that are not
watched (``discovery-daemon --pods-file``) and for tests."""
from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from discovery.cache import PodCache
from discovery.errors import ConfigError
from discovery.source import Changes
from discovery.status import WatchStatus


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
