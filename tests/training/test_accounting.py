"""Sample accounting: steps cover an epoch exactly once, whatever the world sizes."""

import pytest

from training.accounting import epoch_order, plan


def test_order_is_a_permutation_that_depends_on_epoch_and_seed():
    a, b, c = epoch_order(100, 1, 0), epoch_order(100, 1, 1), epoch_order(100, 2, 0)
    assert sorted(a) == list(range(100))
    assert a != b and a != c
    assert epoch_order(100, 1, 0) == a
    assert epoch_order(5, 1, 0, shuffle=False) == [0, 1, 2, 3, 4]


def run_epoch(order, worlds_by_step, batch):
    """Simulate an epoch in which the world size changes; returns what each step trained."""
    processed, seen = 0, []
    step_no = 0
    while processed < len(order):
        world = worlds_by_step(step_no)
        local = [plan(order, processed, world, r, batch) for r in range(world)]
        assert len({len(p) for p in local}) == 1, "every rank runs the same number of steps"
        first = [p[0] for p in local]
        assert len({s.total for s in first}) == 1
        for s in first:
            seen.extend(s.indices)
        assert sum(len(s.indices) for s in first) == first[0].total
        processed += first[0].total
        step_no += 1
    return seen


@pytest.mark.parametrize("size, batch", [(103, 4), (7, 3), (60, 5), (1, 8)])
@pytest.mark.parametrize("worlds", [[1], [2], [3], [2, 3], [3, 2], [3, 1, 2, 4]])
def test_any_sequence_of_worlds_covers_the_epoch_once(size, batch, worlds):
    order = epoch_order(size, 7, 3)
    seen = run_epoch(order, lambda k: worlds[min(k, len(worlds) - 1)], batch)
    assert sorted(seen) == list(range(size))


def test_short_last_step_is_spread_and_may_leave_a_rank_empty():
    order = list(range(10))
    steps = [plan(order, 8, 3, r, 4) for r in range(3)]
    assert [s[0].indices for s in steps] == [(8,), (9,), ()]
    assert all(s[0].total == 2 for s in steps)


def test_full_steps_are_strided_by_rank():
    order = list(range(12))
    assert plan(order, 0, 2, 1, 3)[0].indices == (1, 3, 5)
    assert plan(order, 6, 2, 1, 3)[0].indices == (7, 9, 11)


def test_nothing_left_after_the_epoch():
    assert plan(list(range(10)), 10, 2, 0, 4) == []
    # the steps left, as every rank of the world counts them
    for processed, world, batch, left in ((10, 2, 4, 0), (0, 2, 4, 2), (3, 3, 2, 2), (9, 2, 4, 1)):
        assert {len(plan(list(range(10)), processed, world, r, batch)) for r in range(world)} == {left}


@pytest.mark.parametrize("args, fragment", [
    ((0, 0, 1), "must be positive"),
    ((0, 2, 2), "rank 2 is outside a world of 2"),
    ((11, 2, 0), "processed 11 is outside"),
])
def test_bad_arguments(args, fragment):
    processed, world, rank = args
    with pytest.raises(ValueError, match=fragment):
        plan(list(range(10)), processed, world, rank, 2)
