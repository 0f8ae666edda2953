"""elastic.driver.barrier: the registration barrier's deadline arms for any number of missing
workers and loses only the silent and the idle."""
from __future__ import annotations

import pytest

from elastic.driver.barrier import CPU_SHARE, IO_BYTES, Sample, Verdict, arms, judge, progressed


@pytest.mark.parametrize(("checked_in", "size", "armed"), [
    (0, 3, False),  # nobody has begun the reset yet
    (1, 3, True),  # two missing: a 2-slot pod whose ranks both hung (the fork waited for ever)
    (2, 3, True),  # one missing
    (3, 3, False),  # the world is whole
    (1, 8, True),
])
def test_the_deadline_arms_once_anyone_checked_in_and_anyone_is_missing(checked_in, size, armed):
    assert arms(checked_in, size) is armed


def test_a_main_thread_that_computes_or_does_io_or_began_a_reset_progressed():
    before = Sample(10.0, cpu=1.0, io=1000, resets=2)
    assert progressed(before, Sample(20.0, cpu=1.0 + CPU_SHARE * 10, io=1000, resets=2))
    assert progressed(before, Sample(20.0, cpu=1.0, io=1000 + IO_BYTES, resets=2))
    assert progressed(before, Sample(20.0, cpu=1.0, io=1000, resets=3))
    assert not progressed(before, Sample(20.0, cpu=1.0 + CPU_SHARE * 9, io=1000 + IO_BYTES - 1, resets=2))


def test_what_cannot_be_read_proves_no_progress():
    before = Sample(0.0, cpu=None, io=None, resets=None)
    assert not progressed(before, Sample(15.0, cpu=50.0, io=1 << 30, resets=9))
    assert not progressed(Sample(0.0, 1.0, 0), Sample(15.0, None, None))


def test_the_deadline_loses_the_silent_and_the_idle_and_keeps_the_busy_with_a_new_baseline():
    baseline = {"busy": Sample(0.0, 5.0, 0), "idle": Sample(0.0, 5.0, 0), "silent": Sample(0.0, 5.0, 0),
                "late": None}
    now = {"busy": Sample(15.0, 9.0, 0), "idle": Sample(15.0, 5.01, 10), "silent": None,
           "late": Sample(15.0, 0.1, 0), "unsampled": Sample(15.0, 0.0, 0)}
    verdict = judge(baseline, now)
    assert verdict == Verdict(kept={"busy": now["busy"], "late": now["late"], "unsampled": now["unsampled"]},
                              silent=("silent",), idle=("idle",))


def test_a_busy_worker_judged_again_against_its_last_sample_is_lost_once_it_stops():
    first = judge({"w": Sample(0.0, 0.0, 0)}, {"w": Sample(15.0, 10.0, 0)})
    assert list(first.kept) == ["w"]
    second = judge(first.kept, {"w": Sample(30.0, 10.2, 0)})
    assert second.idle == ("w",) and not second.kept


def test_the_drivers_tuples_read_as_samples():
    assert Sample.of(None) is None
    assert Sample.of((1.0, 2.0, 3, 4)) == Sample(1.0, 2.0, 3, 4)
    assert Sample.of((1.0, 2.0, 3)) == Sample(1.0, 2.0, 3, None)
