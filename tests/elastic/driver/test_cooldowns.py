"""elastic.driver.cooldowns: quarantines and refusals end; the cooldown doubles in a row."""
from __future__ import annotations

from elastic.driver.cooldowns import Cooldowns, Release


def test_a_host_kept_out_serves_again_after_its_cooldown():
    c = Cooldowns(base=10.0, longest=100.0)
    assert c.keep_out("p", "a joiner there failed", 0.0) == 10.0
    assert c.due(9.9, listed=["p"], running=[]) == []
    assert c.due(10.0, listed=["p"], running=[]) == [Release("p", after=10.0)]
    assert not c.is_out("p")


def test_the_cooldown_doubles_in_a_row_up_to_the_longest_and_starts_again_after_it():
    c = Cooldowns(base=10.0, longest=35.0)
    t, untils = 0.0, []
    for _ in range(4):
        until = c.keep_out("p", "silent", t)
        untils.append(until - t)
        c.due(until, ["p"], [])
        t = until
    assert untils == [10.0, 20.0, 35.0, 35.0]
    assert c.keep_out("p", "silent", t + 36.0) - (t + 36.0) == 10.0


def test_a_host_where_a_given_up_worker_still_runs_waits_for_its_exit():
    c = Cooldowns(base=1.0)
    c.keep_out("p", "silent", 0.0)
    assert c.due(5.0, listed=["p"], running=["p"]) == []
    assert [r.host for r in c.due(5.0, listed=["p"], running=[])] == ["p"]


def test_a_host_that_left_discovery_is_forgotten():
    c = Cooldowns(base=100.0)
    c.keep_out("p", "silent", 0.0)
    assert c.due(1.0, listed=[], running=[]) == []
    assert not c.is_out("p")


def test_a_second_reason_keeps_the_longer_cooldown_and_the_first_start():
    c = Cooldowns(base=10.0)
    c.keep_out("p", "silent", 0.0)
    c.keep_out("p", "a joiner there failed", 1.0)
    assert c.until("p") == 11.0 and c.why("p") == "a joiner there failed"
    assert c.due(11.0, ["p"], []) == [Release("p", after=11.0)]
