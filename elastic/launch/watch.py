"""The launcher's one subscription to the discovery daemon, and the host recorder it feeds.

``DaemonWatch(url, interval)``: ``start()`` starts one thread that reads the daemon's hosts
document (``GET url/hosts.json``, parsed: ``shared.hosts_document``) every ``interval``
seconds and hands each answer, with its unix time, to every subscriber in order
(``subscribe(see)``; ``see(when, answer)``, ``answer`` the document or the exception that
stood for it: the daemon briefly unreachable, a 5xx, a malformed answer). ``stop()`` ends the
thread (waits for it, with a deadline: ``shared.worker``; safe twice) and then takes one last
look, so a change in the final interval is not lost. The subscribers: the host recorder here
and the wait explainer (``elastic.launch.waits``).

``HostRecorder``: keeps a snapshot each time the served host set changes; ``snapshots()``
returns ``[(unix_time, (host:slots, ...)), ...]`` (sorted lines). A failed answer, or a
daemon that has not listed the pods yet, is skipped: not a host-set change. An empty list
before any host was served is kept here but is not an event in the timeline
(``timeline.host_events``).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

from elastic.launch.waits import fetch_hosts_json
from shared.hosts_document import HostsDocument
from shared.worker import Worker

Answer = HostsDocument | Exception
Subscriber = Callable[[float, Answer], None]


class DaemonWatch:
    """Polls a discovery daemon's hosts document for its subscribers (module docstring)."""

    def __init__(self, url: str, interval: float = 0.5, fetch: Callable[[str], HostsDocument] = fetch_hosts_json,
                 clock: Callable[[], float] = time.time):
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval}")
        self._url, self._interval, self._fetch, self._clock = url, interval, fetch, clock
        self._subscribers: list[Subscriber] = []
        self._lock = threading.Lock()  # one look at a time: the thread's and stop()'s last one
        self._worker = Worker(self._run, "daemon-watch")

    def subscribe(self, see: Subscriber) -> None:
        """``see`` gets every answer from the next look on."""
        with self._lock:
            self._subscribers.append(see)

    def start(self) -> None:
        """Start looking (once; ``shared.worker``)."""
        self._worker.start()

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop looking (waits up to ``timeout`` for the thread), then take one last look;
        raises what ended the thread, if anything did."""
        try:
            self._worker.stop(timeout)
        finally:
            self.look()

    def look(self) -> None:
        """One answer of the daemon, handed to every subscriber."""
        with self._lock:
            answer: Answer
            try:
                answer = self._fetch(self._url)
            except (OSError, ValueError) as exc:
                answer = exc
            when = self._clock()
            for see in list(self._subscribers):
                see(when, answer)

    def _run(self) -> None:
        while not self._worker.stopping.is_set():
            self.look()
            self._worker.stopping.wait(self._interval)


class HostRecorder:
    """The served host sets, as they changed (module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshots: list[tuple[float, tuple[str, ...]]] = []

    def see(self, when: float, answer: Answer) -> None:
        """A ``DaemonWatch`` subscriber: keep the host set when it changed."""
        if not isinstance(answer, HostsDocument) or not answer.synced:
            return
        hosts = tuple(sorted(answer.host_lines()))
        with self._lock:
            if not self._snapshots or self._snapshots[-1][1] != hosts:
                self._snapshots.append((when, hosts))

    def snapshots(self) -> list[tuple[float, tuple[str, ...]]]:
        with self._lock:
            return list(self._snapshots)
