"""A slot whose process ended gets a new process when the world is formed again, even when the
driver's last assignment still names it.

Found by scripts/benchmarks/bench-parity on CI, reproduced with real horovodrun on the local cluster: a
world of three at --min-np 2 (rank 0, rank 1, and a joiner just taken in as rank 2); rank 1
was killed while the world formed and the joiner's first ``hvd.init`` failed with it (the
joiner exited 1). The barrier's action blacklisted both hosts, and the driver waited for two
slots with the last assignment (all three) still in place. When the joiner's host came back
from its blacklist cooldown, the world (rank 0's host, the joiner's host) formed without a
process on the joiner's host: its slot counted as filled because the last assignment named
it. Rank 0 waited for rank 1 for good, and the job stalled.

A real driver with its rendezvous and fake workers (tests/runtime/test_patch_units.py's
harness), a blacklist cooldown of 1 s.
"""
from __future__ import annotations

import threading
from typing import Any

from tests.runtime.test_patch_units import END_DEADLINE, Job, Key
from tests.waiting import wait_for


class _FailingJob(Job):
    """``Job`` whose worker at a key exits with 1 once ``fail[key]`` is set (as a process whose
    ``hvd.init`` failed), and which counts the processes started at each key (``starts``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fail: dict[Key, threading.Event] = {}
        self.starts: dict[Key, int] = {}

    def _run_worker(self, slot_info: Any, events: list[threading.Event]) -> tuple[int, float]:
        key = (slot_info.hostname, slot_info.local_rank)
        with self._lock:
            self.starts[key] = self.starts.get(key, 0) + 1
            fail = self.fail[key] = threading.Event()  # each process its own: a new one runs on
        shutdown, host, kill = events
        # the worker loop returns (1, now) once any of these is set: the test's failure counts
        # as the driver's kill event would, but the driver never sets it
        return super()._run_worker(slot_info, [shutdown, host, _Either(kill, fail)])


class _Either:
    """An event that is set when either of two is (what the worker loop polls)."""

    def __init__(self, a: threading.Event, b: threading.Event) -> None:
        self._a, self._b = a, b

    def is_set(self) -> bool:
        return self._a.is_set() or self._b.is_set()


def test_a_host_back_from_its_cooldown_gets_a_new_process_for_its_ended_one():
    """0107: a world of three (host-1, host-2, host-3; --min-np 2, blacklist cooldown 1 s).
    host-1[0] checks in for a reset; host-2[0] and host-3[0] exit with 1 (their failures
    complete the barrier: both hosts are blacklisted, one slot is left, the driver waits for
    two). Once host-2's or host-3's cooldown ends, the next world forms with it, and a new
    process starts there. Before: the host's slot counted as filled (the last assignment
    named it), no process started, and the world waited for its rank for good."""
    job = _FailingJob({'host-1': 1, 'host-2': 1, 'host-3': 1}, min_np=2, max_np=3, cooldown_range=(1, 1))
    try:
        job.start()
        keys = [('host-1', 0), ('host-2', 0), ('host-3', 0)]
        job.wait_ready(*keys)
        registry = job.driver._worker_registry
        world = registry.last_rendezvous()
        # host-1[0] resets and checks in; the two others fail (their processes exit with 1)
        threading.Thread(target=job.driver.record_ready, args=keys[0], daemon=True).start()
        wait_for(lambda: keys[0] in registry._states, END_DEADLINE, 'host-1[0] checked in')
        job.fail[keys[1]].set()
        job.fail[keys[2]].set()
        wait_for(lambda: registry.last_rendezvous() > world, END_DEADLINE,
                 'the barrier complete: the next world formed once a host came back from its cooldown')
        # a new process on a host back from its cooldown: before, none (its slot counted as filled)
        wait_for(lambda: job.starts.get(keys[1], 0) + job.starts.get(keys[2], 0) >= 3, END_DEADLINE,
                 'a new process on a host back from its cooldown',
                 detail=lambda: f'starts: {job.starts}, assignment: {job.driver._host_assignments}')
    finally:
        job.close()
