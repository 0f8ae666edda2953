"""Learning rate: scaled by the world size, linear warm-up, step decay."""

import pytest

from training.schedule import learning_rate, ramped, resize_ramp


def test_scaled_by_world_size_without_warmup():
    assert learning_rate(0.0, 0.1, 4) == pytest.approx(0.4)
    assert learning_rate(3.5, 0.1, 1) == pytest.approx(0.1)


def test_warmup_ramps_from_base_to_scaled():
    assert learning_rate(0.0, 0.1, 4, warmup_epochs=2) == pytest.approx(0.1)
    assert learning_rate(1.0, 0.1, 4, warmup_epochs=2) == pytest.approx(0.25)
    assert learning_rate(2.0, 0.1, 4, warmup_epochs=2) == pytest.approx(0.4)
    assert learning_rate(5.0, 0.1, 4, warmup_epochs=2) == pytest.approx(0.4)


def test_world_change_moves_the_rate_at_once():
    assert learning_rate(1.5, 0.1, 3) / learning_rate(1.5, 0.1, 2) == pytest.approx(1.5)


def test_milestones_decay():
    assert learning_rate(29.9, 0.1, 1, milestones=(30, 60)) == pytest.approx(0.1)
    assert learning_rate(30.0, 0.1, 1, milestones=(30, 60)) == pytest.approx(0.01)
    assert learning_rate(61.0, 0.1, 1, milestones=(30, 60)) == pytest.approx(0.001)


@pytest.mark.parametrize("args", [(-1, 0.1, 1), (0, -0.1, 1), (0, 0.1, 0)])
def test_bad_values(args):
    with pytest.raises(ValueError):
        learning_rate(*args)


def rates_across_resize(old: int, new: int, ramp_epochs: float, at: float, steps: list[float]):
    """The rates at ``steps`` (fractional epochs) when the world goes ``old`` -> ``new`` at
    ``at``, as the trainer computes them: the ramp decided at the reset, then ``ramped``."""
    current = ramped(learning_rate(at, 0.1, old), at, None, ramp_epochs)
    ramp = resize_ramp(current, learning_rate(at, 0.1, new), at, ramp_epochs)
    return [ramped(learning_rate(p, 0.1, new), p, ramp, ramp_epochs) for p in steps], ramp


def test_scale_up_2_to_4_ramps_from_the_old_rate_to_the_new():
    rates, ramp = rates_across_resize(2, 4, 0.5, 1.0, [1.0, 1.125, 1.25, 1.5, 2.0])
    assert ramp == (pytest.approx(0.2), 1.0)
    assert rates == pytest.approx([0.2, 0.25, 0.3, 0.4, 0.4])


def test_shrink_4_to_2_is_immediate():
    rates, ramp = rates_across_resize(4, 2, 0.5, 1.0, [1.0, 1.25])
    assert ramp is None and rates == pytest.approx([0.2, 0.2])


def test_zero_ramp_keeps_the_old_jump():
    rates, ramp = rates_across_resize(2, 4, 0.0, 1.0, [1.0])
    assert ramp is None and rates == pytest.approx([0.4])


def test_ramp_during_warmup_and_a_second_scale_up_mid_ramp():
    # 2 -> 8 during a 5-epoch warm-up: from 0.1 + 0.1 * 0.2 = 0.12 towards the warm-up's
    # rate at 8 (0.1 + 0.7 * progress / 5), never above it
    at = 1.0
    current = learning_rate(at, 0.1, 2, warmup_epochs=5)
    ramp = resize_ramp(current, learning_rate(at, 0.1, 8, warmup_epochs=5), at, 0.25)
    assert ramp == (pytest.approx(0.12), 1.0)
    mid = ramped(learning_rate(1.125, 0.1, 8, warmup_epochs=5), 1.125, ramp, 0.25)
    assert 0.12 < mid < learning_rate(1.125, 0.1, 8, warmup_epochs=5)
    # a further scale-up mid-ramp ramps from the rate in use then, not from the old target
    again = resize_ramp(mid, learning_rate(1.125, 0.1, 16, warmup_epochs=5), 1.125, 0.25)
    assert again == (pytest.approx(mid), 1.125)


def test_a_decay_milestone_during_a_ramp_takes_effect_at_once():
    ramp = (0.2, 29.9)
    assert ramped(learning_rate(30.0, 0.1, 4, milestones=(30,)), 30.0, ramp, 0.5) == pytest.approx(0.04)
