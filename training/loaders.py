"""DataLoaders that live as long as the worker: started once, reused across epochs and resets.

On the GPU path the loading processes are started with ``forkserver`` (never forked from a
process that has initialised Horovod, NCCL and CUDA: some InfiniBand stacks are not
fork-safe, and a fork copies a large address space) and are ``persistent``: each epoch,
reset and validation pass re-iterates the same processes with a new plan, because the
batch sampler is read when iteration starts (``StepSampler`` for training,
``ShardBatches`` for validation). On the CPU path (no loading processes by default) the
data is loaded in the training process.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterable

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


def make_loader(dataset: Dataset, batch_sampler: Iterable[list[int]], workers: int,
                pin_memory: bool, collate_fn: Callable | None = None) -> DataLoader:
    """A DataLoader over ``batch_sampler`` (an iterable of index lists, re-read at every
    ``iter``); with ``workers`` > 0 its processes are started by forkserver and persist.
    ``collate_fn`` (a module-level function: forkserver pickles it) replaces stacking."""
    processes = workers > 0
    return DataLoader(dataset, batch_sampler=batch_sampler, num_workers=workers, pin_memory=pin_memory,
                      collate_fn=collate_fn,
                      persistent_workers=processes, prefetch_factor=4 if processes else None,
                      multiprocessing_context=multiprocessing.get_context("forkserver") if processes else None)
