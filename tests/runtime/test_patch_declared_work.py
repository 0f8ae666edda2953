"""Horovod's ``declared_work`` (patch 0108): the work a thread does for the main thread counts
as the main thread's progress, which the driver's barrier deadline judges."""
from __future__ import annotations

import threading
import time

import pytest

from tests.waiting import wait_for

pytestmark = [pytest.mark.horovod]


def _compute(seconds: float) -> None:
    """Use the CPU for about ``seconds`` of this thread's own CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        sum(i * i for i in range(1000))


def _in_thread(fn) -> None:
    thread = threading.Thread(target=fn)
    thread.start()
    thread.join(60)
    assert not thread.is_alive()


def test_declared_work_counts_as_the_main_threads_and_stays_counted():
    """0108 (declared work): a thread's CPU inside ``declared_work`` counts in
    ``main_thread_progress`` while it runs and after it ended; the same work undeclared
    does not (the main thread waited idle)."""
    from horovod.runner.elastic.worker import declared_work, main_thread_progress

    cpu0, _ = main_thread_progress()
    _in_thread(lambda: _compute(0.3))
    cpu1, _ = main_thread_progress()
    assert cpu1 - cpu0 < 0.2, "undeclared work counted"

    inside: list[float] = []
    go_on = threading.Event()

    def declared() -> None:
        with declared_work():
            _compute(0.3)
            inside.append(main_thread_progress()[0])
            go_on.wait(30)
    thread = threading.Thread(target=declared)
    thread.start()
    try:
        wait_for(lambda: inside, 60, "the declared thread to report")
        assert inside[0] - cpu1 >= 0.25, (cpu1, inside)
    finally:
        go_on.set()
        thread.join(60)
    cpu2, _ = main_thread_progress()
    assert cpu2 >= inside[0], "the measure went back once the block ended"


def test_nested_blocks_count_once():
    from horovod.runner.elastic.worker import declared_work, main_thread_progress

    before, _ = main_thread_progress()

    def nested() -> None:
        with declared_work():
            with declared_work():
                _compute(0.3)
    _in_thread(nested)
    after, _ = main_thread_progress()
    assert 0.25 <= after - before < 0.5, (before, after)
