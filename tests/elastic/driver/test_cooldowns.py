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
    t, untils, counts = 0.0, [], []
    assert c.in_a_row("p") == 0
    for _ in range(4):
        until = c.keep_out("p", "silent", t)
        untils.append(until - t)
        counts.append(c.in_a_row("p"))
        c.due(until, ["p"], [])
        t = until
    assert untils == [10.0, 20.0, 35.0, 35.0]
    assert counts == [1, 2, 3, 4]
    assert c.keep_out("p", "silent", t + 36.0) - (t + 36.0) == 10.0
    assert c.in_a_row("p") == 1


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


def test_refusals_keep_the_forks_dict_interface_and_end():
    from elastic.driver.elastic_driver import Refusals
    now = [0.0]
    ended: list[tuple[str, float]] = []
    refused = Refusals(Cooldowns(base=3.0), lambda host, after: ended.append((host, after)), clock=lambda: now[0])
    assert not refused and "p" not in refused
    refused["p"] = "its joiner failed at start"
    assert "p" in refused and refused["p"] == "its joiner failed at start" and list(refused) == ["p"]
    now[0] = 2.9
    assert "p" in refused
    now[0] = 3.0
    assert "p" not in refused and not refused and ended == [("p", 3.0)]
    refused["p"] = "again"  # the second in a row: twice as long
    now[0] = 8.9
    assert "p" in refused
    del refused["p"]  # it left discovery
    assert "p" not in refused and len(refused) == 0
