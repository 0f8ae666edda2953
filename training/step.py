"""The part of ``Trainer`` that trains one step (``StepPart``).

``train_step(batch, total)``: one optimizer step on ``batch`` (``(x, y)`` on the device, or
None for a rank with no sample in a short step: zero gradients), the loss weighted by
``world / total`` so the averaged gradient is the step's mean, under mixed precision and the
gradient scaler when enabled; the epoch's loss/accuracy sums grow in device tensors until the
next commit. ``to_device`` puts a loader batch on the device (decoded, augmented, normalised,
channels-last as configured). ``rate``/``follow_world``/``set_lr``: the learning rate for the
world size, with the ramp after a scale-up (``training.schedule``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from training.schedule import learning_rate, ramped, resize_ramp
from training.trainer_base import TrainerParts, cudnn_autotune


class StepPart(TrainerParts):
    """One step and its learning rate (see the module docstring)."""

    def train_step(self, batch, total: int) -> None:
        """One optimizer step on ``batch``, ``(x, y)`` on the device (``to_device``) or None
        for no sample; ``total`` is the step's sample count over all ranks."""
        full = batch is not None and int(batch[0].shape[0]) == self.args.batch_size
        with cudnn_autotune(full):
            self._step(batch, total)

    def _step(self, batch, total: int) -> None:
        model, opt = self.model, self.opt
        model.train()
        opt.zero_grad()
        if batch is None:  # this rank has no sample in a short last step: zero gradients
            loss = sum((p.sum() for p in model.parameters()), torch.zeros((), device=self.device)) * 0.0
        else:
            x, y = batch
            with torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.amp):
                out = model(x)
            summed = F.cross_entropy(out.float(), y, reduction="sum",
                                     label_smoothing=self.args.label_smoothing)
            loss = summed * (self.hvd.size() / total)
            self._pending_loss += summed.detach().double()
            self._pending_correct += (out.detach().argmax(1) == y).sum()
            self._pending_count += int(y.shape[0])
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            opt.synchronize()
            with opt.skip_synchronize():
                self.scaler.step(opt)
            self.scaler.update()
        else:
            loss.backward()
            opt.step()
        if not self._stepped:
            self._stepped = True
            self.tracer.event("first-step", rank=self.hvd.rank(), size=self.hvd.size())

    def to_device(self, batch, train: bool):
        """A loader batch as ``(x, y)`` on the training device (x channels-last when wanted).
        With ``--augment-on-device`` the batch holds encoded images: they are decoded and
        augmented (``train``) or resized and cropped (validation) there; uint8 images (a
        ``Task`` with ``normalize``) are normalised there in one step (``Normalizer``)."""
        if self.augment is not None:
            images, y, paths = batch
            x = self.augment.train(images, paths) if train else self.augment.val(images, paths)
        else:
            x, y = batch
            if self.normalizer is not None and x.dtype == torch.uint8:
                x = self.normalizer(x)
            else:
                x = x.to(self.device, non_blocking=True)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x, y.to(self.device, non_blocking=True)

    def rate(self, state, world: int) -> float:
        """The learning rate now for ``world`` workers: the schedule, then the state's ramp."""
        a = self.args
        progress = state.epoch + self.sampler.processed_num / self.n
        target = learning_rate(progress, a.lr, world, a.warmup_epochs, a.lr_milestones)
        return ramped(target, progress, state.lr_ramp, a.scale_up_ramp)

    def follow_world(self, state) -> None:
        """On entry with the synced state: when the world size differs from the one the rate
        was last set for, start a ramp from the rate in use (a scale-up) or drop it (a
        shrink: immediate). Every rank decides alike from the same synced state; a roll-back
        restores the previous world and ramp, and the next entry decides again."""
        size = self.hvd.size()
        if state.world and state.world != size:
            progress = state.epoch + self.sampler.processed_num / self.n
            new_target = learning_rate(progress, self.args.lr, size, self.args.warmup_epochs,
                                       self.args.lr_milestones)
            state.lr_ramp = resize_ramp(self.rate(state, state.world), new_target, progress,
                                        self.args.scale_up_ramp)
        state.world = size

    def set_lr(self, state) -> None:
        lr = self.rate(state, self.hvd.size())
        for group in self.opt.param_groups:
            group["lr"] = lr
