"""The part of ``Trainer`` that evaluates at an epoch's end (``EvalPart``).

``average_buffers()`` averages the floating buffers (BatchNorm running statistics) over the
ranks (a collective); ``validate()`` returns the accuracy on the validation split, each rank
taking its shard (``loaders.ShardBatches`` for the world size when iteration starts), one
allreduce of the sums; None with no validation set (or no sample).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch.utils.data import DataLoader, Dataset

from training import loaders
from training.trainer_base import TrainerParts, cudnn_autotune, dataset_size


class EvalPart(TrainerParts):
    """Buffer averaging and validation (see the module docstring)."""

    def average_buffers(self) -> None:
        """Average floating-point buffers (BatchNorm running statistics) over the ranks."""
        bufs = [b for b in self.model.buffers() if b.is_floating_point()]
        if not bufs:
            return
        flat = torch.cat([b.detach().reshape(-1).float() for b in bufs])
        flat = self.hvd.allreduce(flat, op=self.hvd.Average, name="training.buffers")
        offset = 0
        for b in bufs:
            n = b.numel()
            b.copy_(flat[offset:offset + n].view_as(b))
            offset += n

    def val_loader(self, val_set: Dataset) -> tuple[loaders.ShardBatches, DataLoader]:
        """This rank's validation shard plan and the loader it drives (started at first use,
        then kept: the plan follows the world size when iteration starts)."""
        if self._val is None:
            hvd = self.hvd
            shards = loaders.ShardBatches(dataset_size(val_set), self.args.val_batch_size,
                                          lambda: (hvd.rank(), hvd.size()))
            self._val = shards, loaders.make_loader(val_set, shards, self.workers or 0, pin_memory=self.pin,
                                                    collate_fn=self.collate)
        return self._val

    def validate(self) -> float | None:
        """Accuracy on the validation split, each rank taking every size-th sample."""
        if self.task.val_set is None:
            return None
        hvd = self.hvd
        shards, loader = self.val_loader(self.task.val_set)
        correct = torch.zeros((), dtype=torch.int64, device=self.device)
        count = 0
        self.model.eval()
        batches: Iterable = loader if len(shards) else ()
        with torch.no_grad():
            for batch in batches:
                x, y = self.to_device(batch, train=False)
                with cudnn_autotune(int(x.shape[0]) == self.args.val_batch_size), \
                        torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.amp):
                    out = self.model(x)
                correct += (out.argmax(1) == y).sum()
                count += int(y.shape[0])
        self.model.train()
        sums = hvd.allreduce(torch.tensor([float(correct), float(count)], dtype=torch.float64),
                             op=hvd.Sum, name="training.val")
        return float(sums[0]) / float(sums[1]) if float(sums[1]) else None
