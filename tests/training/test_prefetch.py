"""``Prefetcher``: batch k+1 prepared in a thread while the caller works on batch k (on the
CPU here; on CUDA the same code adds a side stream)."""

from __future__ import annotations

import threading

import pytest
import torch

from training.prefetch import Prefetcher

CPU = torch.device("cpu")


def test_items_come_in_order_one_ahead_and_the_thread_ends():
    g = torch.Generator().manual_seed(1)
    pulled = []

    def source():
        for k in range(5):
            pulled.append(k)
            yield k

    def work(k):  # a seeded stream drawn in the thread, in the source's order
        return k, float(torch.rand(1, generator=g))

    with Prefetcher(source(), work, CPU) as ready:
        first = next(ready)
        got = [first, *ready]
    g2 = torch.Generator().manual_seed(1)
    assert got == [(k, float(torch.rand(1, generator=g2))) for k in range(5)]
    assert pulled == list(range(5))
    assert not any(t.name == "prefetch" for t in threading.enumerate())


def test_close_mid_way_stops_pulling_and_errors_reach_the_caller():
    pulled = []

    def source():
        for k in range(100):
            pulled.append(k)
            yield k

    ready = Prefetcher(source(), lambda k: k, CPU)
    assert next(ready) == 0
    ready.close()
    assert len(pulled) <= 3  # one handed out, at most one queued and one in the thread's hands

    def failing():
        yield 1
        raise ValueError("cannot read item 2")
    with Prefetcher(failing(), lambda k: k, CPU) as ready:
        assert next(ready) == 1
        with pytest.raises(ValueError, match="item 2"):
            next(ready)
        with pytest.raises(ValueError):
            next(ready)
