"""Adoption's rule (``elastic.driver.adoption.decide``): when the workers that ask to be adopted
make a whole world, which one, and what is missing when they do not; when they are all
between two worlds (a peer lost while no launcher led), which of them are taken over."""
from __future__ import annotations

import pytest

from elastic.driver.adoption import SETTLE_SECS, Adopt, AdoptInReset, GiveUp, Place, Wait, decide


def place(host: str, slot: int, rank: int, size: int, local_size: int = 1, cross_rank: int = 0,
          cross_size: int = 1, commits: int = 10) -> Place:
    return Place(host, slot, rank, size, slot, local_size, cross_rank, cross_size, commits)


TWO_HOSTS = {
    ("b", 0): place("b", 0, 0, 3, cross_rank=0, cross_size=2),
    ("a", 0): place("a", 0, 1, 3, local_size=2, cross_rank=1, cross_size=2),
    ("a", 1): place("a", 1, 2, 3, local_size=2, cross_rank=1, cross_size=2),
}


def test_a_whole_world_is_adopted_by_rank_with_its_hosts_in_rank_order():
    decision = decide(TWO_HOSTS, TWO_HOSTS, now=0.0, deadline=10.0)
    assert isinstance(decision, Adopt)
    assert [p.rank for p in decision.world] == [0, 1, 2]
    assert decision.world[0].host == "b"  # rank 0, the coordinator, where it was
    assert decision.host_order() == ["b", "a"]


@pytest.mark.parametrize("claimed, places, missing", [
    (set(), {}, "no worker has asked to be adopted"),
    ({("b", 0), ("a", 0), ("a", 1)}, {k: v for k, v in TWO_HOSTS.items() if k != ("a", 1)},
     "no answer yet from a[1]"),
    (set(TWO_HOSTS), {**TWO_HOSTS, ("a", 1): None}, "a[1] is between two worlds"),
    ({("b", 0), ("a", 0)}, TWO_HOSTS, "rank 2 of 3 has not asked to be adopted"),
    (set(TWO_HOSTS), {**TWO_HOSTS, ("a", 1): place("a", 1, 1, 3, local_size=2)}, "rank 1 is claimed by"),
    (set(TWO_HOSTS), {**TWO_HOSTS, ("a", 0): place("a", 0, 1, 3, local_size=1)},
     "the local ranks on a do not match its slots"),
])
def test_a_world_not_whole_is_waited_for_then_given_up_naming_what_is_missing(claimed, places, missing):
    waiting = decide(claimed, places, now=5.0, deadline=10.0)
    assert isinstance(waiting, Wait) and missing in waiting.missing
    given_up = decide(claimed, places, now=10.0, deadline=10.0)
    assert isinstance(given_up, GiveUp) and missing in given_up.reason


def test_a_straggler_of_another_world_does_not_stop_the_adoption():
    """A process of an older world (another size) still asking is left out, not adopted."""
    straggler = {("c", 0): place("c", 0, 3, 4)}
    decision = decide({*TWO_HOSTS, *straggler}, {**TWO_HOSTS, **straggler}, now=0.0, deadline=10.0)
    assert isinstance(decision, Adopt)
    assert {(p.host, p.slot) for p in decision.world} == set(TWO_HOSTS)


@pytest.mark.parametrize("ranks", [None, (0, 1, 0, 1, 0), (0, 1, 0, 1, 0, "1"), (2, 2, 0, 1, 0, 1),
                                   (0, 1, -1, 1, 0, 1), (0, 1, 0, 1, 3, 2)])
def test_an_answer_that_is_not_a_place_counts_as_between_two_worlds(ranks):
    assert Place.from_answer(("a", 0), ranks, 3) is None


def test_an_answer_is_a_place():
    assert Place.from_answer(("a", 1), (2, 3, 1, 2, 1, 2), 7) == Place("a", 1, 2, 3, 1, 2, 1, 2, 7)


def test_workers_all_between_two_worlds_are_adopted_once_their_claims_settled():
    """The survivors of a peer lost in the gap are in their reset: nobody holds a rank. Once
    every claim answered so and no claim came or went for ``SETTLE_SECS``, they are taken over
    (the next world forms with them), the hosts in a fixed order; before, the rule waits."""
    between = {("b", 0): None, ("a", 0): None, ("a", 1): None}
    early = decide(between, between, now=SETTLE_SECS - 0.1, deadline=60.0, settled_since=0.0)
    assert isinstance(early, Wait) and "3 workers are between two worlds" in early.missing
    decision = decide(between, between, now=SETTLE_SECS, deadline=60.0, settled_since=0.0)
    assert decision == AdoptInReset((("a", 0), ("a", 1), ("b", 0)))
    assert decision.host_order() == ["a", "b"]


def test_a_slot_above_a_gap_on_its_host_is_not_adopted_in_a_reset():
    """Horovod numbers a host's slots from 0: a survivor at a[1] whose a[0] is gone cannot keep
    its slot in the next world; it is left to its window, a[0] and b[0] are taken."""
    between = {("a", 1): None, ("b", 0): None, ("b", 1): None}
    decision = decide(between, between, now=10.0, deadline=60.0, settled_since=0.0)
    assert decision == AdoptInReset((("b", 0), ("b", 1)))


@pytest.mark.parametrize("places", [
    {("a", 0): None, ("b", 0): place("b", 0, 1, 2)},  # b still in the old world: it fails next
    {("a", 0): None},  # b has not answered yet
])
def test_a_world_partly_between_two_worlds_is_waited_for(places):
    """Some claimed workers between two worlds and others still in one (or unanswered): the
    world's failure is under way, its members reset once their collectives fail: wait, and
    give up at the deadline."""
    claimed = {("a", 0), ("b", 0)}
    assert isinstance(decide(claimed, places, now=10.0, deadline=60.0, settled_since=0.0), Wait)
    assert isinstance(decide(claimed, places, now=60.0, deadline=60.0, settled_since=0.0), GiveUp)


def test_claims_between_two_worlds_that_never_settle_are_given_up_at_the_deadline():
    between = {("a", 0): None}
    assert isinstance(decide(between, between, now=60.0, deadline=60.0, settled_since=59.0), GiveUp)
