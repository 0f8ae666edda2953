"""Fixtures shared by the driver-level tests of tests/runtime/ (the one-process harness of
``test_patch_units``)."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture
def jobs() -> Iterator[Callable[..., Any]]:
    """Make ``test_patch_units.Job``s with ``jobs(...)``; each is closed after the test."""
    from tests.runtime.test_patch_units import Job
    made: list[Job] = []

    def make(*args: Any, **kwargs: Any) -> Job:
        job = Job(*args, **kwargs)
        made.append(job)
        return job

    yield make
    for job in made:
        job.close()
