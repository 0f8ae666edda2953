"""The stall watchdog: progress is any rank committing or the job (re)starting workers; when
none came for the timeout it fires once with what each rank and host was last seen doing."""
import pytest

from elastic.launch.decisions import Stop, Tick
from elastic.launch.events import Record
from elastic.launch.stall import STALLED_EXIT, Activity, StallPolicy

T0 = 1000.0
RUNNING = [
    Record(T0 + 1, "hosts", {"hosts": ["10.0.0.1:1", "10.0.0.2:1"], "update": "added"}),
    Record(T0 + 1, "reset", {"world_size": 2}),
    Record(T0 + 2, "worker_start", {"host": "10.0.0.1", "slot": 0, "rank": 0}),
    Record(T0 + 2, "worker_start", {"host": "10.0.0.2", "slot": 0, "rank": 1}),
    Record(T0 + 9, "worker_ready", {"host": "10.0.0.2", "slot": 0}),
    Record(T0 + 10, "progress", {"host": "10.0.0.1", "slot": 0, "commits": 7}),
]


def test_progress_resets_the_clock_host_changes_do_not():
    a = Activity(T0)
    a.observe(RUNNING)
    assert not a.stalled(T0 + 69, 60)
    assert a.stalled(T0 + 71, 60)
    a.observe([Record(T0 + 80, "hosts", {"hosts": [], "update": "removed"})])
    assert a.stalled(T0 + 81, 60)
    a.observe([Record(T0 + 80, "progress", {"host": "10.0.0.2", "slot": 0, "commits": 1})])
    assert not a.stalled(T0 + 81, 60)


def test_a_job_with_no_worker_running_is_waiting_not_stalled():
    """Hosts still being prepared (no worker started yet: a large dataset synced) or every
    worker gone while the driver waits for hosts: never a stall, however long; the clock
    starts again with the next worker."""
    a = Activity(T0)
    a.observe(RUNNING[:2])  # hosts discovered, a reset, no worker started yet
    assert not a.stalled(T0 + 3600, 60)
    a.observe(RUNNING[2:])
    assert a.stalled(T0 + 71, 60)
    a.observe([Record(T0 + 72, "worker_exit", {"host": "10.0.0.1", "slot": 0, "exit_code": 1}),
               Record(T0 + 72, "worker_exit", {"host": "10.0.0.2", "slot": 0, "exit_code": 1})])
    assert not a.stalled(T0 + 3600, 60)
    a.observe([Record(T0 + 3700, "worker_start", {"host": "10.0.0.3", "slot": 0, "rank": 0})])
    assert not a.stalled(T0 + 3759, 60) and a.stalled(T0 + 3761, 60)


def test_a_joiner_waiting_beside_a_hung_world_is_not_progress_and_is_named():
    """Every member hung (their pings answered, nobody checks in) while a joiner waits to be
    taken in: the reset the joiner asked for never begins, so the barrier's deadline never arms
    and only this watchdog ends the job. The joiner's start, its wait at the rendezvous and a
    sibling joiner started again after its pod's cooldown do not hold the clock back."""
    a = Activity(T0)
    a.observe(RUNNING)  # the members' last commit at T0 + 10
    a.observe([Record(T0 + 20, "worker_start", {"host": "10.0.0.3", "slot": 0, "rank": None, "joiner": True}),
               Record(T0 + 25, "joiner_ready", {"host": "10.0.0.3", "slot": 0, "startup": 5.0}),
               Record(T0 + 25, "notify", {}),
               Record(T0 + 30, "worker_start", {"host": "10.0.0.4", "slot": 0, "rank": None, "joiner": True}),
               Record(T0 + 33, "joiner_dropped", {"host": "10.0.0.4", "slot": 0, "reason": "it exited with 1"}),
               Record(T0 + 60, "worker_start", {"host": "10.0.0.4", "slot": 0, "rank": None, "joiner": True})])
    assert a.stalled(T0 + 71, 60)
    text = a.report(T0 + 100)
    assert "no rank made progress for 90s" in text
    assert "worker 10.0.0.3[0]: waiting to join (at the rendezvous, not yet taken into a world), 75s ago" in text
    assert "worker 10.0.0.4[0]: started as a joiner, 40s ago" in text
    assert "driver: told the coordinator of a host change, 75s ago" in text
    # a worker started for a world (a reset's new slot) is progress, as before
    a.observe([Record(T0 + 100, "worker_start", {"host": "10.0.0.5", "slot": 0, "rank": 2, "joiner": False})])
    assert not a.stalled(T0 + 159, 60)


def test_report_names_each_rank_and_host_and_what_it_did_last():
    a = Activity(T0)
    a.observe(RUNNING)
    text = a.report(T0 + 100)
    assert "no rank made progress for 90s" in text
    assert "worker 10.0.0.1[0] (rank 0): committed (commit #7), 90s ago" in text
    assert "worker 10.0.0.2[0] (rank 1): rendezvous (asked for its rank), 91s ago" in text
    assert "driver: hosts changed (added)" not in text and "driver: reset to world size 2, 99s ago" in text
    assert "hosts discovered: 10.0.0.1:1 10.0.0.2:1" in text


def test_the_policy_stops_the_job_once_with_the_report():
    policy = StallPolicy(30, started=T0)
    records = [Record(1001.0, "worker_start", {"host": "h", "slot": 0, "rank": 0}),
               Record(1005.0, "progress", {"host": "h", "slot": 0, "commits": 1})]
    assert policy.step(records, Tick(T0 + 34, 0.0)) == [] and not policy.done
    [stop] = policy.step([], Tick(T0 + 36, 0.0))
    assert stop == Stop(stop.reason, STALLED_EXIT) and policy.done
    assert stop.reason.startswith("the job stalled (--stall-timeout): no rank made progress for 31s")
    assert "worker h[0] (rank 0): committed (commit #1), 31s ago" in stop.reason
    assert policy.step([], Tick(T0 + 99, 0.0)) == []  # once


def test_the_policy_wants_a_positive_timeout():
    with pytest.raises(ValueError, match="stall timeout must be positive"):
        StallPolicy(0, started=T0)
