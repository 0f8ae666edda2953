"""What a test needs of the machine, said once: ``missing(reason)`` skips the test on a
developer's machine that lacks it, and fails it in CI (``CI`` set, as every CI sets it), where
the whole suite must run: a check CI never ran is not reported as passing."""
from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    """Whether this run is CI's (``CI`` set to anything but empty, 0 or false)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def missing(reason: str) -> NoReturn:
    """The machine lacks what the calling test needs (``reason`` names it): fail in CI, skip
    elsewhere."""
    if in_ci():
        pytest.fail(f"CI runs every test, and this one cannot run here: {reason}", pytrace=False)
    pytest.skip(reason)
