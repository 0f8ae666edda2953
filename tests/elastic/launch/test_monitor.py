"""elastic.launch.monitor: the launcher reads the driver's events once, in one place, and every
policy decides from the same records; the first Stop ends the rounds, and its exit code is the
one the runner returns (the real-process checks are test_bad_input_exit.py,
test_stall_watchdog.py and tests/e2e/test_capped_pool.py)."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from elastic.launch.badinput import BadInputPolicy
from elastic.launch.decisions import Decision, Note, Stop, Tick
from elastic.launch.gang import EXIT_NO_CAPACITY, FirstWorldPolicy
from elastic.launch.monitor import Monitor
from elastic.launch.stall import StallPolicy
from shared.exitcodes import EXIT_USAGE


def append(path: Path, *records: tuple[float, str, dict]) -> None:
    with path.open("a") as f:
        for when, kind, detail in records:
            f.write(json.dumps({"time": when, "kind": kind, "detail": detail}) + "\n")


class Recording:
    """A policy that keeps every batch of records it was given, and decides nothing."""

    def __init__(self, done_after: int | None = None) -> None:
        self.batches: list[list[str]] = []
        self._done_after = done_after

    @property
    def done(self) -> bool:
        return self._done_after is not None and len(self.batches) >= self._done_after

    def step(self, records, tick) -> list[Decision]:
        self.batches.append([str(r.kind) for r in records])
        return []


def test_every_policy_gets_the_same_new_records_and_a_done_one_is_no_longer_asked(tmp_path):
    path = tmp_path / "events.jsonl"
    append(path, (1.0, "reset", {"world_size": 2}))
    once, always = Recording(done_after=1), Recording()
    monitor = Monitor(str(path), [once, always], lambda d: None, clock=lambda: Tick(2.0, 2.0))
    monitor.check()
    append(path, (3.0, "worker_start", {"host": "h", "slot": 0}))
    monitor.check()
    assert once.batches == [["reset"]]
    assert always.batches == [["reset"], ["worker_start"]]


def test_bad_input_stops_the_job_with_exit_2_and_the_rounds_end(tmp_path):
    path = tmp_path / "events.jsonl"
    acted: list[Decision] = []
    stall = StallPolicy(1.0, started=0.0)  # would stop too: the first stop wins
    monitor = Monitor(str(path), [BadInputPolicy(), stall, Recording()], acted.append,
                      clock=lambda: Tick(100.0, 100.0))
    append(path, (1.0, "reset", {"world_size": 2}),
           (2.0, "worker_start", {"host": "a", "slot": 0, "rank": 0}),
           (3.0, "worker_exit", {"host": "a", "slot": 0, "exit_code": 2}),
           (3.0, "worker_exit", {"host": "b", "slot": 0, "exit_code": 2}))
    monitor.check()
    assert [type(d) for d in acted] == [Stop]
    assert acted[0].exit_code == EXIT_USAGE and monitor.stopped == acted[0] and monitor.finished
    assert acted[0].reason.startswith("all 2 ranks of the first world exited 2 (bad input)")
    monitor.check()
    assert len(acted) == 1


def test_notes_do_not_end_the_rounds(tmp_path):
    path = tmp_path / "events.jsonl"
    path.touch()

    class Says:
        done = False

        def step(self, records, tick):
            return [Note("hello")]

    acted: list[Decision] = []
    monitor = Monitor(str(path), [Says()], acted.append, clock=lambda: Tick(0.0, 0.0))
    monitor.check()
    monitor.check()
    assert acted == [Note("hello"), Note("hello")] and monitor.stopped is None and not monitor.finished


def test_its_thread_stops_the_job_on_its_own_and_ends(tmp_path):
    path = tmp_path / "events.jsonl"
    path.touch()
    decided = threading.Event()
    acted: list[Decision] = []

    def act(decision: Decision) -> None:
        acted.append(decision)
        decided.set()

    monitor = Monitor(str(path), [FirstWorldPolicy(0.2, 2, started=time.monotonic())], act, interval=0.05)
    monitor.start()
    try:
        assert decided.wait(30)
        assert [d.exit_code for d in acted if isinstance(d, Stop)] == [EXIT_NO_CAPACITY]
    finally:
        assert monitor.stop()
