"""Environment variables as flag defaults, and flag values as numbers: the one rule every
package's command line follows.

``env_default(name, fallback)``: the variable's value if set and non-empty, else ``fallback``.
``env_int(name, fallback, error)``: the same as an integer. A flag's text (from the command
line or its variable) as a number: ``parse_int`` (None stays None), ``parse_positive`` (a
number > 0), ``parse_seconds`` (a finite number >= 0; 0 means off). A value that is not one
raises ``error`` (the caller's usage-error class, so its runner exits 2) naming the flag or
variable and the value.
"""
from __future__ import annotations

import math
import os
from typing import overload


def env_default(name: str, fallback: str | None = None) -> str | None:
    """The value of environment variable ``name`` if set and non-empty, else ``fallback``."""
    value = os.environ.get(name, "")
    return value if value else fallback


@overload
def env_int(name: str, fallback: int, error: type[Exception] = ...) -> int: ...
@overload
def env_int(name: str, fallback: None = None, error: type[Exception] = ...) -> int | None: ...
def env_int(name: str, fallback: int | None = None, error: type[Exception] = ValueError) -> int | None:
    """An integer environment variable (``fallback`` when unset or empty); ``error`` naming
    it if it is not an integer."""
    value = parse_int(name, env_default(name), error)
    return fallback if value is None else value


def parse_int(name: str, value: str | None, error: type[Exception] = ValueError) -> int | None:
    """``value`` as an integer (None stays None); ``error`` naming ``name`` otherwise."""
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise error(f"{name} must be an integer, got {value!r}") from None


def _number(name: str, value: str | None, error: type[Exception]) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise error(f"{name} must be a number, got {value!r}") from None


def parse_positive(name: str, value: str | None, error: type[Exception] = ValueError) -> float:
    """``value`` as a number > 0; ``error`` naming ``name`` otherwise."""
    v = _number(name, value, error)
    if not 0 < v < math.inf:
        raise error(f"{name} must be > 0, got {value!r}")
    return v


def parse_seconds(name: str, value: str | None, error: type[Exception] = ValueError) -> float:
    """``value`` as seconds >= 0 (0: off); ``error`` naming ``name`` otherwise."""
    v = _number(name, value, error)
    if not 0 <= v < math.inf:
        raise error(f"{name} must be >= 0, got {value!r}")
    return v
