"""Record the daemon's host set while the job runs (for the timeline).

``HostRecorder(url, interval)``: ``start()`` starts one background thread that polls
``GET url/hosts`` every ``interval`` seconds and keeps a snapshot each time the set changes;
``stop()`` ends it (waits for the thread) and is safe to call twice; ``snapshots()`` returns
``[(unix_time, (host:slots, ...)), ...]``. A poll that fails is skipped: the daemon being
briefly unreachable or answering 503 (not synced yet) is not a host-set change. An empty
list before any host was served is kept here but is not an event in the timeline
(``timeline.host_events``).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

from elastic.errors import DaemonUnavailable
from elastic.launch.daemon import fetch_hosts


class HostRecorder:
    """Polls a discovery daemon's host list in a background thread (see module docstring)."""

    def __init__(self, url: str, interval: float = 0.5,
                 fetch: Callable[[str], list] = fetch_hosts, clock: Callable[[], float] = time.time):
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval}")
        self._url, self._interval, self._fetch, self._clock = url, interval, fetch, clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._snapshots: list[tuple[float, tuple[str, ...]]] = []

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="host-recorder", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.poll_once()  # the last state, so a change in the final interval is not lost

    def snapshots(self) -> list[tuple[float, tuple[str, ...]]]:
        with self._lock:
            return list(self._snapshots)

    def poll_once(self) -> None:
        try:
            hosts = tuple(sorted(self._fetch(self._url)))
        except DaemonUnavailable:
            return
        with self._lock:
            if not self._snapshots or self._snapshots[-1][1] != hosts:
                self._snapshots.append((self._clock(), hosts))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._stop.wait(self._interval)
