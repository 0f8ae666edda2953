"""Retries with exponential backoff for per-host work.

``RetryPolicy`` is a pure value: ``delays()`` lists the waits between attempts.  ``retry_call``
runs a callable until it succeeds, raises an error that is not retryable, or runs out of
attempts; it waits with the injected ``wait(seconds) -> bool`` (e.g. ``threading.Event.wait``,
which returns True to abandon the retries early, so a stopped command does not sleep).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` tries in all; waits ``base * factor**i`` seconds between them, capped at ``cap``."""

    attempts: int = 3
    base: float = 1.0
    factor: float = 2.0
    cap: float = 30.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {self.attempts}")
        if self.base < 0 or self.cap < 0 or self.factor < 1:
            raise ValueError(f"bad backoff (base={self.base}, factor={self.factor}, cap={self.cap})")

    def delays(self) -> list[float]:
        """The waits before attempts 2..N."""
        return [min(self.cap, self.base * self.factor ** i) for i in range(self.attempts - 1)]


def retry_call(
    func: Callable[[int], T],
    policy: RetryPolicy,
    is_retryable: Callable[[BaseException], bool],
    wait: Callable[[float], bool],
    on_retry: Callable[[int, BaseException, float], None] = lambda attempt, exc, delay: None,
) -> tuple[T, int]:
    """Call ``func(attempt)`` (attempt counts from 1) until it returns; return (result, attempts).

    Re-raises the last error when it is not retryable, when attempts are exhausted, or when
    ``wait`` returns True (abandon).  ``on_retry(attempt, error, delay)`` is told before each wait.
    """
    delays = policy.delays()
    attempt = 1
    while True:
        try:
            return func(attempt), attempt
        except Exception as exc:  # noqa: BLE001 - classified by is_retryable, re-raised otherwise
            if attempt > len(delays) or not is_retryable(exc):
                raise
            delay = delays[attempt - 1]
            on_retry(attempt, exc, delay)
            if wait(delay):
                raise
            attempt += 1
