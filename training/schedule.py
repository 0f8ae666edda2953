"""The learning-rate schedule (pure): scaled by world size, with a linear warm-up.

Following Goyal et al. (and Horovod's ResNet-50 example): the target rate is
``base_lr * world_size``; during the first ``warmup_epochs`` epochs it ramps linearly from
``base_lr`` to the target; after each epoch in ``milestones`` it is multiplied by ``gamma``.
``progress`` is the fractional epoch (``epoch + done / total``) so the ramp is smooth within
an epoch.

When the world grows the target rises k-fold in one step; ``resize_ramp`` and ``ramped``
turn that into a linear ramp from the rate in use to the new target over a configurable part
of an epoch (``--scale-up-ramp``). The ramp is a pair kept in the elastic state, so a reset
during the ramp continues it and every rank (joiners included) follows the same one. A
smaller world takes its lower rate at once.
"""

from __future__ import annotations


def learning_rate(progress: float, base_lr: float, world_size: int, warmup_epochs: float = 0.0,
                  milestones: tuple[int, ...] = (), gamma: float = 0.1) -> float:
    """The learning rate at fractional epoch ``progress`` (0-based) for ``world_size`` workers.

    Raises ValueError for a negative progress or rate, or a world size below one.
    """
    if progress < 0 or base_lr < 0 or warmup_epochs < 0:
        raise ValueError("progress, base_lr and warmup_epochs must not be negative")
    if world_size < 1:
        raise ValueError(f"world size {world_size} must be at least 1")
    target = base_lr * world_size
    if warmup_epochs > 0 and progress < warmup_epochs:
        lr = base_lr + (target - base_lr) * progress / warmup_epochs
    else:
        lr = target
    decays = sum(1 for m in milestones if progress >= m)
    return lr * gamma ** decays


Ramp = tuple[float, float]
"""A rate ramp after a scale-up: ``(from_rate, start_progress)``."""


def ramped(target: float, progress: float, ramp: Ramp | None, ramp_epochs: float) -> float:
    """The rate at ``progress`` given the schedule's ``target`` and an optional ``ramp``.

    Within ``ramp_epochs`` of the ramp's start the rate goes linearly from the ramp's
    ``from_rate`` to ``target``; before its start, after its end, without a ramp, with
    ``ramp_epochs`` 0, or when ``target`` is at or below ``from_rate`` (the world shrank, or
    a milestone decayed the rate), it is ``target``."""
    if ramp is None or ramp_epochs <= 0:
        return target
    start_rate, start = ramp
    done = (progress - start) / ramp_epochs
    if done >= 1 or done < 0 or target <= start_rate:
        return target
    return start_rate + (target - start_rate) * done


def resize_ramp(current: float, new_target: float, progress: float, ramp_epochs: float
                ) -> Ramp | None:
    """The ramp to follow after the world size changed at ``progress``.

    ``current`` is the rate in use before the change (ramp included), ``new_target`` the
    schedule's rate for the new world at ``progress``. A rise (a scale-up) ramps from
    ``current`` over ``ramp_epochs`` of an epoch: a k-fold jump of SGD with momentum's rate
    destabilises training as at the start, which is why warm-up exists. A fall (scale-down)
    is immediate: None."""
    if ramp_epochs <= 0 or new_target <= current:
        return None
    return (current, progress)
