"""Learning rate: scaled by the world size, linear warm-up, step decay."""

import pytest

from training.schedule import learning_rate


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
