"""Record the daemon's host set while the job runs (for the timeline).

``HostRecorder(url, interval)``: ``start()`` starts one background thread that polls
``GET url/hosts`` every ``interval`` seconds and keeps a snapshot each time the set changes;
``stop()`` ends it (waits for the thread, with a deadline: ``shared.worker``) and is safe to
call twice; ``snapshots()`` returns
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
from shared.worker import Worker


class HostRecorder:
    """Polls a discovery daemon's host list in a background thread (see module docstring)."""

    def __init__(self, url: str, interval: float = 0.5,
                 fetch: Callable[[str], list] = fetch_hosts, clock: Callable[[], float] = time.time):
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval}")
        self._url, self._interval, self._fetch, self._clock = url, interval, fetch, clock
        self._worker = Worker(self._run, "host-recorder")
        self._stop = self._worker.stopping
        self._lock = threading.Lock()
        self._snapshots: list[tuple[float, tuple[str, ...]]] = []

    def start(self) -> None:
        """Start polling (once; ``shared.worker``)."""
        self._worker.start()

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop polling (waits up to ``timeout`` for the thread), then take one last snapshot;
        raises what ended the thread, if anything did."""
        try:
            self._worker.stop(timeout)
        finally:
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
