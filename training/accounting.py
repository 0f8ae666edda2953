"""Sample accounting for elastic epochs (pure): who trains on which samples, step by step.

An epoch is a fixed order of the dataset (``epoch_order``: a shuffle seeded by
``seed + epoch``, the same on every rank). ``processed`` counts the samples of that order
already consumed by committed steps. Whatever the world size, the rest of the order is cut
into global steps of ``world * batch`` samples; rank ``r`` takes every ``world``-th sample of
a step starting at ``r``. The last step may be short: its samples are spread so that local
batches differ by at most one, and a rank may get none at all when fewer samples than ranks
remain. Nothing is padded and nothing is dropped, so across any sequence of world sizes the
committed steps of one epoch cover the order exactly once.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


def epoch_order(size: int, seed: int, epoch: int, shuffle: bool = True) -> list[int]:
    """The order of sample indices ``0..size-1`` for ``epoch``; identical on every rank."""
    order = list(range(size))
    if shuffle:
        random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order


@dataclass(frozen=True)
class Step:
    """One global step: ``total`` samples over all ranks, ``indices`` for this rank."""

    total: int
    indices: tuple[int, ...]


def plan(order: list[int] | tuple[int, ...], processed: int, world: int, rank: int,
         batch: int) -> list[Step]:
    """The steps left in an epoch from ``processed`` on, seen from ``rank`` of ``world``.

    Raises ValueError for a rank outside the world, a non-positive world or batch, or
    ``processed`` outside ``0..len(order)``.
    """
    if world < 1 or batch < 1:
        raise ValueError(f"world ({world}) and batch ({batch}) must be positive")
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is outside a world of {world}")
    if not 0 <= processed <= len(order):
        raise ValueError(f"processed {processed} is outside 0..{len(order)}")
    span = world * batch
    steps = []
    for start in range(processed, len(order), span):
        chunk = order[start:start + span]
        steps.append(Step(total=len(chunk), indices=tuple(chunk[rank::world])))
    return steps
