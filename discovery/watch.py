"""The pod watch, in three layers (after kopf), run in a thread this component owns.

1. ``_stream``: one WATCH call; yields events until the server ends it.
2. ``_list_then_watch``: LIST (the cache is replaced; vanished pods become deletions), then
   WATCH from the list's resourceVersion, re-watching from the last seen version when a
   stream ends. 410 Gone (as an HTTP status or an ERROR event) returns, meaning *relist*;
   any other ERROR event raises ``WatchError``.
3. ``_run``: the outer loop; after ``APIError`` (connection lost, server restarting) it
   waits (exponential backoff with jitter) and resumes the watch from the last version seen,
   like the official client's informer: the server replays what was missed, or answers 410
   and the cache is relisted. After ``WatchError`` it relists. It gives up only on
   ``APIBadRequestError`` (e.g. a bad selector), recorded as ``fatal``.

Nothing starts in the constructor: ``start()`` starts the thread, ``stop()`` sets the stop
event, shuts the open stream down (interrupting a blocking read) and joins. The loops wait
on the stop event, never plain sleeps. ``on_change`` is called from the watch thread after
the cache or the connection status changed; it must not block.
"""
from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

from discovery.cache import PodCache
from discovery.errors import APIBadRequestError, APIError, APIGoneError, WatchError
from discovery.kube import PodAPI, iter_events

log = logging.getLogger("discovery.watch")


def backoff_delay(attempt: int, base: float, cap: float, rand: Callable[[], float]) -> float:
    """Pure: the wait before reconnect ``attempt`` (0-based): ``min(cap, base*2^n)`` x [0.5, 1)."""
    return min(cap, base * (2 ** min(attempt, 30))) * (0.5 + rand() / 2)


@dataclass(frozen=True)
class WatchStatus:
    """An immutable view of the watch. Times are from the injected monotonic clock.

    ``disconnected_since`` is None while the watch is known current; otherwise the time the
    connection was lost (the data is current as of then).
    """

    synced: bool = False
    connected: bool = False
    disconnected_since: float | None = None
    resource_version: str = ""
    last_event_at: float | None = None
    lists: int = 0
    relists: int = 0
    restarts: int = 0
    events: int = 0
    last_error: str = ""
    fatal: str = ""


