"""What a worker gets ready before ``hvd.init()`` besides its model: its input pipeline and
its convolution kernels.

A joining worker is taken into the world once it waits in ``hvd.init()`` (Horovod's spawn
first: the driver tells the running world only then), so whatever it does after that, the
world waits for. Before this, a joiner started its loading processes (each unpickles the
dataset's sample list: 0.9 s for ImageNet's 1.28 M, plus its imports), loaded its first
batch and let cuDNN autotune every convolution in its first step, all after the rendezvous.
``Trainer.warm_up`` (``training.loop``) now does that before ``hvd.init()``, in the calling
thread (a thread running on into ``hvd.init()`` would let the world be told before the
joiner is ready):

- the training loader's processes are started and each loads one batch of a warm-up plan
  (``training.loaders.warm_batches``: its sample indices are not the first training batch's,
  which depend on the world it joins; the processes persist, so the first real batch costs
  one batch's load, spread over them);
- on the GPU path the first warm-up batch goes through ``to_device`` and one forward and
  backward pass of the model in training mode at the full batch size and the training's
  precision and layout (``autotune_pass``): cuDNN's benchmark picks its kernels for that
  shape now, and the first training step finds them cached.

``autotune_pass`` leaves the model as it found it (``model_kept``): parameters untouched (no
optimizer step), gradients cleared, buffers (BatchNorm running statistics, their counters)
restored, so the state rank 0 hands to the others is the one it would have had.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F


@contextlib.contextmanager
def model_kept(model: torch.nn.Module) -> Iterator[None]:
    """Within the block the model may run forward and backward passes; on leaving it (also
    on an error) its buffers hold their values from before, every gradient is ``None`` and
    its training/eval mode is the one it had. Parameters are not copied: the block must not
    step an optimizer."""
    saved = {name: b.detach().clone() for name, b in model.named_buffers()}
    training = model.training
    try:
        yield
    finally:
        with torch.no_grad():
            for name, b in model.named_buffers():
                if name in saved:
                    b.copy_(saved[name])
        for p in model.parameters():
            p.grad = None
        model.train(training)


def autotune_pass(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, amp: bool,
                  amp_dtype: torch.dtype) -> None:
    """One forward and backward pass of ``model`` in training mode on ``(x, y)`` (on the
    model's device, in the training's layout) under the training's autocast, the model
    restored afterwards (``model_kept``); waits for the device to finish."""
    with model_kept(model):
        model.train()
        with torch.autocast(x.device.type, dtype=amp_dtype, enabled=amp):
            out = model(x)
        F.cross_entropy(out.float(), y).backward()
        if x.device.type == "cuda":
            torch.cuda.synchronize(x.device)
