"""Channels-last tensors through Horovod, which accepts only default-contiguous tensors.

Horovod 0.28.1 refuses any tensor for which ``tensor.is_contiguous()`` is false
(``ValueError: Tensor is required to be contiguous.``), and a ``channels_last`` model's 4-D
weights, their gradients and their momentum buffers are all such tensors. Two ways through,
both keeping the tensors' own storage and layout:

- gradients: ``LayoutCompression(inner)`` is a Horovod compressor that hands the allreduce a
  contiguous *view* of a dense tensor (its dimensions permuted into memory order) and turns
  the reduced result back into the original shape and strides. Reductions are element-wise
  and every rank has the same layout, so the result is exactly the default-layout one.
- broadcasts (``TorchState.sync``): ``default_layout(model, optimizer)`` converts the
  parameters and optimizer state to the default layout for the duration of a ``with`` block
  and back (to each parameter's original strides) afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


def memory_order(t: torch.Tensor) -> tuple[int, ...] | None:
    """The dimension order in which ``t`` is laid out in memory (outermost first), or None when
    ``t`` is already contiguous or is not dense (overlapping or with gaps)."""
    if t.is_contiguous():
        return None
    strides = t.stride()
    order = tuple(sorted(range(t.dim()), key=lambda d: (-strides[d], d)))
    view = t.permute(order)
    return order if view.is_contiguous() else None


def inverse(order: tuple[int, ...]) -> tuple[int, ...]:
    """The permutation that undoes ``order``."""
    inv = [0] * len(order)
    for i, d in enumerate(order):
        inv[d] = i
    return tuple(inv)


class LayoutCompression:
    """A Horovod compressor (``compress(t) -> (t, ctx)``, ``decompress(t, ctx) -> t``) that
    wraps ``inner`` (``hvd.Compression.none`` or ``.fp16``) so dense non-contiguous tensors
    reach the allreduce as contiguous views of the same memory."""

    def __init__(self, inner):
        self.inner = inner

    def compress(self, tensor: torch.Tensor):
        out, ctx = self.inner.compress(tensor)
        order = memory_order(out)
        if order is None:
            return out, (ctx, None)
        return out.permute(order), (ctx, inverse(order))

    def decompress(self, tensor: torch.Tensor, ctx):
        inner_ctx, back = ctx
        if back is not None:
            tensor = tensor.permute(back)
        return self.inner.decompress(tensor, inner_ctx)


def _relayout(t: torch.Tensor, stride: tuple[int, ...]) -> torch.Tensor:
    out = torch.empty_strided(t.size(), stride, dtype=t.dtype, device=t.device)
    return out.copy_(t)


@contextmanager
def default_layout(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Iterator[None]:
    """Within the block, every parameter of ``model`` and every tensor in ``optimizer``'s state
    is default-contiguous; afterwards each parameter has its strides from before the block
    and each state tensor shaped like its parameter has the parameter's strides (state created
    inside the block, e.g. by a joiner's first ``broadcast_optimizer_state``, included).
    Parameters stay the same ``Parameter`` objects (``.data`` is replaced), so the optimizer
    and Horovod's gradient hooks still hold them."""
    strides = {}
    for p in model.parameters():
        if not p.is_contiguous():
            strides[p] = p.stride()
            p.data = p.data.contiguous()
    _state_contiguous(optimizer)
    try:
        yield
    finally:
        for p, stride in strides.items():
            p.data = _relayout(p.data, stride)
        _state_like_params(optimizer)


def _state_contiguous(optimizer) -> None:
    for st in optimizer.state.values():
        for k, v in st.items():
            if torch.is_tensor(v) and not v.is_contiguous():
                st[k] = v.contiguous()


def _state_like_params(optimizer) -> None:
    for p, st in optimizer.state.items():
        for k, v in st.items():
            if torch.is_tensor(v) and v.shape == p.shape and v.stride() != p.stride():
                st[k] = _relayout(v, p.stride())
