"""The project's driver (elastic.driver.elastic_driver.ElasticDriver) in this process, with
fake workers: the harness of tests/runtime/test_patch_units.py (a real RendezvousServer,
FixedHosts discovery, each worker a thread running a real WorkerNotificationManager; a worker
is frozen by stopping its notification service). The same scenarios with the fork's driver
are in tests/runtime/test_patch_detector_units.py."""
from __future__ import annotations

import threading
import time

import pytest

from elastic.driver.elastic_driver import ElasticDriver
from tests.runtime.test_patch_detector_units import LIVENESS, _answered_since, _kinds, _running, freeze, thaw
from tests.runtime.test_patch_units import END_DEADLINE, START_DEADLINE, Key
from tests.waiting import wait_for

pytestmark = [pytest.mark.horovod]


@pytest.fixture
def our_jobs():
    """Make harness Jobs running the project's driver; each is closed after the test."""
    from tests.runtime.test_patch_units import Job
    made: list[Job] = []

    def make(*args, **kwargs):
        job = Job(*args, driver_class=ElasticDriver, **kwargs)
        made.append(job)
        return job
    yield make
    for job in made:
        job.close()


def _lost(events) -> list[Key]:
    return sorted((r["detail"]["host"], r["detail"]["slot"]) for r in _kinds(events, "worker_lost"))


def test_a_silent_majority_is_lost_while_the_rest_answers(our_jobs, monkeypatch, tmp_path):
    """5 workers, 3 of them (one 3-slot host) freeze: they are lost (within the detector's
    bound: the simulation checks it) and the other two (--min-np) go on answering; no
    re-baseline for their silence. The fork's driver: 3 of 5 silent, it
    suspected itself and re-baselined every timeout, losing nobody."""
    job, events, keys = _running(our_jobs, monkeypatch, tmp_path, {"host-a": 2, "host-b": 3})
    frozen = [k for k in keys if k[0] == "host-b"]
    for key in frozen:
        freeze(job, key)
    wait_for(lambda: len(_kinds(events, "worker_lost")) >= 3, START_DEADLINE, "the three frozen workers lost")
    lost_at = time.monotonic()
    healthy = [k for k in keys if k[0] == "host-a"]
    wait_for(lambda: _answered_since(job, healthy, lost_at + LIVENESS) or len(_kinds(events, "worker_lost")) > 3,
             END_DEADLINE + 2 * LIVENESS, "the healthy workers to answer past a timeout after the loss")
    assert _lost(events) == sorted(frozen)
    # no doubt of itself over the silent workers; a re-baseline for the driver's own lag
    # (no silent count: its loop came late, as under a CPU hog) is the lag rule, not this one
    doubts = [r for r in _kinds(events, "liveness_rebaseline") if r["detail"]["silent"]]
    assert not doubts, doubts


def test_a_total_silence_is_forgiven_once(our_jobs, monkeypatch, tmp_path):
    """Every worker of a world of 4 stops answering at once (the driver's own network blipping),
    and answers again within a liveness timeout of the driver's doubt: one re-baseline,
    nobody lost."""
    job, events, keys = _running(our_jobs, monkeypatch, tmp_path, {f"host-{i}": 1 for i in range(4)})
    for key in keys:
        freeze(job, key)
    wait_for(lambda: _kinds(events, "liveness_rebaseline", "worker_lost"), START_DEADLINE,
             "the liveness check to find the world silent")
    for key in keys:
        thaw(job, key)
    thawed = time.monotonic()
    wait_for(lambda: _answered_since(job, keys, thawed) or _kinds(events, "worker_lost"), END_DEADLINE,
             "every worker to answer again")
    assert not _kinds(events, "worker_lost")
    assert len(_kinds(events, "liveness_rebaseline")) == 1


def test_a_healthy_worker_that_missed_a_ping_is_kept_beside_twelve_frozen(our_jobs, monkeypatch, tmp_path):
    """A world of 20: 12 freeze for good, and one more misses pings for 1.5 s (a pause) at the
    same moment. The 12 are lost; the paused one, answering again, is kept. The fork's driver
    sent the suspects' pings on 4 threads, each held 1 s by a frozen worker: the paused
    worker's next ping waited, its timeout ran out and it was lost with them."""
    job, events, keys = _running(our_jobs, monkeypatch, tmp_path, {f"host-{i:02d}": 1 for i in range(20)})
    frozen, paused = keys[:12], keys[12]
    for key in frozen + [paused]:
        freeze(job, key)
    thaw_timer = threading.Timer(1.5, thaw, args=(job, paused))
    thaw_timer.start()
    try:
        wait_for(lambda: len(_kinds(events, "worker_lost")) >= 12, START_DEADLINE, "the 12 frozen workers lost")
        lost_at = time.monotonic()
        wait_for(lambda: _answered_since(job, [paused], lost_at + LIVENESS) or len(_kinds(events, "worker_lost")) > 12,
                 END_DEADLINE + 2 * LIVENESS, "the paused worker to answer past a timeout after the loss")
    finally:
        thaw_timer.cancel()
    assert _lost(events) == sorted(frozen)


