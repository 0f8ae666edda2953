"""elastic.launch.gang: the first-world deadline behind --first-world-timeout (issue 32, item
9). The end-to-end case, two jobs on a capped pool, is tests/e2e/test_capped_pool.py."""
import json
import threading

import pytest

from elastic.launch.events import Record
from elastic.launch.gang import JITTER, FirstWorldDeadline, deadline_for, first_world_formed

RESET = {"time": 1.0, "kind": "reset", "detail": {"world_size": 2}}
HOSTS = {"time": 1.0, "kind": "hosts", "detail": {"hosts": ["a"]}}


@pytest.mark.parametrize("kinds, formed", [([], False), (["hosts", "worker_start"], False),
                                           (["hosts", "reset"], True), (["reset"], True)])
def test_a_world_formed_once_the_driver_reset(kinds, formed):
    assert first_world_formed([Record(1.0, k, {}) for k in kinds]) is formed


def test_the_deadline_is_stretched_by_at_most_the_jitter():
    assert deadline_for(100, 0.0) == 100
    assert deadline_for(100, 0.5) == pytest.approx(100 * (1 + JITTER / 2))
    assert deadline_for(100, 0.999) < 100 * (1 + JITTER)
    assert deadline_for(100, 7) == 100 * (1 + JITTER) and deadline_for(100, -1) == 100  # clamped


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def write(path, *records):
    with open(path, "a") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")


def test_it_fires_once_at_the_deadline_when_no_world_formed(tmp_path):
    events, clock, fired = tmp_path / "events.jsonl", Clock(), []
    write(events, HOSTS)
    watch = FirstWorldDeadline(str(events), 30, fired.append, clock=clock)
    watch.start()
    try:
        clock.now = 29.9
        assert watch.check() is False and fired == []
        clock.now = 30
        assert watch.check() is True and fired == [30]
        clock.now = 90
        assert watch.check() is True and fired == [30]  # once
    finally:
        assert watch.stop()


def test_a_world_before_the_deadline_settles_it_for_good(tmp_path):
    events, clock, fired = tmp_path / "events.jsonl", Clock(), []
    events.touch()
    watch = FirstWorldDeadline(str(events), 30, fired.append, clock=clock)
    watch.start()
    try:
        clock.now = 10
        assert watch.check() is False
        write(events, HOSTS, RESET)
        assert watch.check() is True and watch.formed
        clock.now = 1000
        assert watch.check() is True and fired == []
    finally:
        assert watch.stop()


def test_its_thread_fires_on_its_own_and_ends(tmp_path):
    events, done = tmp_path / "events.jsonl", threading.Event()
    events.touch()
    watch = FirstWorldDeadline(str(events), 0.2, lambda s: done.set(), interval=0.05)
    watch.start()
    try:
        assert done.wait(30) and watch.fired
    finally:
        assert watch.stop()
