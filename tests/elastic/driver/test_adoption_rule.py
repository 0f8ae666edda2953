"""Adoption's rule (``elastic.driver.adoption.decide``): when the workers that ask to be adopted
make a whole world, which one, and what is missing when they do not."""
from __future__ import annotations

import pytest

from elastic.driver.adoption import Adopt, GiveUp, Place, Wait, decide


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