def test_a_quarantined_host_serves_again_and_its_next_quarantine_is_longer(our_jobs, monkeypatch, tmp_path):
    """A host whose worker went silent is quarantined for the cooldown (1 s here), then placed
    again (last in the assignment order) once its old worker has ended; quarantined again (the
    harness's workers do not join again: the driver is told directly, as the liveness thread
    tells it), its cooldown is twice as long: ``Cooldowns`` decides, the driver keeps it."""
    job, events, keys = _running(our_jobs, monkeypatch, tmp_path, {"host-1": 1, "host-2": 1, "host-3": 1},
                                 HOROVOD_ELASTIC_QUARANTINE_SECONDS="1")
    freeze(job, ("host-2", 0))
    wait_for(lambda: _kinds(events, "quarantine_ended"), START_DEADLINE, "the quarantine of host-2 to end")
    assert job.ended.get(("host-2", 0)), "released only once its old worker ended"
    order = job.driver._host_manager.current_hosts.host_assignment_order
    assert order[-1] == "host-2", order
    job.driver._quarantine("host-2", "silent again")
    assert not job.driver._host_manager.current_hosts.host_assignment_order.count("host-2")
    quarantines = [r["detail"] for r in _kinds(events, "quarantine")]
    assert [(d["host"], d["cooldown"], d["count"]) for d in quarantines] == [("host-2", 1.0, 1), ("host-2", 2.0, 2)]


def _silent_since(job, key: Key) -> float | None:
    with job.driver._core_lock:
        core = job.driver._core
        return None if core is None else core.silent_since(key)


def _watched(job) -> frozenset:
    with job.driver._core_lock:
        core = job.driver._core
        return frozenset() if core is None else core.watched


def test_a_check_in_at_the_barrier_is_a_sign_of_life(our_jobs, monkeypatch, tmp_path):
    """0111 (the fork's check-in hook): a worker whose pings fail but whose main thread checks
    in at the registration barrier runs; the detector hears of it at the check-in, and its
    silence starts again from there (before, only a ping's answer could end it). Without the
    fork calling ``worker_checked_in`` the silence stays."""
    job, events, keys = _running(our_jobs, monkeypatch, tmp_path, {"host-1": 1, "host-2": 1, "host-3": 1})
    key = ("host-2", 0)
    freeze(job, key)
    wait_for(lambda: _silent_since(job, key) is not None, START_DEADLINE, "host-2's pings to fail")
    # its main thread, in a reset, checks in (and waits at the barrier for the others)
    def check_in() -> None:
        try:
            job.driver.record_ready(*key)
        except (RuntimeError, threading.BrokenBarrierError):
            pass  # the barrier ended under it: the job closed (or lost it, without the hook)

    threading.Thread(target=check_in, daemon=True).start()
    # watched still (a lost worker is forgotten, which ends its silence too) and silent no more
    # (the fork's leave path reads unanswered_since)
    wait_for(lambda: key in _watched(job) and _silent_since(job, key) is None
             and job.driver._workers[key].unanswered_since is None, LIVENESS,
             "host-2's silence to end at its check-in")
    assert not _kinds(events, "worker_lost")


def test_an_exited_process_slot_is_forgotten_at_its_exit(our_jobs, monkeypatch, tmp_path):
    """0111 (the fork's exit hook): when a worker's process exits, the detector forgets its
    slot at once, not at the liveness thread's next round, so a new process started there
    meanwhile does not inherit the old one's failed pings. The rest of the driver is held
    (its workers' lock) while the process exits: only the exit hook can tell the detector.
    Without the fork calling ``worker_exited`` the slot stays watched."""
    job, events, keys = _running(our_jobs, monkeypatch, tmp_path, {"host-1": 1, "host-2": 1, "host-3": 1})
    key = ("host-3", 0)
    wait_for(lambda: key in _watched(job), START_DEADLINE, "the detector to watch host-3")
    worker = job.driver._workers[key]
    with job.driver._workers_lock:
        worker.kill.set()  # its process (the harness's thread) exits
        wait_for(lambda: key not in _watched(job), END_DEADLINE, "the detector to forget host-3's slot")
    wait_for(lambda: job.ended.get(key) == "kill", END_DEADLINE, "host-3's process to end")


STUCK_AFTER_STOP = """
import sys, threading
from elastic.driver import elastic_driver
from tests.runtime.test_patch_units import Job
elastic_driver.ElasticDriver.exit_after_stop = 1.0  # as install() arms it, shorter
job = Job({"host-a": 1}, min_np=1, max_np=1, driver_class=elastic_driver.ElasticDriver)
threading.Thread(target=threading.Event().wait, name="stuck-thread").start()  # never ends
job.driver.stop(sys.argv[1] or None)
print("stopped", flush=True)
"""


@pytest.mark.parametrize("error, code", [("a worker failed", 1), ("", 0)])
def test_a_process_stuck_after_its_drivers_stop_exits_within_the_bound(error, code):
    """A thread that never ends would keep horovodrun alive after its driver stopped: the
    process ends STOP_EXIT_AFTER later (1 s here) with one line naming what still waits, exit
    1 after a failure, else 0."""
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[3]
    proc = subprocess.run([sys.executable, "-c", STUCK_AFTER_STOP, error], cwd=root, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "stopped" in proc.stdout
    line = [x for x in proc.stderr.splitlines() if x.startswith("elastic driver:")]
    assert line and "1 s after its driver stopped" in line[0] and "stuck-thread" in line[0], proc.stderr


def test_an_embedded_driver_never_ends_its_process(our_jobs):
    """Only horovodrun's driver (armed by install()) ends the process after its stop: one
    embedded elsewhere, as in these tests, leaves its process alone."""
    assert ElasticDriver.exit_after_stop is None
    job = our_jobs({"host-a": 1}, min_np=1, max_np=1)
    job.driver.stop()
    assert not [t for t in threading.enumerate() if t.name == "exit-after-stop"]
