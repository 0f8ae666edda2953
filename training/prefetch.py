"""Prepare batch k+1 while the training step runs on batch k (``--augment-on-device``).

``Prefetcher(batches, work, device)`` pulls items from the iterator ``batches`` and runs
``work(item)`` on them in one thread of its own, one item ahead of the caller (as DALI does).
On CUDA the work runs on a side stream: nvJPEG and the augmentation kernels overlap the
step's kernels, and ``next`` makes the caller's stream wait for the item's event (no host
synchronisation) and marks its tensors as used there, so the allocator does not hand their
memory out early. Elsewhere the same code runs with no stream.

Order and randomness: one thread calls ``work`` in the iterator's order, so a seeded random
stream inside ``work`` draws as it would in the caller. ``close()`` (also on leaving a
``with`` block) stops the thread and waits for it, so nothing draws from that stream or reads
the iterator after it returns: call it before reseeding or iterating the loader again (an
elastic reset, the end of an epoch). An exception in the thread is raised by ``next``.
``next`` blocks until the next item is ready; ``close`` waits for at most one item of work.

The side stream is the process's one per device (``side_stream``), made at first use and
reused by every ``Prefetcher`` (one per epoch and reset): the caching allocator keeps a pool
per stream, so a new stream per epoch would strand the last one's cached blocks.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator

import torch

from shared.worker import Worker

_END = object()


class SideStreams:
    """One side stream per device for the process, made by ``factory(device)`` at its first
    request and handed out again after; ``None`` for a device that is not CUDA."""

    def __init__(self, factory: Callable = torch.cuda.Stream):
        self._factory = factory
        self._streams: dict[torch.device, object] = {}
        self._lock = threading.Lock()

    def get(self, device: torch.device):
        if device.type != "cuda":
            return None
        key = torch.device("cuda", device.index if device.index is not None else 0)
        with self._lock:
            if key not in self._streams:
                self._streams[key] = self._factory(key)
            return self._streams[key]


SIDE_STREAMS = SideStreams()


def side_stream(device: torch.device):
    """The process's side stream for ``device`` (``None`` off CUDA)."""
    return SIDE_STREAMS.get(device)


class Prefetcher:
    """Iterate ``work(item)`` for the items of ``batches``, prepared one ahead in a thread."""

    def __init__(self, batches: Iterator, work: Callable, device: torch.device):
        self._batches, self._work, self._device = batches, work, device
        self._stream = side_stream(device)
        self._queue: queue.Queue = queue.Queue(maxsize=1)
        self._worker = Worker(self._run, "prefetch")
        self._stop = self._worker.stopping
        self._worker.start()

    def _run(self) -> None:
        # every exception is handed to the caller by next, so the worker never keeps one
        try:
            if self._stream is not None:  # the current device is per thread
                torch.cuda.set_device(self._device)
            while not self._stop.is_set():
                try:
                    item = next(self._batches)
                except StopIteration:
                    self._put((_END, None))
                    return
                if self._stream is not None:
                    with torch.cuda.stream(self._stream):
                        out = self._work(item)
                        event = torch.cuda.Event()
                        event.record(self._stream)
                else:
                    out, event = self._work(item), None
                self._put((out, event))
        except BaseException as exc:  # handed to the caller by next
            self._put((_END, exc))

    def _put(self, entry) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(entry, timeout=0.1)
                return
            except queue.Full:
                continue

    def __iter__(self) -> Prefetcher:
        return self

    def __next__(self):
        out, extra = self._queue.get()
        if out is _END:
            self._queue.put((_END, extra))  # later calls end (or fail) the same way
            if extra is not None:
                raise extra
            raise StopIteration
        if extra is not None:  # CUDA: the caller's stream waits for the side stream's work
            current = torch.cuda.current_stream(self._device)
            current.wait_event(extra)
            for t in _tensors(out):
                if t.is_cuda:
                    t.record_stream(current)
        return out

    def close(self) -> None:
        """Stop the thread and wait for it (at most one item of work)."""
        self._worker.stop(None)

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for o in obj:
            yield from _tensors(o)
