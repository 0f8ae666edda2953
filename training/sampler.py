"""``StepSampler``: Horovod's ElasticSampler with exact per-epoch sample accounting.

A ``TorchState`` saves, restores and broadcasts any ``ElasticSampler`` through its
``state_dict`` (``epoch``, ``processed_num``), so this class keeps that interface and
replaces the partitioning: ``reset()`` re-plans the rest of the epoch for the current
rank and world size with ``accounting.plan`` (no padding, no dropped tail), and iteration
yields one list of indices per non-empty local batch (use it as a DataLoader
``batch_sampler``). ``steps`` holds every remaining global step, empty local batches
included, so that every rank runs the same number of steps. ``record_step`` advances
``processed_num`` by a step's global size; call it before committing the state.
"""

from __future__ import annotations

from horovod.torch.elastic import ElasticSampler
from horovod.torch.mpi_ops import rank as hvd_rank
from horovod.torch.mpi_ops import size as hvd_size

from training.accounting import Step, epoch_order, plan


class StepSampler(ElasticSampler):
    """Plans the remaining steps of an epoch of ``dataset_size`` samples for this rank."""

    def __init__(self, dataset_size: int, batch_size: int, shuffle: bool = True, seed: int = 0):
        # ElasticSampler.__init__ would build its own padded partition; only its type is needed.
        self.dataset_size = dataset_size
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.num_replicas = 1
        self.rank = 0
        self.steps: list[Step] = []
        self._order: tuple[int, list[int]] | None = None

    def reset(self) -> None:
        """Re-plan the rest of the epoch for the current Horovod rank and size."""
        self.num_replicas = hvd_size()
        self.rank = hvd_rank()
        if self._order is None or self._order[0] != self.epoch:
            self._order = (self.epoch, epoch_order(self.dataset_size, self.seed, self.epoch,
                                                   self.shuffle))
        self.steps = plan(self._order[1], self.processed_num, self.num_replicas, self.rank,
                          self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its first sample (call at the end of the previous one)."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_step(self, step: Step) -> None:
        """Count a finished global step as processed."""
        self.processed_num += step.total

    def record_batch(self, batch_idx, batch_size):  # Horovod's name; the step size is global
        raise TypeError("StepSampler counts whole steps: use record_step(step)")

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state_dict: dict) -> None:
        self.epoch = int(state_dict["epoch"])
        self.processed_num = int(state_dict["processed_num"])
        self.reset()

    def __iter__(self):
        return iter([list(s.indices) for s in self.steps if s.indices])

    def __len__(self) -> int:
        return sum(1 for s in self.steps if s.indices)
