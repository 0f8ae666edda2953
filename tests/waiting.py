"""The one way tests wait: ``wait_for(predicate, timeout, what)``.

Polls ``predicate()`` until it returns a truthy value and returns that value; after
``timeout`` seconds fails the test with ``timed out after Ns waiting for <what>`` and the last
value seen. ``interval`` is the pause between polls; ``alive`` (optional) is checked each
round and may raise at once (e.g. "the daemon exited") instead of waiting out the deadline;
``detail`` (optional) adds context to the failure (e.g. the tail of a log).
Every "wait until" in tests/ goes through here; never a bare sleep before an assertion.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float, what: str, *, interval: float = 0.05,
             alive: Callable[[], None] | None = None, detail: Callable[[], str] | None = None) -> T:
    """Block until ``predicate()`` is truthy (returns it); ``pytest.fail`` naming ``what``."""
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