class PodWatcher:
    """Keeps ``cache`` equal to the pods the query selects. See the module docstring."""

    def __init__(self, api: PodAPI, cache: PodCache, *, on_change: Callable[[], None] = lambda: None,
                 watch_timeout: int = 300, backoff_base: float = 0.2, backoff_cap: float = 5.0,
                 clock: Callable[[], float] = time.monotonic,
                 rand: Callable[[], float] = random.random) -> None:
        if watch_timeout < 1:
            raise ValueError(f"watch_timeout must be >= 1 second, got {watch_timeout}")
        if not 0 < backoff_base <= backoff_cap:
            raise ValueError(f"need 0 < backoff_base <= backoff_cap, got {backoff_base}, {backoff_cap}")
        self._api = api
        self.cache = cache
        self._on_change = on_change
        self._watch_timeout = watch_timeout
        self._base, self._cap = backoff_base, backoff_cap
        self._clock, self._rand = clock, rand
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._resp_lock = threading.Lock()
        self._resp: Any = None
        self._status = WatchStatus()
        self._status_lock = threading.Lock()

    # -- control -------------------------------------------------------------------------
    def start(self) -> None:
        """Start the watch thread; returns at once. ``RuntimeError`` if already started."""
        if self._thread is not None:
            raise RuntimeError("watcher already started")
        self._thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop and join the thread (blocks up to ``timeout``). Safe to call twice."""
        self._stop.set()
        with self._resp_lock:
            resp = self._resp
        if resp is not None:
            _shutdown(resp)
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def status(self) -> WatchStatus:
        return self._status

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _set(self, **changes: Any) -> None:
        with self._status_lock:
            self._status = replace(self._status, **changes)

    def _lost(self, error: str) -> None:
        with self._status_lock:
            s = self._status
            since = s.disconnected_since if s.disconnected_since is not None else self._clock()
            self._status = replace(s, connected=False, disconnected_since=since,
                                   restarts=s.restarts + 1, last_error=error)
        self._on_change()

    # -- layer 3 ---------------------------------------------------------------------------
    def _run(self) -> None:
        self._rv: str | None = None
        self._attempt = 0
        while not self._stop.is_set():
            try:
                self._list_then_watch()
            except APIBadRequestError as e:
                log.error("watch cannot continue", extra={"fields": {"error": str(e)}})
                since = self._status.disconnected_since
                self._set(fatal=str(e), last_error=str(e), connected=False,
                          disconnected_since=self._clock() if since is None else since)
                self._on_change()
                return
            except (APIError, WatchError) as e:
                if self._stop.is_set():
                    break
                if isinstance(e, WatchError):
                    self._rv = None  # the stream said something we do not understand: relist
                self._lost(str(e))
                delay = backoff_delay(self._attempt, self._base, self._cap, self._rand)
                self._attempt += 1
                log.warning("watch lost; reconnecting", extra={"fields": {
                    "error": str(e), "retry_in": round(delay, 3), "attempt": self._attempt,
                    "resume_from": self._rv}})
                self._stop.wait(delay)
            except Exception as e:  # a bug: keep serving the last good list, relist slowly
                log.exception("watch loop bug")
                self._rv = None
                self._lost(f"internal error: {type(e).__name__}: {e}")
                self._stop.wait(self._cap)

    # -- layer 2 ---------------------------------------------------------------------------
    def _list_then_watch(self) -> None:
        """LIST unless there is a version to resume from, then WATCH until 410 or stop.

        Returns (with ``_rv`` None) on 410; raises ``APIError``/``WatchError`` with ``_rv``
        left at the last version seen, so the outer loop resumes the watch from there.
        """
        if self._rv is None:
            started = self._clock()
            pods, rv = self._api.list()
            if self._stop.is_set():
                return
            diff = self.cache.replace(pods)
            self._rv = rv
            self._attempt = 0
            with self._status_lock:
                s = self._status
                self._status = replace(s, synced=True, connected=True, disconnected_since=None,
                                       resource_version=rv, last_event_at=self._clock(),
                                       lists=s.lists + 1, relists=s.relists + (1 if s.lists else 0))
            log.info("listed", extra={"fields": {
                "pods": len(pods), "resource_version": rv, "seconds": round(self._clock() - started, 3),
                "added": len(diff.added),
                "deleted": len(diff.deleted), "modified": len(diff.modified)}})
            self._on_change()
        while not self._stop.is_set():
            try:
                self._stream()
            except APIGoneError:
                self._rv = None
            if self._rv is None:
                log.info("resource version expired; relisting")
                return

    # -- layer 1 ---------------------------------------------------------------------------
    def _stream(self) -> None:
        """One WATCH from ``_rv``, applying events, advancing ``_rv``; ``_rv = None`` on 410."""
        assert self._rv is not None
        resp = self._api.watch(self._rv, self._watch_timeout)
        with self._resp_lock:
            self._resp = resp
        if self._stop.is_set():
            _shutdown(resp)
        if not self._status.connected:
            self._attempt = 0
            self._set(connected=True, disconnected_since=None)
            self._on_change()
        try:
            for ev in iter_events(resp):
                kind, obj = ev["type"], ev["object"]
                if kind == "ERROR":
                    code = obj.get("code")
                    if code == 410:
                        self._rv = None
                        return
                    raise WatchError(f"watch ERROR event: {code} {obj.get('message', '')}".strip(),
                                     code)
                new_rv = (obj.get("metadata") or {}).get("resourceVersion")
                if new_rv:
                    self._rv = str(new_rv)
                changed = kind != "BOOKMARK" and self.cache.apply(kind, obj)
                with self._status_lock:
                    s = self._status
                    self._status = replace(s, resource_version=self._rv or s.resource_version,
                                           last_event_at=self._clock(), events=s.events + 1)
                if changed:
                    self._on_change()
        except APIError:
            if self._stop.is_set():
                return
            raise
        finally:
            with self._resp_lock:
                self._resp = None


def _shutdown(resp: Any) -> None:
    """Interrupt a blocking read on ``resp`` from another thread (urllib3 >= 2.3), else close."""
    try:
        if hasattr(resp, "shutdown"):
            resp.shutdown()
        else:
            resp.close()
    except Exception:  # closing a dead connection: nothing to do
        pass
