"""The pod watch, in three layers (after kopf), run in a thread this component owns.

1. ``_events(rv)``: one WATCH from ``rv``; yields ``(type, object)`` until the server ends the
   stream. Owns the open response (``stop()`` shuts it to interrupt a blocking read). An ERROR
   event raises: ``APIGoneError`` for 410, ``WatchError`` for any other code.
2. ``_session(resume_from)``: LIST when there is no version to resume from (the cache is
   replaced; vanished pods become deletions), then WATCH, re-watching from the last seen
   version when a stream ends. Owns the resource version: returns None on 410 (*relist*), or
   raises ``_Lost`` carrying the version to resume from (None after a ``WatchError``: the
   stream said something we do not understand, so the next session relists).
3. ``_run``: the outer loop. After ``_Lost`` (connection lost, server restarting, ERROR
   events) it waits (exponential backoff with jitter, growing with the consecutive failures)
   and starts the next session, like the official client's informer: the server replays what
   was missed, or answers 410 and the cache is relisted. It gives up only on
   ``APIBadRequestError`` (e.g. a bad selector), recorded as ``fatal``.

Each piece of mutable state has one owner: the cache is written by layer 2 only; the open
response belongs to layer 1; the resource version is a local of layer 2 handed to layer 3
only inside ``_Lost``; ``WatchStatus`` (with ``failures``, which drives the backoff) is kept
by ``_StatusBoard``, whose methods are the only transitions. A watch that keeps failing (every
stream an ERROR event) keeps relisting -- the served list stays current -- with the backoff
growing to its cap: a LIST that succeeds does not count as the watch working, only an event
or a stream the server ended cleanly does.

Nothing starts in the constructor: ``start()`` starts the thread, ``stop()`` sets the stop
event, shuts the open stream down (interrupting a blocking read) and joins: the project's one
thread lifecycle, ``shared.worker.Worker``. The loops wait
on the stop event, never plain sleeps. ``on_change`` is called from the watch thread after
the cache or the connection status changed; it must not block.
"""
from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from discovery.cache import PodCache
from discovery.errors import APIBadRequestError, APIError, APIGoneError, WatchError
from discovery.kube import PodAPI, iter_events
from discovery.status import WatchStatus
from shared.worker import Worker

log = logging.getLogger("discovery.watch")


def backoff_delay(attempt: int, base: float, cap: float, rand: Callable[[], float]) -> float:
    """Pure: the wait before reconnect ``attempt`` (0-based): ``min(cap, base*2^n)`` x [0.5, 1)."""
    return min(cap, base * (2 ** min(attempt, 30))) * (0.5 + rand() / 2)


