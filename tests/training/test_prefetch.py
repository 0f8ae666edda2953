"""``Prefetcher``: batch k+1 prepared in a thread while the caller works on batch k (on the
CPU here; on CUDA the same code adds a side stream)."""

from __future__ import annotations

import threading

import pytest
import torch

from training.prefetch import Prefetcher, SideStreams

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


def test_one_side_stream_per_device_for_the_process():
    """A ``Prefetcher`` per epoch reuses the process's side stream (a new one per epoch
    stranded the allocator's blocks cached for the last); none off CUDA."""
    made = []

    def factory(device):
        made.append(device)
        return f"stream-{len(made)}"

    streams = SideStreams(factory)
    cuda0, cuda1 = torch.device("cuda", 0), torch.device("cuda", 1)
    assert [streams.get(cuda0) for _ in range(2)] == ["stream-1", "stream-1"]  # two epochs
    assert streams.get(torch.device("cuda")) == "stream-1"  # the current device: index 0 here
    assert streams.get(cuda1) == "stream-2"
    assert streams.get(CPU) is None
    assert made == [cuda0, cuda1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a torch without a CUDA device")
def test_prefetchers_of_successive_epochs_share_the_stream(monkeypatch):
    """Two ``Prefetcher``s for one CUDA device (two epochs) ask for one stream. No CUDA here:
    the thread's ``set_device`` fails and ``next`` hands that error over, after the stream
    was taken."""
    from training import prefetch

    made = []
    monkeypatch.setattr(prefetch, "SIDE_STREAMS", SideStreams(lambda d: made.append(d) or object()))
    for _ in range(2):
        with Prefetcher(iter(()), lambda k: k, torch.device("cuda", 0)) as ready:
            with pytest.raises((AssertionError, RuntimeError)):
                next(ready)
    assert made == [torch.device("cuda", 0)]
