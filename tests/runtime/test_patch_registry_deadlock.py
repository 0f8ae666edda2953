"""The registration barrier (Horovod's ``WorkerStateRegistry``) never deadlocks the driver when a
worker's failure is recorded while the barrier's action forms the next world.

The action (``ElasticDriver.resume``: the next world's assignments, the registry's ``reset``)
runs inside ``threading.Barrier.wait``, holding the barrier's own lock, and ``reset`` takes the
registry's lock. A failure recorded for a worker that had already checked in (its process
exited, or the driver lost it, while it waited at the barrier) reset the barrier while holding
the registry's lock: the opposite order. When the two met, each waited for the other for good,
with the driver's ``_wait_hosts_cond`` held by the action: no discovery call, no event, no new
world, and every worker of the next world waiting in its reset.

A real driver with its rendezvous and fake workers (tests/runtime/test_patch_units.py's
harness). The interleaving is forced, not waited for: the registry's ``_action_event`` holds
the failing thread just after its check, and the test holds ``_wait_hosts_cond`` until that
thread has the registry's lock.
"""
from __future__ import annotations

import threading
from typing import Any

from horovod.runner.elastic.registration import FAILURE

from tests.runtime.test_patch_units import END_DEADLINE, START_DEADLINE
from tests.waiting import wait_for


class _HeldAfterCheck:
    """The registry's ``_action_event``: the thread named ``held`` is stopped on ``gate`` once
    its wait for the action has returned (it has passed the check, not yet taken the lock)."""

    def __init__(self, event: threading.Event) -> None:
        self._event = event
        self.gate = threading.Event()
        self.passed = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        done = self._event.wait(timeout)
        if threading.current_thread().name == 'held':
            self.passed.set()
            self.gate.wait(END_DEADLINE)
        return done

    def __getattr__(self, name: str) -> Any:
        return getattr(self._event, name)


def test_a_failure_recorded_while_the_barrier_action_runs_does_not_deadlock_the_driver(jobs):
    """0108: a world of two (host-1[0], host-2[0]; --min-np 1) resets: host-1[0] checks in and
    waits at the barrier, then fails (its failure is recorded, as for a process that exits or a
    worker the driver loses); host-2[0] checks in last, so the barrier's action forms the next
    world while the failure is being recorded. The action ends, the next world forms (the
    registry's rendezvous advances) and the driver's condition is free again. Before: the
    action and the failing thread each held the lock the other waited for, and the driver
    stopped for good."""
    job = jobs({'host-1': 1, 'host-2': 1}, min_np=1, max_np=2)
    job.start()
    keys = [('host-1', 0), ('host-2', 0)]
    job.wait_ready(*keys)
    driver, registry = job.driver, job.driver._worker_registry
    world = registry.last_rendezvous()
    held = _HeldAfterCheck(registry._action_event)
    registry._action_event = held

    outcome: dict[str, Any] = {}

    def record(name: str, call: Any, *args: Any) -> threading.Thread:
        def run() -> None:
            try:
                outcome[name] = call(*args)
            except BaseException as e:  # noqa: BLE001 - the outcome is what the test reads
                outcome[name] = e
        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        return thread

    # host-1[0] resets and waits at the barrier (one of two)
    record('ready-0', driver.record_ready, *keys[0])
    wait_for(lambda: keys[0] in registry._states, START_DEADLINE, 'host-1[0] checked in')
    # its failure: past the action check, held before the registry's lock
    record('held', registry.record_failure, *keys[0])
    wait_for(held.passed.is_set, START_DEADLINE, 'the failure past its check for a running action')
    cond_held = driver._wait_hosts_cond.acquire(timeout=END_DEADLINE)
    assert cond_held, 'the driver\'s _wait_hosts_cond was not free'
    try:
        # host-1[1] checks in last: the barrier's action starts (and waits for the condition)
        record('ready-1', driver.record_ready, *keys[1])
        wait_for(lambda: not registry._action_event.is_set(), START_DEADLINE, 'the barrier action started')
        held.gate.set()  # the failure goes on: it records itself and resets the barrier
        # before: it resets the barrier holding the registry's lock; now: without it
        wait_for(lambda: registry._lock.locked() or registry._states.get(keys[0]) == FAILURE, START_DEADLINE,
                 'the failure recorded, or the failing thread holding the registry lock')
    finally:
        driver._wait_hosts_cond.release()
    # the action formed the next world, and the driver's condition is free again
    wait_for(lambda: registry.last_rendezvous() > world, END_DEADLINE,
             'the next world formed (before: the action and the failure deadlocked)')
    wait_for(lambda: registry._action_event.is_set(), END_DEADLINE, 'the barrier action ended')
    cond_free = driver._wait_hosts_cond.acquire(timeout=END_DEADLINE)
    assert cond_free, 'the driver\'s _wait_hosts_cond stayed held'
    driver._wait_hosts_cond.release()
