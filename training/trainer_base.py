"""What the parts of ``training.loop.Trainer`` share: the ``Task`` a command trains, the
device and environment helpers, and ``TrainerParts``, the attributes every part may read.

``Trainer`` is one object built from parts with one job each, one module each:
``training.world`` (attach to a world, agree on the state it starts from, resets),
``training.step`` (one optimizer step, the batch on the device, the learning rate),
``training.evaluation`` (buffer averaging and validation) and ``training.checkpointing``
(snapshots, checkpoints and leaving on SIGTERM); ``training.loop`` keeps the set-up before
``hvd.init()``, the elastic function with its commits, and ``run``. The parts share one
state (``TrainerParts``' attributes, set by ``Trainer.__init__``, ``prepare`` and ``attach``)
and call one another's methods through ``self``; none is used alone.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Sized
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader, Dataset

from shared.environment import HOROVOD_LOCAL_RANK
from training import loaders, metrics, snapshots
from training.background import BackgroundWriter
from training.options import TrainConfig
from training.signals import StopFlags
from training.trace import Tracer


def report_progress() -> None:
    """Tell the driver this rank committed, as Horovod's ``State.commit`` does (``commit``
    below saves and checks host updates itself, so it says it too): elastic-run's stall
    watchdog and the driver's liveness see a rank that trains steadily, with no reset, as
    making progress. Never blocks on the network and never raises (Horovod's contract)."""
    from horovod.common.elastic import notification_manager

    notification_manager.report_progress()


@dataclass
class Task:
    """What differs between the models: data, model factory and device preferences."""

    name: str
    train_set: Dataset
    val_set: Dataset | None
    build_model: Callable[[], torch.nn.Module]
    channels_last: bool = False
    # decode and augment on the device (``training.device_augment``) at this image size: the
    # datasets are then ``JpegBytesDataset``s
    augment_size: int | None = None
    # (mean, std) per channel when the loaders send uint8 images (``training.datasets``'
    # ``uint8_transforms``): the training process normalises each batch on its device
    normalize: tuple[tuple[float, ...], tuple[float, ...]] | None = None


def dataset_size(dataset: Dataset) -> int:
    """The number of samples of a map-style dataset; ``TypeError`` when it has no length."""
    if not isinstance(dataset, Sized):
        raise TypeError(f"{type(dataset).__name__} has no length: training needs a map-style dataset")
    return len(dataset)


def use_cuda(args: TrainConfig) -> bool:
    """Train on CUDA: a GPU is there and ``--no-cuda`` is not given."""
    return torch.cuda.is_available() and not args.no_cuda


def gpu_path(args: TrainConfig) -> bool:
    """Take the GPU code path: on CUDA, or on the CPU with ``--debug-gpu-path``."""
    return use_cuda(args) or bool(args.debug_gpu_path)


AMP_TYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def param_groups(model: torch.nn.Module, weight_decay: float, norm_weight_decay: float) -> list:
    """Optimizer groups: weights (2-D and up) with ``weight_decay``, every 1-D parameter
    (normalisation weights, biases) with ``norm_weight_decay``; empty groups left out."""
    decay = [p for p in model.parameters() if p.ndim > 1]
    other = [p for p in model.parameters() if p.ndim <= 1]
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": other, "weight_decay": norm_weight_decay}]
    return [g for g in groups if g["params"]]


@contextlib.contextmanager
def cudnn_autotune(enabled: bool):
    """``cudnn.benchmark`` only if ``enabled`` within the block (restored after): a short batch
    (an epoch's last, whose size changes with the world size) runs on cuDNN's heuristics
    instead of autotuning every convolution once more for its shape."""
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = before and enabled
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = before


def log(msg: str) -> None:
    """One line on stderr."""
    sys.stderr.write(f"training: {msg}\n")
    sys.stderr.flush()


def describe(source: str, path: str | Path) -> str:
    """How the resume names what it read: the checkpoint's path, or ``local snapshot <path>``."""
    return f"local snapshot {path}" if source == "local" else str(path)


def local_rank_hint() -> int:
    """This worker's local rank before ``hvd.init()``: ``HOROVOD_LOCAL_RANK``, set by
    horovodrun for each worker it starts (the slot it runs in, kept for the worker's life,
    which is what ``hvd.local_rank()`` returns after the rendezvous), else 0."""
    return env_hint(HOROVOD_LOCAL_RANK, 0, 0)


def env_hint(name: str, default: int, least: int) -> int:
    """An integer horovodrun sets for each worker it starts (``HOROVOD_RANK``,
    ``HOROVOD_LOCAL_SIZE``: the slot assignment it was started for), read before
    ``hvd.init()``; ``default`` when unset or not a number, at least ``least``."""
    try:
        return max(least, int(os.environ.get(name, str(default))))
    except ValueError:
        return default


def warm_up_optimizer(opt: torch.optim.Optimizer) -> None:
    """One step of an optimizer of ``opt``'s class and settings on a throwaway parameter on
    the same device: the lazy work of torch.optim's first step (importing ``torch._dynamo``,
    seconds of a worker's start-up) is done now. ``opt`` and the model are not touched."""
    device = opt.param_groups[0]["params"][0].device
    dummy = torch.zeros(1, device=device, requires_grad=True)
    dummy.grad = torch.zeros_like(dummy)
    type(opt)([dummy], **opt.defaults).step()


class TrainerParts:
    """The state the parts of ``Trainer`` share (annotations only: ``Trainer.__init__``,
    ``prepare`` and ``attach`` set them), and the methods one part calls in another."""

    task: Task
    args: TrainConfig
    flags: StopFlags
    hvd: Any  # horovod.torch, set by attach after hvd.init()
    cuda: bool
    gpu_path: bool
    amp: bool
    amp_dtype: torch.dtype
    channels_last: bool
    workers: int | None
    device: torch.device
    model: torch.nn.Module
    opt: Any  # hvd.DistributedOptimizer's class once attached
    scaler: torch.amp.GradScaler | None
    sampler: Any  # training.sampler.StepSampler (imports Horovod: not at import time)
    augment: Any  # training.device_augment.DeviceAugment or None
    normalizer: Any  # training.datasets.Normalizer or None
    collate: Callable | None
    pin: bool
    writer: metrics.MetricsWriter
    tracer: Tracer
    n: int
    local: snapshots.LocalStore | None
    local_writer: BackgroundWriter
    ckpt_writer: BackgroundWriter
    _val: tuple[loaders.ShardBatches, DataLoader] | None
    _pending_loss: torch.Tensor
    _pending_correct: torch.Tensor
    _pending_count: int
    _samples_hash: str | None
    _stepped: bool
    _live: bool
    _offer_paths: dict[str, Path]
    _commits: int
    _ckpt_steps: int
    _ckpt_time: float

    if TYPE_CHECKING:
        # defined by one part, called by others: declared for the type checker only, so
        # nothing here exists at run time (``Trainer`` inherits each from its part)
        def prepare(self, device: torch.device) -> None: ...
        def payload(self, state) -> dict: ...
        def set_lr(self, state) -> None: ...
        def rate(self, state, world: int) -> float: ...
        def to_device(self, batch, train: bool): ...
        def write_checkpoint(self, state, wait: bool = True, background: bool = True) -> None: ...
        def wait_writes(self, timeout: float | None = None) -> None: ...
        def check_signals(self, state) -> None: ...
        def run_settings(self) -> dict: ...
        def _clear_pending(self) -> None: ...
