"""Environment variables as flag defaults: the one rule every package's command line follows.

``env_default(name, fallback)``: the variable's value if set and non-empty, else ``fallback``.
``env_int(name, fallback, error)``: the same as an integer; a value that is not one raises
``error`` (the caller's usage-error class, so its runner exits 2) naming the variable.
"""
from __future__ import annotations

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
    value = env_default(name)
    if value is None:
        return fallback
    try:
        return int(value)
    except ValueError:
        raise error(f"{name} must be an integer, got {value!r}") from None
