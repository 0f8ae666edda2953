"""Random streams that differ per rank: augmentation, dropout and loader processes.

Every rank starts from the same ``--seed`` so that model initialisation agrees (it is also
broadcast), but after that each rank must draw its own random crops, flips and dropout
masks, or every GPU trains on the same augmentation of its samples. ``stream_seed`` mixes
the seed with the rank and where the job is (epoch, resets), so a rank that re-enters
training after a reset, or a joiner, gets a stream of its own too.
"""

from __future__ import annotations

import hashlib


def stream_seed(seed: int, rank: int, epoch: int, resets: int) -> int:
    """A 63-bit seed for ``torch.manual_seed``, distinct for each (seed, rank, epoch, resets)."""
    digest = hashlib.sha256(f"{seed}/{rank}/{epoch}/{resets}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1