class _StatusBoard:
    """Owns the current ``WatchStatus``; each method is one transition (thread-safe)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._status = WatchStatus()

    @property
    def current(self) -> WatchStatus:
        return self._status

    def _change(self, fn: Callable[[WatchStatus], WatchStatus]) -> WatchStatus:
        with self._lock:
            self._status = fn(self._status)
            return self._status

    def listed(self, rv: str) -> None:
        """A LIST succeeded: synced and current as of now."""
        now = self._clock()
        self._change(lambda s: replace(s, synced=True, connected=True, disconnected_since=None,
                                       resource_version=rv, last_event_at=now, lists=s.lists + 1,
                                       relists=s.relists + (1 if s.lists else 0)))

    def connected(self) -> bool:
        """A WATCH opened; True when that changed the status (it was disconnected)."""
        with self._lock:
            if self._status.connected:
                return False
            self._status = replace(self._status, connected=True, disconnected_since=None)
            return True

    def event(self, rv: str) -> None:
        """The stream delivered an event: the watch works."""
        now = self._clock()
        self._change(lambda s: replace(s, resource_version=rv or s.resource_version, last_event_at=now,
                                       events=s.events + 1, failures=0))

    def stream_ended(self) -> None:
        """The server ended a stream cleanly (its timeout): the watch works."""
        self._change(lambda s: replace(s, failures=0))

    def lost(self, error: str) -> int:
        """A session failed; returns the failures in a row, this one included."""
        now = self._clock()
        s = self._change(lambda s: replace(
            s, connected=False, disconnected_since=s.disconnected_since if s.disconnected_since is not None else now,
            restarts=s.restarts + 1, failures=s.failures + 1, last_error=error))
        return s.failures

    def fatal(self, error: str) -> None:
        """The watch stopped for good."""
        now = self._clock()
        self._change(lambda s: replace(
            s, fatal=error, last_error=error, connected=False,
            disconnected_since=now if s.disconnected_since is None else s.disconnected_since))


class _Lost(Exception):
    """A session ended by ``cause``; the next one resumes from ``resume_from`` (None: relist)."""

    def __init__(self, cause: Exception, resume_from: str | None) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.resume_from = resume_from


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
        self._worker = Worker(self._run, "pod-watch", wake=self._shutdown_response)
        self._stop = self._worker.stopping  # the loops' stop rule (shared.worker)
        self._resp_lock = threading.Lock()
        self._resp: Any = None
        self._board = _StatusBoard(clock)

    # -- control -------------------------------------------------------------------------
    def start(self) -> None:
        """Start the watch thread (``shared.worker.Worker``); returns at once. ``RuntimeError``
        if already started."""
        if self._worker.started:
            raise RuntimeError("watcher already started")
        self._worker.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop: shut the open response down and join the thread (blocks up to ``timeout``).
        Safe to call twice."""
        self._worker.stop(timeout)

    def _shutdown_response(self) -> None:
        """Unblock a WATCH stream the thread is reading (``Worker``'s wake)."""
        with self._resp_lock:
            resp = self._resp
        if resp is not None:
            _shutdown(resp)

    @property
    def status(self) -> WatchStatus:
        return self._board.current

    @property
    def alive(self) -> bool:
        return self._worker.alive

    # -- layer 3 ---------------------------------------------------------------------------
    def _run(self) -> None:
        resume_from: str | None = None
        while not self._stop.is_set():
            try:
                resume_from = self._session(resume_from)
            except APIBadRequestError as e:
                log.error("watch cannot continue", extra={"fields": {"error": str(e)}})
                self._board.fatal(str(e))
                self._on_change()
                return
            except _Lost as lost:
                if self._stop.is_set():
                    break
                resume_from = lost.resume_from
                failures = self._board.lost(str(lost.cause))
                self._on_change()
                delay = backoff_delay(failures - 1, self._base, self._cap, self._rand)
                log.warning("watch lost; reconnecting", extra={"fields": {
                    "error": str(lost.cause), "retry_in": round(delay, 3), "attempt": failures,
                    "resume_from": resume_from}})
                self._stop.wait(delay)
            except Exception as e:  # a bug: keep serving the last good list, relist slowly
                log.exception("watch loop bug")
                resume_from = None
                self._board.lost(f"internal error: {type(e).__name__}: {e}")
                self._on_change()
                self._stop.wait(self._cap)

    # -- layer 2 ---------------------------------------------------------------------------
    def _session(self, resume_from: str | None) -> str | None:
        """LIST unless there is a version to resume from, then WATCH until 410 or stop.

        Returns None on 410 (relist next), else (stopped) the version to resume from. Raises
        ``_Lost`` on ``APIError``/``WatchError`` (``APIBadRequestError`` passes through).
        """
        rv = resume_from
        try:
            if rv is None:
                rv = self._list()
                if rv is None:
                    return None
            while not self._stop.is_set():
                try:
                    for kind, obj in self._events(rv):
                        new_rv = (obj.get("metadata") or {}).get("resourceVersion")
                        if new_rv:
                            rv = str(new_rv)
                        changed = kind != "BOOKMARK" and self.cache.apply(kind, obj)
                        self._board.event(rv)
                        if changed:
                            self._on_change()
                except APIGoneError:
                    log.info("resource version expired; relisting")
                    return None
                if not self._stop.is_set():
                    self._board.stream_ended()
            return rv
        except APIBadRequestError:
            raise
        except WatchError as e:
            raise _Lost(e, None) from e
        except APIError as e:
            raise _Lost(e, rv) from e

    def _list(self) -> str | None:
        """LIST into the cache; returns its resourceVersion (None when stopped meanwhile)."""
        started = self._clock()
        pods, rv = self._api.list()
        if self._stop.is_set():
            return None
        diff = self.cache.replace(pods)
        self._board.listed(rv)
        log.info("listed", extra={"fields": {
            "pods": len(pods), "resource_version": rv, "seconds": round(self._clock() - started, 3),
            "added": len(diff.added), "deleted": len(diff.deleted), "modified": len(diff.modified)}})
        self._on_change()
        return rv

    # -- layer 1 ---------------------------------------------------------------------------
    def _events(self, rv: str) -> Iterator[tuple[str, dict]]:
        """One WATCH from ``rv``: its events until the server ends it (or ``stop()``)."""
        resp = self._api.watch(rv, self._watch_timeout)
        with self._resp_lock:
            self._resp = resp
        if self._stop.is_set():
            _shutdown(resp)
        if self._board.connected():
            self._on_change()
        try:
            for ev in iter_events(resp):
                kind, obj = ev["type"], ev["object"]
                if kind == "ERROR":
                    code = obj.get("code")
                    message = f"watch ERROR event: {code} {obj.get('message', '')}".strip()
                    if code == 410:
                        raise APIGoneError(message, 410)
                    raise WatchError(message, code)
                yield kind, obj
        except APIGoneError:
            raise
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
