"""elastic.driver.joins: each rule of the joins' core (docs/driver.md, "Joins' rules")."""
from __future__ import annotations

from elastic.driver.joins import Drop, Joins, Release, Settings, Spawn, Tell, View, admitted, stranded


def joins(**kw: float) -> Joins:
    return Joins(Settings(**{"deadline": 30.0, "sibling_wait": 5.0, "refusal": 10.0, "longest": 80.0, **kw}))


def test_spawn_fills_free_slots_beyond_the_world_within_max_np_but_not_on_refused_or_held_hosts():
    j = joins()
    listed = {"a": 1, "b": 2, "held": 2, "c": 2}
    spawns = j.spawn(listed, members={("a", 0), ("held", 0), ("held", 1)}, discovered={"a", "b", "c"},
                     occupied=[("a", 0), ("held", 0), ("held", 1)], max_np=6, now=0.0)
    # a held host (not discovered) keeps its world's two slots towards --max-np and gets no
    # joiner; c gets one slot only: 1 + 2 + 2 + 1 = 6
    assert spawns == [Spawn(("b", 0)), Spawn(("b", 1)), Spawn(("c", 0))]
    assert j.starting() == [("b", 0), ("b", 1), ("c", 0)]
    j.refusals.keep_out("c", "failed", 0.0)
    assert j.spawn({"c": 2}, set(), {"c"}, [], 6, 1.0) == []


def test_a_ready_joiner_tells_the_world_at_once_when_no_sibling_starts():
    j = joins()
    j.started(("b", 0), 0.0)
    assert j.ready(("b", 0), 2.0) == [Tell((("b", 0),))]


def test_a_ready_joiner_waits_for_starting_siblings_at_most_the_sibling_wait():
    j = joins()
    j.started(("b", 0), 0.0)
    j.started(("b", 1), 0.0)
    assert j.ready(("b", 0), 1.0) == []
    assert j.due() == 6.0
    assert j.tick(5.9, {"b": 2}, set()) == []
    assert j.tick(6.0, {"b": 2}, set()) == [Tell((("b", 0),), alone=True)]
    # the slow one is told of in its own reset once it waits
    assert j.ready(("b", 1), 7.0) == [Tell((("b", 1),))]


def test_siblings_ready_close_together_join_in_one_tell():
    j = joins()
    j.started(("b", 0), 0.0)
    j.started(("b", 1), 0.0)
    assert j.ready(("b", 0), 1.0) == []
    assert j.ready(("b", 1), 2.0) == [Tell((("b", 0), ("b", 1)))]


def test_a_joiner_past_its_deadline_is_dropped_and_its_host_refused():
    j = joins()
    j.started(("b", 0), 0.0)
    assert j.due() == 30.0
    (drop,) = j.tick(30.0, {"b": 1}, set())
    assert drop == Drop(("b", 0), "not waiting at the rendezvous 30 s after its start", refuse=True, until=40.0)
    assert j.refusals.is_out("b")


def test_a_failed_joiner_refuses_its_host_for_a_cooldown_that_doubles_then_it_gets_joiners_again():
    j = joins()
    t, cooldowns = 0.0, []
    for _ in range(3):
        (spawn,) = j.spawn({"b": 1}, set(), {"b"}, [], 4, t)
        (drop,) = j.ended(spawn.key, "exit 3", t + 1.0, ["b"])
        assert drop.refuse
        assert j.spawn({"b": 1}, set(), {"b"}, [], 4, t + 1.0) == []  # refused meanwhile
        cooldowns.append(drop.until - (t + 1.0))
        assert j.tick(drop.until - 0.1, {"b": 1}, set()) == []
        assert j.tick(drop.until, {"b": 1}, set()) == [Release("b", drop.until - (t + 1.0))]
        t = drop.until
    assert cooldowns == [10.0, 20.0, 40.0]


def test_a_ready_sibling_above_a_failed_slot_is_dropped_not_left_waiting():
    """A 2-slot pod joins; slot 0 fails at start, slot 1 waits. Slot 1 can only be taken in with
    slot 0 (local ranks 0..n-1) and slot 0 gets no joiner while the host is refused: slot 1 is
    dropped (no refusal for it), and after the refusal both slots get joiners again."""
    j = joins()
    world = {("a", 0)}
    j.spawn({"a": 1, "b": 2}, world, {"a", "b"}, world, 4, 0.0)
    assert j.ready(("b", 1), 1.0) == []  # slot 0 still starts
    (drop0,) = j.ended(("b", 0), "exit 3", 2.0, ["a", "b"])[:1]
    assert drop0.key == ("b", 0) and drop0.refuse
    out = j.tick(2.0, {"a": 1, "b": 2}, world)
    assert [d.key for d in out if isinstance(d, Drop)] == [("b", 1)]
    (drop1,) = [d for d in out if isinstance(d, Drop)]
    assert not drop1.refuse and "slot 0 of its host has no worker" in drop1.reason
    assert not any(isinstance(d, Tell) for d in out)  # slot 1 alone is no world's to take
    assert j.joiners == {}
    assert j.tick(drop0.until, {"a": 1, "b": 2}, world) == [Release("b", 10.0)]
    assert j.spawn({"a": 1, "b": 2}, world, {"a", "b"}, world, 4, drop0.until) == \
        [Spawn(("b", 0)), Spawn(("b", 1))]


def test_stranded_only_on_a_refused_host_with_a_gap_below():
    views = {("b", 1): View(ready=True), ("c", 1): View(ready=True), ("c", 0): View(ready=False),
             ("d", 2): View(ready=True)}
    # b: slot 0 empty and refused; c: slot 0 still starts (its deadline bounds the wait);
    # d: slots 0-1 in the world
    assert stranded(views, {("d", 0), ("d", 1)}, refused={"b", "c", "d"}) == [("b", 1)]
    assert stranded(views, set(), refused=set()) == []


def test_admitted_is_a_prefix_of_the_world_and_the_waiting():
    assert admitted("b", 4, {("b", 0)}, [("b", 1), ("b", 3)]) == 2
    assert admitted("b", 2, set(), [("b", 1)]) == 0
    assert admitted("b", 2, {("b", 0), ("b", 1), ("b", 2)}, []) == 2


def test_a_joiner_whose_slot_left_is_dropped_unrefused_and_its_hosts_refusal_forgotten():
    j = joins()
    j.started(("b", 0), 0.0)
    j.started(("b", 1), 0.0)
    j.ended(("b", 0), "exit 1", 1.0, ["b"])
    out = j.tick(2.0, {}, set())
    assert out == [Drop(("b", 1), "its host left discovery before it was taken in", refuse=False)]
    assert not j.refusals.is_out("b")


def test_a_drop_tells_the_world_of_the_joiners_held_back_for_it():
    j = joins()
    j.started(("b", 0), 0.0)
    j.started(("c", 0), 0.0)
    assert j.ready(("b", 0), 1.0) == []
    out = j.ended(("c", 0), "exit 1", 2.0, ["b", "c"])
    assert out[1:] == [Tell((("b", 0),))]
