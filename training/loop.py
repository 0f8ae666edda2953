"""The elastic training loop on horovod.torch, shared by the MNIST and ResNet50 commands.

``run(task, args) -> int`` (``args``: the run's frozen ``training.options.TrainConfig``)
builds the model and optimizer (and the CUDA context) before
initialising Horovod, so that a worker joining a running job can do that while the others
train (when the driver starts it before it stops the world, a join costs the world only the
rendezvous and the state sync), and trains under ``hvd.elastic.run`` until ``--epochs``
are done; it returns 0 then. The first world resumes from the newest committed state any
worker holds: a host's local snapshot (``--snapshot-dir``, written after commits) or the
newest checkpoint in ``--checkpoint-dir``, ordered by (generation, epoch, samples); the holder
hands it to rank 0 and the state sync to the others (``Trainer.agree``). A SIGTERM makes the
worker leave right after its next commit with exit code 143 (rank 0 first writes a
checkpoint when it has a checkpoint directory); the other workers carry on.

Checkpoints (rank 0) are written at every epoch's end, every ``--checkpoint-every`` steps or
minutes, on SIGUSR1 and on SIGTERM, always from a commit's state; all but the SIGTERM one in
a background thread from the copies the commit made (``training.background``,
``training.snapshots``), at most one in flight; a failed one is reported, not fatal. Each run
writes under its own generation, taken at start (``training.checkpoint``: fencing).

Elastic contract, per step of an epoch:

- the ``StepSampler`` in the ``TorchState`` plans the rest of the epoch for the current
  world; every rank runs the same number of steps; a rank's loss is weighted by
  ``world / samples in the step`` so the averaged gradient is the step's mean gradient
  whatever the local batch sizes (an empty local batch contributes zeros);
- the learning rate is set every step from ``schedule.learning_rate`` (world-size scaled,
  warm-up); on entry after a reset that grew the world, a ramp from the old rate to the new
  one is started (``schedule.resize_ramp``, kept in the state: ``world``, ``lr_ramp``);
- a checkpoint records the run's settings; resuming checks them (``checkpoint.resume_action``:
  another seed is refused, another sample list restarts the epoch);
- every ``--commit-every`` steps: the epoch's loss/accuracy sums are allreduced into the
  state, the state is saved, the trace is written, then hosts updates are checked (which
  may raise ``HostsUpdatedInterrupt`` and re-enter with the new world);
- every ``--host-check-every`` steps between commits: host updates and pending SIGTERMs are
  checked (two tiny collectives); either one commits first, so nothing trained is lost;
- a lost worker raises ``HorovodInternalError`` in the others: they restore the last
  commit, re-plan the epoch's remaining samples and go on.

Samples/s are timed over the training steps (commits included) only, in total and per
worker (per GPU). At an epoch's end: floating buffers (BatchNorm statistics) are averaged over the ranks,
validation accuracy is computed on a sharded validation split, and rank 0 writes the
epoch metrics record and a checkpoint.

GPU path (CUDA, or ``--debug-gpu-path`` on the CPU, where only the device differs): mixed
precision of ``--amp-dtype`` (fp16 with a gradient scaler whose state is part of the elastic
state from the start, bf16 without), channels_last for models that want it (made safe for
Horovod by ``training.layout``), ``cudnn.benchmark``, persistent loading processes started by
forkserver (``training.loaders``). The elastic state is a ``training.state.TrainingState``.
A ``Task`` with ``normalize`` gets uint8 image batches from its loading processes and
normalises them on the training device in one step (``training.datasets.Normalizer``: into
the mixed-precision type and channels_last on the GPU path, fp32 otherwise).
With ``--augment-on-device`` (a ``Task`` with ``augment_size``) the loading processes only
read the encoded images and ``training.device_augment`` decodes and augments each batch on
the training device, from a random stream seeded per rank like the rest.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time
from collections.abc import Callable, Iterable, Sized
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from training import checkpoint, cpus, fingerprint, loaders, metrics, snapshots
from training.background import BackgroundWriter
from training.errors import CheckpointError, ConfigError, DeviceError
from training.layout import LayoutCompression
from training.options import TrainConfig
from training.schedule import learning_rate, ramped, resize_ramp
from training.seeding import stream_seed
from training.signals import EXIT_TERM, StopFlags, leave
from training.trace import Tracer, dynamo_imported, params_checksum, process_start


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
    return env_hint("HOROVOD_LOCAL_RANK", 0, 0)


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


class Trainer:
    """Holds the pieces of one worker's training; ``train`` is run under hvd.elastic.run.

    Built in two parts so that a joining worker does its heavy set-up while the running
    world still trains: the constructor needs no rank and runs *before*
    ``hvd.init()`` (device and CUDA context, model, plain optimizer and its lazy imports,
    gradient scaler, sampler); ``attach(hvd)`` runs after it (Horovod's optimizer wrapper,
    loading processes' count, the checkpoint, which only rank 0 reads, and the state)."""

    def __init__(self, task: Task, args: TrainConfig, flags: StopFlags, tracer: Tracer | None = None):
        self.task, self.args, self.flags = task, args, flags
        self.hvd: Any = None  # horovod.torch, set by attach after hvd.init()
        self.cuda = use_cuda(args)
        self.gpu_path = gpu_path(args)
        self.amp = self.gpu_path and not args.no_amp
        self.amp_dtype = AMP_TYPES[args.amp_dtype]
        self.channels_last = self.gpu_path and task.channels_last
        # loading processes: set by warm_up before hvd.init() from the slots horovodrun
        # started this worker for, else by attach from the first world's local size
        self.workers: int | None = None
        # started by warm_up (or at first use), then kept
        self._train_loader: DataLoader | None = None
        self._train_plan: loaders.Planned | None = None
        self._val: tuple[loaders.ShardBatches, DataLoader] | None = None  # validation plan, loader
        self.collate = None
        if task.augment_size is not None:
            from training.device_augment import collate_bytes

            self.collate = collate_bytes
        # pinned host memory speeds up copies of decoded batches; encoded bytes are read by
        # the decoder from host memory, so that path is not pinned
        self.pin = self.cuda and task.augment_size is None
        self._tick: float | None = None  # start of the training time not yet committed
        self.writer = metrics.MetricsWriter(args.metrics_file)
        self.tracer = tracer or Tracer(args.trace_dir)
        self.n = dataset_size(task.train_set)
        self._pending: list[int] = []
        self._pending_count = 0
        self._samples_hash: str | None = None
        self._stepped = False  # this process made an optimizer step
        # the world's state is in this process's memory (it entered training once)
        self._live = False
        self._offer_paths: dict[str, Path] = {}
        # pod-local snapshots (``--snapshot-every``) and background writers: at most one
        # write in flight each, so the local one never queues behind shared storage
        self.local: snapshots.LocalStore | None = None
        self.local_writer = BackgroundWriter("snapshot")
        self.ckpt_writer = BackgroundWriter("checkpoint")
        self._commits = 0
        self._ckpt_steps = 0  # steps trained since the last checkpoint was submitted
        self._ckpt_time = time.monotonic()  # when it was submitted
        self.prepare(torch.device("cuda", local_rank_hint()) if self.cuda else torch.device("cpu"))

    # -- setup -------------------------------------------------------------------------
    def prepare(self, device: torch.device) -> None:
        """Everything on ``device`` that needs no rank: the CUDA context, the model (seeded by
        ``--seed``), a plain SGD optimizer with its first-step imports done, the gradient
        scaler, the on-device augmentation and the sampler (planned by ``attach``)."""
        from training.sampler import StepSampler

        args = self.args
        self.device = device
        if device.type == "cuda":
            from training.cuda_arch import device_mismatch

            mismatch = device_mismatch(torch, device.index or 0)
            if mismatch:  # else the first kernel fails, and the host is blacklisted
                raise DeviceError(mismatch)
            torch.cuda.set_device(device)
            torch.cuda.init()  # the CUDA context, now rather than in the rendezvous
        self.augment = None
        if self.task.augment_size is not None:
            from training.device_augment import DeviceAugment

            self.augment = DeviceAugment(self.task.augment_size, device)
            self.augment.self_check()  # DeviceError naming the cause, before any training
        self.normalizer = None
        if self.task.normalize is not None:
            from training.datasets import Normalizer

            mean, std = self.task.normalize
            # the input in the type autocast would cast it to, in the model's layout
            self.normalizer = Normalizer(mean, std, device,
                                         self.amp_dtype if self.amp else torch.float32,
                                         channels_last=self.channels_last)
        self._pending_loss = torch.zeros((), dtype=torch.float64, device=device)
        self._pending_correct = torch.zeros((), dtype=torch.int64, device=device)
        torch.manual_seed(args.seed)
        model = self.task.build_model().to(device)
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        opt = torch.optim.SGD(param_groups(model, args.weight_decay, args.norm_weight_decay),
                              lr=args.lr, momentum=args.momentum)
        warm_up_optimizer(opt)
        self.model = model
        self.opt: Any = opt  # hvd.DistributedOptimizer's class once attached
        use_scaler = self.amp and args.amp_dtype == "fp16"
        self.scaler = torch.amp.GradScaler(device.type) if use_scaler else None
        self.sampler = StepSampler(self.n, args.batch_size, seed=args.seed)

    def attach(self, hvd):
        """After ``hvd.init()``: wrap the optimizer for Horovod and return the elastic state,
        fresh; the state sync that ``hvd.elastic.run`` does before training first agrees on
        the newest committed state a rank holds and hands it to every rank (``agree``)."""
        from training.state import TrainingState

        self.hvd, args = hvd, self.args
        if self.cuda and self.device.index != hvd.local_rank():
            log(f"local rank {hvd.local_rank()} is not HOROVOD_LOCAL_RANK {self.device.index}: "
                "setting up again on its GPU")
            self.prepare(torch.device("cuda", hvd.local_rank()))
        if self.workers is None:
            self.workers = self.loader_workers(hvd.local_size())
        compression = hvd.Compression.fp16 if self.fp16_allreduce() else hvd.Compression.none
        self.opt = hvd.DistributedOptimizer(self.opt, named_parameters=self.model.named_parameters(),
                                            compression=LayoutCompression(compression))
        fields = {"epoch": 0, "batch": 0, "resets": 0, "stats": (0.0, 0, 0),
                  "clock": (0.0, 0.0), "mark": (0.0, 0, 0),
                  # the world size the rate was last set for (0: none yet) and the ramp
                  # after a scale-up (``training.schedule``), the same on every rank
                  "world": 0, "lr_ramp": None,
                  # images the device decoder rejected and the CPU decoded, job total
                  "decode_fallbacks": 0,
                  # the scaler's state belongs to the state from the start: a failure before
                  # the first commit must roll every rank back to the same scale
                  "scaler_state": self.scaler.state_dict() if self.scaler else None}
        # this run's checkpoint generation (``training.checkpoint``: fencing), taken by rank 0
        # when a world starts from nothing in memory (``agree``), the same on every rank
        fields["generation"] = 0
        fields["token"] = ""  # the random token its marker holds (ties local snapshots to it)
        # rank 0's refusal to resume (another --seed, a checkpoint that does not fit) must end
        # every rank: it travels in the state, and every rank raises it after the sync
        fields["refused"] = None
        self.sampler.load_state_dict({"epoch": 0, "processed_num": 0})
        state = TrainingState(model=self.model, optimizer=self.opt, sampler=self.sampler, **fields)
        state.register_reset_callbacks([lambda: self.on_reset(state)])
        state.before_sync = lambda: self.agree(state)
        state.before_restore = lambda: self.before_restore(state)
        if args.checkpoint_dir and args.snapshot_every:
            self.local = snapshots.LocalStore(snapshots.default_dir(
                args.snapshot_dir, args.checkpoint_dir, self.task.name))
            self.local.clean_temporary()
        return state

    def loader_workers(self, workers_on_host: int) -> int:
        """Loading processes: ``--workers``, else this worker's share of the host's CPUs."""
        if self.args.workers is not None:
            return self.args.workers
        return loaders.default_workers(self.gpu_path, workers_on_host, cpus.usable_cpus(),
                                       cpus.cgroup_cpu_limit())

    def warm_up(self) -> None:
        """Before ``hvd.init()`` (``training.warmup``): start the training loader's processes
        (as many as this host's slots, ``HOROVOD_LOCAL_SIZE``, make each worker's share),
        have each load one batch, and on the GPU path run the first of them through
        ``to_device`` and one forward and backward pass (cuDNN autotunes for the training's
        shape). Nothing to do on the CPU path without loading processes. Trace events:
        ``loaders-ready`` (``workers``, ``batches``), ``first-batch``, ``autotuned``."""
        from training.warmup import autotune_pass

        self.workers = self.loader_workers(env_hint("HOROVOD_LOCAL_SIZE", 1, 1))
        if self.workers == 0 and not self.cuda:
            return
        if self.n == 0:
            return
        loader = self.train_loader()
        assert self._train_plan is not None
        count = max(1, self.workers)
        with self._train_plan.instead(loaders.warm_batches(self.n, self.args.batch_size, count)):
            batches = iter(loader)
            first = next(batches)
            for _ in batches:  # one batch from every loading process
                pass
        self.tracer.event("loaders-ready", workers=self.workers, batches=count)
        x, y = self.to_device(first, train=True)
        self.tracer.event("first-batch", shape=list(x.shape))
        if self.gpu_path:
            with cudnn_autotune(True):
                autotune_pass(self.model, x, y, self.amp, self.amp_dtype)
            self.tracer.event("autotuned", cudnn=self.device.type == "cuda"
                              and torch.backends.cudnn.benchmark)

    def fp16_allreduce(self) -> bool:
        """Compress gradients to fp16: ``--allreduce-dtype fp16`` or ``--fp16-allreduce``, or
        ``auto`` on the GPU path with fp16 mixed precision (the scaled gradients fit fp16,
        an overflow is an inf the gradient scaler skips). Not with bf16: Horovod 0.28.1
        cannot allreduce bfloat16, and fp16 without a loss scale flushes small gradients."""
        a = self.args
        if a.fp16_allreduce or a.allreduce_dtype == "fp16":
            return True
        return a.allreduce_dtype == "auto" and self.amp and a.amp_dtype == "fp16"

    # -- which state a world starts from ---------------------------------------------------
    def offer(self) -> snapshots.Offer:
        """What this rank can start a world from: the world's state in memory (live), else
        the newest of its host's local snapshot and (rank 0) the shared checkpoint."""
        self._offer_paths = {}
        if self._live:
            return (1, -1, -1, -1, "live", "")
        best: tuple[snapshots.Key, str] | None = None
        token = ""
        try:
            if self.local is not None and (found := self.local.best()) is not None:
                best = found[0], "local"
                self._offer_paths["local"] = found[1]
                token = self.local.token(found[1])
        except CheckpointError as exc:
            log(f"error: {exc}")
        if self.args.checkpoint_dir and self.hvd.rank() == 0:
            try:
                shared = checkpoint.latest_key(self.args.checkpoint_dir)
            except CheckpointError:
                shared = None  # reported when rank 0 claims its generation
            if shared is not None:
                self._offer_paths["shared"] = shared[1]
                if best is None or shared[0] >= best[0]:  # the durable one among equals
                    best = shared[0], "shared"
        if best is None:
            return (0, -1, -1, -1, "", "")
        (gen, epoch, processed), source = best
        return (0, gen, epoch, processed, source, token if source == "local" else "")

    def valid_offers(self, offers: list[tuple]) -> list[tuple]:
        """Rank 0: ``offers`` with every local snapshot whose generation marker in
        ``--checkpoint-dir`` does not hold its token left out (a snapshot of a checkpoint
        directory emptied and used again, or of another job at the same path)."""
        out = []
        for o in offers:
            if o[4] == "local" and (not self.args.checkpoint_dir or checkpoint.generation_token(
                    self.args.checkpoint_dir, o[1]) != o[5]):
                log(f"a local snapshot of generation {o[1]} does not belong to "
                    f"{self.args.checkpoint_dir}: not used")
                o = (0, -1, -1, -1, "", "")
            out.append(o)
        return out

    def agree(self, state) -> None:
        """Before every state sync, on every rank: agree on the state this world starts from
        (one allgather of each rank's ``offer``, ``snapshots.choose``). A world with a live
        rank keeps its state (when that rank is not rank 0, it hands its committed state to
        rank 0). A world started from nothing in memory takes a new checkpoint generation
        (rank 0) and the newest committed state any rank holds on disk: the holder sends it to
        rank 0, which loads it; the sync that follows hands it to every other rank. Rank 0's
        refusal (another --seed, a file that does not fit) travels in ``state.refused``."""
        hvd = self.hvd
        rank = hvd.rank()
        offers = [tuple(o) for o in hvd.allgather_object(self.offer())]
        choice = snapshots.choose(offers)
        if choice is not None and choice[1] == "live":
            root = choice[0]
            if root != 0:  # a rank that trained in this run hands its state to rank 0
                held: bytes | None = None
                if rank == root:
                    buf = io.BytesIO()
                    torch.save(snapshots.to_cpu(self.payload(state)), buf)
                    held = buf.getvalue()
                held = hvd.broadcast_object(held, root_rank=root, name="training.handoff")
                if rank == 0:
                    try:
                        payload = self.apply(state, held, f"rank {root}'s state")
                        state.generation = int(payload.get("generation", 0))
                        state.token = str(payload.get("token", ""))
                    except (ConfigError, CheckpointError) as exc:
                        state.refused = (type(exc).__name__, str(exc))
                    state.save()
            return
        # nothing in memory: rank 0 checks the snapshots against the checkpoint directory,
        # decides, and takes this run's generation
        if rank == 0:
            choice = snapshots.choose(self.valid_offers(offers))
        choice = hvd.broadcast_object(choice, root_rank=0, name="training.choice")
        if rank == 0 and self.args.checkpoint_dir:
            try:
                state.generation, state.token = checkpoint.claim(self.args.checkpoint_dir)
            except CheckpointError as exc:
                state.refused = (type(exc).__name__, str(exc))
        if choice is None:
            if rank == 0:
                state.save()
            return
        root, source = choice
        data: tuple[str, bytes] | None = None
        if root != 0:
            if rank == root:
                path = self._offer_paths[source]
                try:
                    data = (str(path), Path(path).read_bytes())
                    self.tracer.event("checkpoint-read", rank=rank, path=str(path))
                except OSError as exc:
                    log(f"error: cannot read {path}: {exc.strerror}")
            data = hvd.broadcast_object(data, root_rank=root, name="training.handoff")
            if rank != 0:
                return
            if data is None and "shared" in self._offer_paths:
                root, source = 0, "shared"  # the holder could not read it: rank 0's own
        if rank != 0:
            return
        try:
            loaded: tuple[dict, str, str] | None = None
            try:
                if root == 0:
                    path = self._offer_paths[source]
                    self.tracer.event("checkpoint-read", rank=rank, path=str(path))
                    loaded = checkpoint.load(path), describe(source, path), path.name
                elif data is not None:
                    where, raw = data
                    loaded = (checkpoint.load_bytes(raw, where),
                              f"rank {root}'s {describe(source, where)}", Path(where).name)
            except CheckpointError as exc:
                if source == "shared" or "shared" not in self._offer_paths:
                    raise
                # a damaged local snapshot: the shared checkpoint is the next newest state
                log(f"error: {exc}; resuming from the shared checkpoint instead")
                path = self._offer_paths["shared"]
                self.tracer.event("checkpoint-read", rank=rank, path=str(path))
                loaded = checkpoint.load(path), str(path), path.name
            if loaded is not None:
                self.apply(state, loaded[0], loaded[1], name=loaded[2])
        except (ConfigError, CheckpointError) as exc:
            state.refused = (type(exc).__name__, str(exc))
        state.save()

    def apply(self, state, payload: dict | bytes, where: str, name: str = "") -> dict:
        """Rank 0: load ``payload`` (a checkpoint dict, or its ``torch.save`` bytes) into the
        model, optimizer, sampler and state fields, and save the state (the sync that follows
        broadcasts it). ``CheckpointError`` / ``ConfigError`` when it does not fit this run."""
        if isinstance(payload, bytes):
            payload = checkpoint.load_bytes(payload, where)
        pos = checkpoint.position(name) if name else None
        epoch = int(payload.get("epoch", pos[0] if pos else 0))
        processed = int(payload.get("processed", pos[1] if pos else 0))
        if payload.get("task") != self.task.name or payload.get("dataset_size") != self.n:
            raise CheckpointError(
                f"{where} is from {payload.get('task')} on {payload.get('dataset_size')} samples, "
                f"not {self.task.name} on {self.n}")
        try:
            self.model.load_state_dict(payload["model"])
            self.opt.load_state_dict(payload["optimizer"])
        except (RuntimeError, KeyError, ValueError) as exc:
            raise CheckpointError(f"{where} does not fit the model: {exc}".splitlines()[0]) from exc
        saved = payload.get("settings")
        action, notes = checkpoint.resume_action(saved, self.run_settings(), where, processed)
        for note in notes:
            log(note)
        log(f"resuming from {where} (epoch {epoch + 1}, {processed} samples done)")
        stats = tuple(payload.get("stats", (0.0, 0, 0)))
        clock = tuple(payload.get("clock", (0.0, 0.0)))
        batch = int(payload.get("batch", 0))
        if action == checkpoint.RESTART_EPOCH:
            processed, batch, stats, clock = 0, 0, (0.0, 0, 0), (0.0, 0.0)
        ramp = payload.get("lr_ramp")
        fields = {"epoch": epoch, "batch": batch,
                  "decode_fallbacks": int(payload.get("decode_fallbacks", 0)),
                  "resets": int(payload.get("resets", 0)), "stats": stats, "clock": clock,
                  "mark": (clock[0], stats[2], batch),
                  "world": int(payload.get("world") or (saved or {}).get("world_size") or 0),
                  "lr_ramp": tuple(ramp) if ramp else None}
        if self.scaler is not None and payload.get("scaler_state"):
            fields["scaler_state"] = payload["scaler_state"]
        for k, v in fields.items():
            setattr(state, k, v)
        self.sampler.load_state_dict({"epoch": epoch, "processed_num": processed})
        state.save()
        return payload

    def run_settings(self) -> dict:
        """This run's settings as checkpoints record them (``checkpoint.settings``)."""
        if self._samples_hash is None:
            self._samples_hash = fingerprint.samples_sha256(self.task.train_set) or ""
        a = self.args
        return checkpoint.settings(a.seed, a.batch_size, a.lr, self.hvd.size(),
                                   self._samples_hash or None)

    def on_reset(self, state) -> None:
        """Reset callback: count the reset, drop uncommitted work, rescale the rate.

        The count is saved at once: the sync that follows a reset broadcasts rank 0's
        *saved* state, which would otherwise lose the increment.
        """
        state.resets += 1
        self._clear_pending()
        self.set_lr(state)
        state.save()

    # -- the elastic function ----------------------------------------------------------
    def train(self, state):
        """Train until ``--epochs`` are done (re-entered by hvd.elastic.run after resets)."""
        self.enter(state)
        while state.epoch < self.args.epochs:
            self.train_epoch(state)
            self.end_epoch(state)
        return state

    def enter(self, state) -> None:
        """(Re-)entering training with the synced state: this world's plan, the state's loss
        scale, this rank's random stream; leave now if a SIGTERM came during the reset."""
        hvd = self.hvd
        if state.refused:
            kind, message = state.refused
            raise (ConfigError if kind == "ConfigError" else CheckpointError)(message)
        self._live = True
        self.sampler.reset()
        self._clear_pending()
        self._tick = None
        self.follow_world(state)
        if self.scaler is not None and state.scaler_state is not None:
            self.scaler.load_state_dict(state.scaler_state)
        seed = stream_seed(self.args.seed, hvd.rank(), state.epoch, state.resets)
        torch.manual_seed(seed)
        if self.augment is not None:
            self.augment.reseed(seed)
        self.check_signals(state)
        self.tracer.worker(rank=hvd.rank(), size=hvd.size(), epoch=state.epoch,
                           resets=state.resets,
                           loss_scale=self.scaler.get_scale() if self.scaler else None)
        if hvd.rank() == 0:
            log(f"training at world size {hvd.size()} from epoch {state.epoch + 1}, "
                f"{self.sampler.processed_num}/{self.n} samples done, {state.resets} resets")

    def train_loader(self) -> DataLoader:
        """The training loader (persistent processes on the GPU path), planned by the sampler."""
        if self._train_loader is None:
            # the processes' seeds: this worker's own stream (per rank), whenever started
            seeds = torch.Generator().manual_seed(
                stream_seed(self.args.seed, env_hint("HOROVOD_RANK", 0, 0), -1, 0))
            self._train_plan = loaders.Planned(self.sampler)
            self._train_loader = loaders.make_loader(self.task.train_set, self._train_plan,
                                                     self.workers or 0, pin_memory=self.pin,
                                                     collate_fn=self.collate, generator=seeds)
        return self._train_loader

    def train_epoch(self, state) -> None:
        """The epoch's remaining steps. On the GPU path with ``--augment-on-device`` batch
        k+1 is decoded and augmented in a thread (on a side CUDA stream) during step k
        (``training.prefetch``); the thread is stopped before this returns or raises."""
        batches = iter(self.train_loader()) if len(self.sampler) else iter(())
        if self.augment is not None and self.gpu_path:
            from training.prefetch import Prefetcher

            with Prefetcher(batches, lambda b: self.to_device(b, train=True), self.device) as ready:
                self._train_steps(state, ready, prepared=True)
        else:
            self._train_steps(state, batches, prepared=False)

    def _train_steps(self, state, batches, prepared: bool) -> None:
        steps = self.sampler.steps
        self._tick = time.monotonic()
        first = True
        last = len(steps) - 1 if state.epoch == self.args.epochs - 1 else -1
        for i, step in enumerate(steps):
            self.debug_wait(state, self.args.debug_pause_file)
            if i == last:
                self.debug_wait(state, self.args.debug_hold_file)
            batch = None
            if step.indices:
                batch = next(batches) if prepared else self.to_device(next(batches), train=True)
            if first and batch is not None:
                self.tracer.inputs(epoch=state.epoch, rank=self.hvd.rank(), indices=step.indices,
                                   batch=batch[0])
                first = False
            self.set_lr(state)
            self.train_step(batch, step.total)
            self.sampler.record_step(step)
            self._ckpt_steps += 1
            self._pending.extend(step.indices)
            state.batch += 1
            self.debug_delay()
            self.after_step(state)
        if steps and state.batch % self.args.commit_every != 0:
            self.commit(state)
        self._tick = None  # what follows (BN averaging, validation, checkpoint) is not training

    def after_step(self, state) -> None:
        """Commit every ``--commit-every`` steps; in between, every ``--host-check-every``
        steps, commit early (and so check hosts) when a rank is leaving on SIGTERM, else
        check for host changes and commit before the reset they cause."""
        a = self.args
        if state.batch % a.commit_every == 0:
            self.commit(state)
        elif state.batch % a.host_check_every == 0:
            if self.any_leaving():
                self.commit(state)
                return
            self.check_host_updates(state)

    def check_host_updates(self, state) -> None:
        """Raise HostsUpdatedInterrupt on a host change, after committing what was trained
        since the last commit (a collective: every rank must call it)."""
        from horovod.common.exceptions import HostsUpdatedInterrupt

        try:
            state.check_host_updates()
        except HostsUpdatedInterrupt:
            self.commit(state, check_hosts=False)  # keep what was trained since the last
            raise

    def any_leaving(self) -> bool:
        """Whether any rank got a SIGTERM (a collective: every rank must call it)."""
        flag = torch.tensor([1.0 if self.flags.term else 0.0])
        return float(self.hvd.allreduce(flag, op=self.hvd.Max, name="training.leaving")[0]) > 0

    def debug_wait(self, state, path: str | None) -> None:
        """Wait while the file at ``path`` exists, every rank alike (decided together by an
        allreduce), checking for host changes meanwhile: ``--debug-pause-file`` before every
        step, ``--debug-hold-file`` before the run's last step, so a test's scale-up or fault
        lands where it means it to however slowly a joiner starts."""
        while path:
            here = torch.tensor([1.0 if os.path.exists(path) else 0.0])
            if float(self.hvd.allreduce(here, op=self.hvd.Max, name="training.hold")[0]) == 0:
                return
            time.sleep(self.args.debug_step_delay or 0.05)
            self.check_host_updates(state)

    def debug_delay(self) -> None:
        a = self.args
        if a.debug_step_delay and (not a.debug_hold_file or os.path.exists(a.debug_hold_file)):
            time.sleep(a.debug_step_delay)

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

    # -- commits -----------------------------------------------------------------------
    def commit(self, state, after_save: Callable[[], None] | None = None,
               check_hosts: bool = True) -> None:
        """Fold the epoch's statistics and training time into the state, save it, trace,
        leave on SIGTERM, check host updates (unless ``check_hosts`` is false)."""
        hvd = self.hvd
        if self._tick is not None:
            now = time.monotonic()
            seconds, worker_seconds = state.clock
            state.clock = (seconds + now - self._tick,
                           worker_seconds + (now - self._tick) * hvd.size())
            self._tick = now
        fallbacks = self.augment.take_fallbacks() if self.augment is not None else 0
        # the last element counts the ranks leaving on SIGTERM after this commit: rank 0
        # writes the world's state then even when its own SIGTERM has not come yet (a drain
        # signals every rank, a few ms apart; the first to leave fails the others' next
        # collective, and a rank 0 caught there could not write it any more)
        sums = torch.tensor([float(self._pending_loss), float(self._pending_correct),
                             float(self._pending_count), float(fallbacks),
                             1.0 if self.flags.term else 0.0], dtype=torch.float64)
        sums = hvd.allreduce(sums, op=hvd.Sum, name="training.stats")
        peers_leaving = float(sums[4]) > 0 and not self.flags.term
        loss, correct, count = state.stats
        state.stats = (loss + float(sums[0]), correct + int(sums[1]), count + int(sums[2]))
        state.decode_fallbacks += int(sums[3])
        if self.scaler is not None:
            state.scaler_state = self.scaler.state_dict()
        self.maybe_progress(state)
        state.save()
        report_progress()
        self.tracer.samples(state.epoch, self._pending, size=hvd.size(), rank=hvd.rank(),
                            processed=self.sampler.processed_num)
        self._clear_pending()
        self.keep_committed(state)
        if after_save is not None:
            after_save()
        if self.flags.checkpoint or peers_leaving:
            self.flags.checkpoint = False
            if hvd.rank() == 0 and self.args.checkpoint_dir:
                self.write_checkpoint(state, wait=True)
        if self._tick is not None:  # waiting for a write is not training time
            self._tick = time.monotonic()
        self.check_signals(state)
        if check_hosts:
            state.check_host_updates()

    def _clear_pending(self) -> None:
        self._pending = []
        self._pending_loss.zero_()
        self._pending_correct.zero_()
        self._pending_count = 0
        if self.augment is not None:
            self.augment.take_fallbacks()

    def maybe_progress(self, state) -> None:
        every = self.args.log_every
        t0, s0, b0 = state.mark
        if not every or state.batch - b0 < every:
            return
        seconds = state.clock[0]
        if self.hvd.rank() == 0:
            loss, correct, count = state.stats
            rate = metrics.rate(count - s0, seconds - t0)
            self.emit(metrics.record(
                "progress", time=time.time(), epoch=state.epoch + 1, batch=state.batch,
                world_size=self.hvd.size(), samples=count, samples_per_sec=rate,
                samples_per_sec_per_worker=rate / self.hvd.size(), loss_sum=loss,
                correct=correct, lr=self.opt.param_groups[0]["lr"], resets=state.resets,
                decode_fallbacks=self.fallbacks_metric(state)))
        state.mark = (seconds, state.stats[2], state.batch)

    def fallbacks_metric(self, state) -> int | None:
        """The job's CPU decode fallbacks so far (``--augment-on-device`` only, else None)."""
        return state.decode_fallbacks if self.augment is not None else None

    def end_epoch(self, state) -> None:
        hvd = self.hvd
        self.average_buffers()
        val = self.validate()
        loss, correct, count = state.stats
        seconds, worker_seconds = state.clock
        rec = metrics.record(
            "epoch", time=time.time(), epoch=state.epoch + 1, batch=state.batch,
            world_size=hvd.size(), samples=count, samples_per_sec=metrics.rate(count, seconds),
            samples_per_sec_per_worker=metrics.rate(count, worker_seconds),
            loss_sum=loss, correct=correct, lr=self.opt.param_groups[0]["lr"],
            resets=state.resets, val_accuracy=val, decode_fallbacks=self.fallbacks_metric(state))
        state.epoch += 1
        self.sampler.set_epoch(state.epoch)
        state.batch = 0
        state.stats = (0.0, 0, 0)
        state.clock = (0.0, 0.0)
        state.mark = (0.0, 0, 0)

        def publish():
            if hvd.rank() == 0:
                self.emit(rec)
                if self.args.checkpoint_dir:
                    self.write_checkpoint(state, wait=True)
        self.commit(state, after_save=publish)

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

    # -- output ------------------------------------------------------------------------
    def emit(self, rec: metrics.MetricsRecord) -> None:
        self.writer.open().write(rec)

    def payload(self, state) -> dict:
        """The last commit's state as a checkpoint dict (tensors where the commit left them)."""
        return snapshots.payload(state.committed(state.generation), self.task.name, self.n,
                                 self.run_settings())

    def keep_committed(self, state) -> None:
        """Right after a commit: the local snapshot (every ``--snapshot-every`` commits, on
        each host's local rank 0; it waits for the previous one, so at most one is in flight
        and a launcher loss loses at most a commit interval), and on rank 0 the periodic
        checkpoint when ``--checkpoint-every`` is due (skipped while the previous one is
        still being written: it is tried again at the next commit). Both are written in the
        background from the commit's own copies."""
        hvd, a = self.hvd, self.args
        self._commits += 1
        if (self.local is not None and hvd.local_rank() == 0
                and self._commits % a.snapshot_every == 0):
            self.local_writer.wait()
            data, store = self.payload(state), self.local
            key, token = (data["generation"], data["epoch"], data["processed"]), state.token
            self.local_writer.submit(lambda: store.write(snapshots.to_cpu(data), key, token),
                                     f"local snapshot in {store.dir}")
        if hvd.rank() == 0 and a.checkpoint_dir and self.checkpoint_due():
            self.write_checkpoint(state, wait=False)

    def checkpoint_due(self) -> bool:
        every = self.args.checkpoint_every
        if every.steps is not None:
            return self._ckpt_steps >= every.steps
        return every.seconds is not None and time.monotonic() - self._ckpt_time >= every.seconds

    def write_checkpoint(self, state, wait: bool = True, background: bool = True) -> None:
        """Write the last commit's state as a checkpoint in ``--checkpoint-dir`` (callers
        check there is one). ``wait``: after the write in flight, if any (else skipped while
        one is); ``background``: in the writer's thread (else here, after it). A failed
        write is reported and training goes on."""
        directory = self.args.checkpoint_dir
        if directory is None:
            raise CheckpointError("no --checkpoint-dir to write a checkpoint to")
        data = self.payload(state)
        keep = self.args.keep_checkpoints

        def write() -> None:
            path = checkpoint.save(directory, snapshots.to_cpu(data), data["epoch"],
                                   data["processed"], keep=keep, generation=data["generation"])
            log(f"checkpoint {path}")

        if wait:
            self.ckpt_writer.wait()
        elif self.ckpt_writer.busy():
            return
        self._ckpt_steps, self._ckpt_time = 0, time.monotonic()
        if background:
            self.ckpt_writer.submit(write, "checkpoint")
        else:
            write()

    def wait_writes(self, timeout: float | None = None) -> None:
        """Wait for the background writes in flight (at most ``timeout`` seconds each)."""
        self.ckpt_writer.wait(timeout)
        self.local_writer.wait(timeout)

    def before_restore(self, state) -> None:
        """A collective failed (or a reset's init did): wait for the writes in flight, and
        with a SIGTERM pending leave now, before the reset (rank 0 writes the last commit's
        state first): a rank whose peers left on the same drain would otherwise wait in the
        next world's rendezvous until its grace timer ends it."""
        self.wait_writes()
        self.check_signals(state)

    def check_signals(self, state) -> None:
        """After a SIGTERM, leave now: called right after a commit (or on entry after a
        reset), so the survivors lose no step and the trace matches the saved state; rank 0
        writes that state as a checkpoint first, after the background write in flight
        (waits bounded by the grace left; past it the grace timer ends the process)."""
        if not self.flags.term:
            return
        remaining = self.flags.remaining()
        self.wait_writes(remaining)
        if self.hvd.rank() == 0 and self.args.checkpoint_dir:
            try:
                self.write_checkpoint(state, wait=False, background=False)
            except CheckpointError as exc:
                log(f"error: {exc}")
        self.writer.close()
        leave(EXIT_TERM, f"SIGTERM: rank {self.hvd.rank()} leaves the job")

    def finish(self, state) -> None:
        self.wait_writes()
        self.tracer.final(rank=self.hvd.rank(), size=self.hvd.size(), epochs=state.epoch,
                          params_sha256=params_checksum(self.model), resets=state.resets)
        self.writer.close()


def run(task: Task, args: TrainConfig) -> int:
    """Train ``task`` as one Horovod worker; 0 when all epochs are done.

    What needs no rank is done before ``hvd.init()`` (``Trainer``, ``Trainer.warm_up``): a
    worker that joins a running job waits in ``hvd.init()`` only once its model, optimizer,
    device, loading processes and convolution kernels are ready."""
    flags = StopFlags(grace=args.term_grace).install()
    tracer = Tracer(args.trace_dir)
    tracer.event("start", process_start=process_start())
    import horovod.torch as hvd

    if gpu_path(args):
        torch.backends.cudnn.benchmark = True  # fixed input shapes: let cuDNN pick kernels
    from training.gpu_defaults import nccl_missing_line

    note = nccl_missing_line(gpu_path(args), bool(hvd.nccl_built()))
    if note:
        log(note)
    if not use_cuda(args) and not os.environ.get("OMP_NUM_THREADS"):  # for the warm-up; set again below
        torch.set_num_threads(cpus.threads_per_worker(env_hint("HOROVOD_LOCAL_SIZE", 1, 1),
                                                      cpus.usable_cpus(), cpus.cgroup_cpu_limit()))
    trainer = Trainer(task, args, flags, tracer)
    tracer.event("prepared", dynamo=dynamo_imported())
    trainer.warm_up()  # loaders, a first batch, cuDNN's kernels: all before a joiner is ready
    tracer.event("init", dynamo=dynamo_imported())
    hvd.init()
    tracer.event("initialized", rank=hvd.rank(), size=hvd.size())
    if not use_cuda(args) and not os.environ.get("OMP_NUM_THREADS"):  # share the cores among this host's workers
        torch.set_num_threads(cpus.threads_per_worker(hvd.local_size(), cpus.usable_cpus(),
                                                      cpus.cgroup_cpu_limit()))
    state = trainer.attach(hvd)
    hvd.elastic.run(trainer.train)(state)
    trainer.finish(state)
    return 0
