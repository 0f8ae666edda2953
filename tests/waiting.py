"""The one way tests wait: ``wait_for(predicate, timeout, what)``.

Polls ``predicate()`` until it returns a truthy value and returns that value; after
``timeout`` seconds fails the test with ``timed out after Ns waiting for <what>`` and the last
value seen. ``interval`` is the pause between polls; ``alive`` (optional) is checked each
round and may raise at once (e.g. "the daemon exited") instead of waiting out the deadline;
``detail`` (optional) adds context to the failure (e.g. the tail of a log).
Every "wait until" in tests/ goes through here; never a bare sleep before an assertion.

A deadline bounds how long a failing test takes to fail; it is never an expectation of speed
(speed goes into the benchmark scripts). So every deadline is at least ``MIN_TIMEOUT`` (60 s):
beside a CPU hog, or in a parallel run of the suite, a process that starts in 2 s idle takes
20-40 s, and the short deadlines some tests wrote (5-20 s) failed them while the product was
right. A wait that succeeds returns as soon as its condition holds, so the floor costs a
passing test nothing.
"""
from __future__ import annotations

import random
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")
MIN_TIMEOUT = 60.0


def wait_for(predicate: Callable[[], T], timeout: float, what: str, *, interval: float = 0.05,
             alive: Callable[[], None] | None = None, detail: Callable[[], str] | None = None) -> T:
    """Block until ``predicate()`` is truthy (returns it); ``pytest.fail`` naming ``what``."""
    timeout = max(timeout, MIN_TIMEOUT)
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = predicate()
        if last:
            return last
        if alive is not None:
            alive()
        if time.monotonic() > deadline:
            extra = f"\n{detail()}" if detail is not None else ""
            pytest.fail(f"timed out after {timeout}s waiting for {what} (last: {last!r}){extra}", pytrace=False)
        time.sleep(interval)


def free_port() -> int:
    """A TCP port no socket of this machine is bound to now (for a server told its port), below
    the kernel's ephemeral range: a port from that range can be taken, once its server is gone,
    by any outgoing connection, and a client that keeps reconnecting to it while nobody
    listens (a lease wrapper waiting for a new leader) connects to itself (TCP's simultaneous
    open: source port = destination port) and holds it, so the next server cannot bind it."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(200):
        port = random.randrange(10000, max(low, 10001))
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free TCP port found between 10000 and {low}")
