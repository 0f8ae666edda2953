"""DataLoaders that live as long as the worker: started once, reused across epochs and resets.

On the GPU path the loading processes are started with ``forkserver`` (never forked from a
process that has initialised Horovod, NCCL and CUDA: some InfiniBand stacks are not
fork-safe, and a fork copies a large address space) and are ``persistent``: each epoch,
reset and validation pass re-iterates the same processes with a new plan, because the
batch sampler is read when iteration starts (``StepSampler`` for training,
``ShardBatches`` for validation). On the CPU path (no loading processes by default) the
data is loaded in the training process.

The training loader is made before ``hvd.init()`` and warmed there (``training.warmup``):
its batch sampler is a ``Planned``, which yields a warm-up plan within ``instead`` and the
training plan otherwise; its processes' random streams come from
the loader's own generator (``make_loader``'s ``generator``), seeded per rank, not from the
training process's stream at the moment of the first iteration (which, before
``hvd.init()``, is the same on every rank).
"""

from __future__ import annotations

import contextlib
import multiprocessing
from collections.abc import Callable, Iterable, Iterator

import torch
from torch.utils.data import DataLoader, Dataset

from training import cpus


def default_workers(gpu_path: bool, workers_on_host: int, usable: int, limit: float | None) -> int:
    """Loading processes per training worker when ``--workers`` is not given: on the GPU path
    its share of the CPUs the pod may use (affinity, cgroup limit) less one for the training
    process itself (at least one); on the CPU path none (the cores do the arithmetic)."""
    if not gpu_path:
        return 0
    return max(1, cpus.threads_per_worker(workers_on_host, usable, limit) - 1)


class ShardBatches:
    """Batches of this rank's validation shard (every ``size``-th sample from ``rank``), planned
    when iteration starts, so one persistent loader serves every world size."""

    def __init__(self, dataset_size: int, batch_size: int, rank_size):
        self.n, self.batch_size, self.rank_size = dataset_size, batch_size, rank_size

    def indices(self) -> list[int]:
        rank, size = self.rank_size()
        return list(range(rank, self.n, size))

    def __iter__(self):
        idx = self.indices()
        return iter([idx[i:i + self.batch_size] for i in range(0, len(idx), self.batch_size)])

    def __len__(self) -> int:
        return -(-len(self.indices()) // self.batch_size)


class Planned:
    """A batch sampler for a loader that outlives its plans: each iteration yields the
    batches of ``plan``, read when the iteration starts, except within ``instead(batches)``,
    where every iteration yields ``batches`` (a warm-up before the training plan exists).
    (A DataLoader may read its batch sampler more than once when it starts an iteration:
    torch's multi-process iterator does, so the warm-up is a block, not a one-shot.)"""

    def __init__(self, plan: Iterable[list[int]]):
        self.plan = plan
        self._instead: list[list[int]] | None = None

    @contextlib.contextmanager
    def instead(self, batches: list[list[int]]) -> Iterator[None]:
        """Within the block, iterations yield ``batches`` instead of the plan's."""
        self._instead = [list(b) for b in batches]
        try:
            yield
        finally:
            self._instead = None

    def __iter__(self):
        return iter(self._instead if self._instead is not None else self.plan)

    def __len__(self) -> int:
        if self._instead is not None:
            return len(self._instead)
        return len(self.plan)  # type: ignore[arg-type]


def warm_batches(dataset_size: int, batch_size: int, count: int) -> list[list[int]]:
    """``count`` full batches of sample indices for a warm-up (one per loading process, so
    every process loads one): ``0, 1, 2, ...`` wrapping around a dataset smaller than that.
    ``ValueError`` for an empty dataset or a count or batch size below 1."""
    if dataset_size < 1 or batch_size < 1 or count < 1:
        raise ValueError(f"warm-up batches need samples, a batch size and a count >= 1, got "
                         f"{dataset_size}, {batch_size}, {count}")
    return [[(k * batch_size + i) % dataset_size for i in range(batch_size)] for k in range(count)]


def make_loader(dataset: Dataset, batch_sampler: Iterable[list[int]], workers: int,
                pin_memory: bool, collate_fn: Callable | None = None,
                generator: torch.Generator | None = None) -> DataLoader:
    """A DataLoader over ``batch_sampler`` (an iterable of index lists, re-read at every
    ``iter``); with ``workers`` > 0 its processes are started by forkserver and persist.
    ``collate_fn`` (a module-level function: forkserver pickles it) replaces stacking.
    ``generator``: where the processes' base seed is drawn at the first iteration (else
    from torch's global stream)."""
    processes = workers > 0
    return DataLoader(dataset, batch_sampler=batch_sampler, num_workers=workers, pin_memory=pin_memory,
                      collate_fn=collate_fn, generator=generator,
                      persistent_workers=processes, prefetch_factor=4 if processes else None,
                      multiprocessing_context=multiprocessing.get_context("forkserver") if processes else None)
