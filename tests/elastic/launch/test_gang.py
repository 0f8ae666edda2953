"""elastic.launch.gang: the first-world deadline behind --first-world-timeout. The end-to-end
case, two jobs on a capped pool, is tests/e2e/test_capped_pool.py."""
import pytest

from elastic.launch.decisions import Stop, Tick
from elastic.launch.events import Record
from elastic.launch.gang import EXIT_NO_CAPACITY, JITTER, FirstWorldPolicy, deadline_for, first_world_formed

RESET = Record(1.0, "reset", {"world_size": 2})
HOSTS = Record(1.0, "hosts", {"hosts": ["a"]})


@pytest.mark.parametrize("kinds, formed", [([], False), (["hosts", "worker_start"], False),
                                           (["hosts", "reset"], True), (["reset"], True)])
def test_a_world_formed_once_the_driver_reset(kinds, formed):
    assert first_world_formed([Record(1.0, k, {}) for k in kinds]) is formed


def test_the_deadline_is_stretched_by_at_most_the_jitter():
    assert deadline_for(100, 0.0) == 100
    assert deadline_for(100, 0.5) == pytest.approx(100 * (1 + JITTER / 2))
    assert deadline_for(100, 0.999) < 100 * (1 + JITTER)
    assert deadline_for(100, 7) == 100 * (1 + JITTER) and deadline_for(100, -1) == 100  # clamped


def at(monotonic: float) -> Tick:
    return Tick(wall=1e9 + monotonic, monotonic=monotonic)


def test_it_stops_the_job_once_at_the_deadline_when_no_world_formed():
    policy = FirstWorldPolicy(30, min_slots=4, started=0.0)
    assert policy.step([HOSTS], at(29.9)) == [] and not policy.done
    [stop] = policy.step([], at(30))
    assert stop == Stop(stop.reason, EXIT_NO_CAPACITY) and policy.done
    assert stop.reason.startswith("no world of --min-np 4 slots formed within 30 s (--first-world-timeout)")
    assert policy.step([], at(90)) == []  # once


def test_a_world_before_the_deadline_settles_it_for_good():
    policy = FirstWorldPolicy(30, min_slots=2, started=100.0)
    assert policy.step([], at(110)) == [] and not policy.done
    assert policy.step([HOSTS, RESET], at(111)) == [] and policy.formed and policy.done
    assert policy.step([], at(1000)) == []


def test_with_a_judge_the_deadline_exits_as_it_says():
    from elastic.launch.gang import EXIT_WORKERS_FAILING
    from elastic.launch.shortfall import Verdict

    failing = FirstWorldPolicy(30, 2, 0.0, judge=lambda now: Verdict(EXIT_WORKERS_FAILING, "w-1: failing (X)"))
    [stop] = failing.step([], at(30))
    assert stop.exit_code == EXIT_WORKERS_FAILING and failing.done
    assert stop.reason == ("no world of --min-np 2 slots formed within 30 s (--first-world-timeout): "
                           "w-1: failing (X): exiting 69 (workers failing): a retry would meet the same failure")
    capacity = FirstWorldPolicy(30, 2, 0.0, judge=lambda now: Verdict(EXIT_NO_CAPACITY, "w-1: not scheduled"))
    [stop] = capacity.step([], at(31))
    assert stop.exit_code == EXIT_NO_CAPACITY and ": w-1: not scheduled: exiting 75 (no capacity)" in stop.reason


def test_while_the_judge_sees_a_world_forming_the_deadline_waits_and_asks_again():
    from elastic.launch.shortfall import Verdict

    answers = [Verdict(None, "forming"), Verdict(None, "forming"), Verdict(EXIT_NO_CAPACITY, "gone")]
    asked: list[float] = []
    policy = FirstWorldPolicy(30, 2, 0.0, judge=lambda now: asked.append(now) or answers[len(asked) - 1])
    assert policy.step([], at(29)) == [] and asked == []       # not asked before the deadline
    assert policy.step([], at(30)) == [] and not policy.done
    assert policy.step([], at(31)) == [] and not policy.done
    assert policy.step([RESET], at(32)) == [] and policy.formed  # the world formed meanwhile
    assert asked == [1e9 + 30, 1e9 + 31]                        # asked with the wall clock
