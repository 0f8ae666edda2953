"""Push discovery: the Horovod driver hears of host changes from the daemon in milliseconds.

``DaemonDiscovery(url, default_slots)`` is a Horovod ``HostDiscovery`` that lives in the
driver's process. ``start()`` starts one thread that long-polls the daemon
(``GET /hosts?wait=GENERATION`` through ``shared.daemon_client``: ``http://`` or ``unix:``
URLs, the bearer token -- ``token``, default ``DISCOVERY_TOKEN`` --, one connection per
answer): the daemon answers as soon as it serves a new table, so a change costs one HTTP
response and no process. ``stop()`` ends it. The driver (patched: 0105, push discovery)
blocks in ``wait_for_change`` and asks ``find_available_hosts_and_slots`` at once when it
returns True.

Fallbacks are the daemon's and ``discover-hosts``': a 503 (not synced), an error or an
unreachable daemon keeps the last good list (the driver keeps its host set); a body with a
bad line is rejected whole (never a partial list). Until the first good answer,
``find_available_hosts_and_slots`` blocks up to ``first_timeout`` and then raises
``RuntimeError`` (Horovod fails the job on a first discovery error, as with a script).
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from elastic.common.hostlist import MAX_SLOTS, split_host_slots, validate_host_name
from elastic.errors import BadAnswer, ConfigError
from shared import daemon_client
from shared import discovery_wire as wire
from shared.worker import Worker

log = logging.getLogger("elastic.push")



def parse_hosts(text: str, default_slots: int) -> dict[str, int]:
    """The daemon's ``/hosts`` body -> ``{host: slots}``, read as Horovod's own parser reads it:
    lines split on ``\n`` only. A line whose host fails ``validate_host_name`` or whose slots
    are not 1..``MAX_SLOTS`` is skipped with a warning and the others are kept, so one bad pod
    never freezes the job's host set. ``BadAnswer`` when the body is not whole (no final newline)."""
    if text and not text.endswith("\n"):
        raise BadAnswer("answer does not end with a newline (partial?)")
    hosts: dict[str, int] = {}
    for line in text.split("\n"):
        if not line:
            continue
        name, slots = split_host_slots(line, default_slots)
        try:
            validate_host_name(name)
        except ConfigError as exc:
            log.warning("skipping the daemon's line %r: %s", line[:80], exc)
            continue
        if not 0 < slots <= MAX_SLOTS:
            log.warning("skipping the daemon's line %r: slots must be 1..%d", line[:80], MAX_SLOTS)
            continue
        hosts[name] = slots
    return hosts


class DaemonDiscovery:
    """A Horovod HostDiscovery fed by the daemon's long poll (see the module docstring)."""

    def __init__(self, url: str, default_slots: int = 1, *, poll_timeout: float = 25.0,
                 first_timeout: float = 60.0, retry: float = 0.5, token: str | None = None,
                 clock: Callable[[], float] = time.monotonic):
        try:
            daemon_client.split_url(url)
        except daemon_client.BadURL:
            raise ValueError(f"discovery URL must be http://HOST[:PORT] or unix:/path, got {url!r}") from None
        self._url = url
        self._token = token if token is not None else (os.environ.get(daemon_client.TOKEN_ENV) or None)
        self._slots, self._poll_timeout = default_slots, poll_timeout
        self._first_timeout, self._retry, self._clock = first_timeout, retry, clock
        self._cond = threading.Condition()
        self._hosts: dict[str, int] | None = None
        self._generation = -1
        self._changed = False
        self._worker = Worker(self._run, "push-discovery", wake=self._wake)
        self._stop = self._worker.stopping
        self.polls = 0  # answers received (for the benchmark)

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start the long-poll thread (once; ``shared.worker``)."""
        self._worker.start()

    def stop(self) -> None:
        """Stop the thread without waiting for it: it ends within one poll timeout (it is a
        daemon thread); callers blocked in ``find_available_hosts_and_slots`` or
        ``wait_for_change`` return at once."""
        self._worker.stop(timeout=0)

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    # -- HostDiscovery -----------------------------------------------------------------------
    def find_available_hosts_and_slots(self) -> dict[str, int]:
        """The last good host list. Blocks until the first one; RuntimeError after first_timeout."""
        deadline = self._clock() + self._first_timeout
        with self._cond:
            while self._hosts is None:
                left = deadline - self._clock()
                if left <= 0 or self._stop.is_set():
                    raise RuntimeError(f"no host list from the discovery daemon at "
                                       f"{self._url} after {self._first_timeout:.0f}s")
                self._cond.wait(left)
            self._changed = False
            return dict(self._hosts)

    def last_hosts(self) -> list[str]:
        """The hosts of the last good list, without blocking ([] before the first one)."""
        with self._cond:
            return sorted(self._hosts or ())

    def wait_for_change(self, timeout: float) -> bool:
        """Block until the host list changed since the last find (True) or timeout (False)."""
        with self._cond:
            if not self._changed:
                self._cond.wait_for(lambda: self._changed or self._stop.is_set(), timeout)
            return self._changed

    # -- the poll thread ---------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._poll()
            except (OSError, ValueError, BadAnswer) as exc:  # no answer, bad bytes, a partial answer
                log.debug("discovery poll failed (keeping the last hosts): %s", exc)
                self._stop.wait(self._retry)

    def _poll(self) -> None:
        path = f"{wire.HOSTS}?{wire.WAIT_PARAM}={self._generation}&{wire.TIMEOUT_PARAM}={self._poll_timeout:g}"
        status, headers, body = daemon_client.get(self._url, path, self._token, self._poll_timeout + 10)
        self.polls += 1
        generation = headers.get(wire.GENERATION_LOWER, "")
        if status != 200:
            # 503 before the first sync (401 with a wrong token): keep what we have, ask again shortly
            if generation.isdigit():
                self._generation = int(generation)
            self._stop.wait(self._retry)
            return
        hosts = parse_hosts(body.decode("ascii", "strict"), self._slots)
        if not generation.isdigit():
            raise BadAnswer(f"no {wire.GENERATION} header: not a discovery daemon with long poll")
        with self._cond:
            self._generation = int(generation)
            if hosts != self._hosts:
                self._hosts = hosts
                self._changed = True
                self._cond.notify_all()
