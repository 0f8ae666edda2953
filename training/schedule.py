"""The learning-rate schedule (pure): scaled by world size, with a linear warm-up.

Following Goyal et al. (and Horovod's ResNet-50 example): the target rate is
``base_lr * world_size``; during the first ``warmup_epochs`` epochs it ramps linearly from
``base_lr`` to the target; after each epoch in ``milestones`` it is multiplied by ``gamma``.
``progress`` is the fractional epoch (``epoch + done / total``) so the ramp is smooth within
an epoch and the rate follows the world size the moment it changes.
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
