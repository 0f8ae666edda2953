"""The elastic training loop on horovod.torch, shared by the MNIST and ResNet50 commands.

``run(task, args) -> int`` (``args``: the run's frozen ``training.options.TrainConfig``)
builds the model and optimizer (and the CUDA context) before
initialising Horovod, so that a worker joining a running job can do that while the others
train (when the driver starts it before it stops the world, a join costs the world only the
rendezvous and the state sync), and trains under ``hvd.elastic.run`` until ``--epochs``
are done; it returns 0 then. The first world resumes from the newest committed state any
worker holds: a host's local snapshot (``--snapshot-dir``, written after commits) or the
newest checkpoint in ``--checkpoint-dir``, ordered by (generation, epoch, samples); the holder
hands it to rank 0 and the state sync to the others (``Trainer.agree``, ``training.world``). A SIGTERM makes the
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
the training device, from a random stream seeded per rank like the rest. Either way the next
batch is made ready (copied, normalised; or decoded, augmented) on a side stream while the
step runs (``training.prefetch``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader

from training import cpus, loaders, metrics, snapshots
from training.background import BackgroundWriter
from training.checkpointing import CheckpointPart
from training.environment import HOROVOD_LOCAL_SIZE, HOROVOD_RANK, OMP_NUM_THREADS
from training.errors import CheckpointError, ConfigError, DeviceError
from training.evaluation import EvalPart
from training.options import TrainConfig
from training.sample_log import SampleLog
from training.seeding import stream_seed
from training.signals import StopFlags
from training.step import StepPart
from training.trace import Tracer, dynamo_imported, host_name, params_checksum, process_start

# the helpers live with the parts' shared state; their names are importable from here too
from training.trainer_base import (  # noqa: F401
    AMP_TYPES,
    Task,
    cudnn_autotune,
    dataset_size,
    describe,
    env_hint,
    gpu_path,
    local_rank_hint,
    log,
    param_groups,
    report_progress,
    use_cuda,
    warm_up_optimizer,
)
from training.world import WorldPart


class Trainer(WorldPart, StepPart, EvalPart, CheckpointPart):
    """Holds the pieces of one worker's training; ``train`` is run under hvd.elastic.run.

    Built in two parts so that a joining worker does its heavy set-up while the running
    world still trains: the constructor needs no rank and runs *before*
    ``hvd.init()`` (device and CUDA context, model, plain optimizer and its lazy imports,
    gradient scaler, sampler); ``attach(hvd)`` runs after it (Horovod's optimizer wrapper,
    loading processes' count, the checkpoint, which only rank 0 reads, and the state).

    Its parts, one module each (``training.trainer_base``): ``training.world`` (attach,
    agree, reset), ``training.step`` (the step, the rate), ``training.evaluation`` (buffers,
    validation), ``training.checkpointing`` (snapshots, checkpoints, SIGTERM); here: the
    set-up before ``hvd.init()``, the elastic function and its commits."""

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
        self.samplelog = SampleLog(args.debug_sample_log, self.tracer.stem, host_name())
        self.n = dataset_size(task.train_set)
        self._pending: list[int] = []
        self._pending_count = 0
        self._samples_hash: str | None = None
        self._stepped = False  # this process made an optimizer step
        # the world's state is in this process's memory (it entered training once)
        self._live = False
        self._offer_paths = {}
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

    def warm_up(self) -> None:
        """Before ``hvd.init()`` (``training.warmup``): start the training loader's processes
        (as many as this host's slots, ``HOROVOD_LOCAL_SIZE``, make each worker's share),
        have each load one batch, and on the GPU path run the first of them through
        ``to_device`` and one forward and backward pass (cuDNN autotunes for the training's
        shape). Nothing to do on the CPU path without loading processes. Trace events:
        ``loaders-ready`` (``workers``, ``batches``), ``first-batch``, ``autotuned``."""
        from training.warmup import autotune_pass

        self.workers = self.loader_workers(env_hint(HOROVOD_LOCAL_SIZE, 1, 1))
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
        if self.samplelog.on:  # the world's name: rank 0's (a collective, every rank logs)
            leader = hvd.broadcast_object(self.samplelog.token, root_rank=0, name="training.sample-log")
            self.samplelog.enter(leader, hvd.rank(), hvd.size(), state.epoch, state.resets,
                                 self.sampler.processed_num, self.n)
        if hvd.rank() == 0:
            log(f"training at world size {hvd.size()} from epoch {state.epoch + 1}, "
                f"{self.sampler.processed_num}/{self.n} samples done, {state.resets} resets")

    def train_loader(self) -> DataLoader:
        """The training loader (persistent processes on the GPU path), planned by the sampler."""
        if self._train_loader is None:
            # the processes' seeds: this worker's own stream (per rank), whenever started
            seeds = torch.Generator().manual_seed(
                stream_seed(self.args.seed, env_hint(HOROVOD_RANK, 0, 0), -1, 0))
            self._train_plan = loaders.Planned(self.sampler)
            self._train_loader = loaders.make_loader(self.task.train_set, self._train_plan,
                                                     self.workers or 0, pin_memory=self.pin,
                                                     collate_fn=self.collate, generator=seeds)
        return self._train_loader

    def train_epoch(self, state) -> None:
        """The epoch's remaining steps. On the GPU path batch k+1 is made ready in a thread
        (on a side CUDA stream) during step k (``training.prefetch``): with
        ``--augment-on-device`` decoded and augmented, else (decoded by the loading
        processes) copied from pinned memory without blocking and normalised; the thread is
        stopped before this returns or raises. Not with ``--workers 0`` on the CPU decode
        path: there the batch is made in this process from its global random stream, which
        the step draws from too, so the order of the draws would depend on timing."""
        batches = iter(self.train_loader()) if len(self.sampler) else iter(())
        if self.gpu_path and (self.augment is not None or bool(self.workers)):
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
            self.samplelog.step(self.hvd.rank(), self.hvd.size(), state.epoch, state.resets,
                                self.sampler.processed_num, step.total, step.indices, self.n)
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
        # traced before the collective: a rank killed once it completed still has its samples
        # on record (training.commits)
        commit = {"size": hvd.size(), "rank": hvd.rank(), "resets": state.resets,
                  "processed": self.sampler.processed_num}
        self.tracer.trained(state.epoch, self._pending, **commit)
        sums = hvd.allreduce(sums, op=hvd.Sum, name="training.stats")
        peers_leaving = float(sums[4]) > 0 and not self.flags.term
        loss, correct, count = state.stats
        state.stats = (loss + float(sums[0]), correct + int(sums[1]), count + int(sums[2]))
        state.decode_fallbacks += int(sums[3])
        if self.scaler is not None:
            state.scaler_state = self.scaler.state_dict()
        self.maybe_progress(state)
        state.save()
        self.samplelog.commit(hvd.rank(), state.epoch, state.resets, self.sampler.processed_num,
                              self._commits + 1)
        report_progress()
        if self._pending:
            self.tracer.committed(state.epoch, **commit)
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

    # -- output ------------------------------------------------------------------------
    def emit(self, rec: metrics.MetricsRecord) -> None:
        self.writer.open().write(rec)

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
    if not use_cuda(args) and not os.environ.get(OMP_NUM_THREADS):  # for the warm-up; set again below
        torch.set_num_threads(cpus.threads_per_worker(env_hint(HOROVOD_LOCAL_SIZE, 1, 1),
                                                      cpus.usable_cpus(), cpus.cgroup_cpu_limit()))
    trainer = Trainer(task, args, flags, tracer)
    tracer.event("prepared", dynamo=dynamo_imported())
    trainer.warm_up()  # loaders, a first batch, cuDNN's kernels: all before a joiner is ready
    tracer.event("init", dynamo=dynamo_imported())
    hvd.init()
    tracer.event("initialized", rank=hvd.rank(), size=hvd.size())
    if not use_cuda(args) and not os.environ.get(OMP_NUM_THREADS):  # share the cores among this host's workers
        torch.set_num_threads(cpus.threads_per_worker(hvd.local_size(), cpus.usable_cpus(),
                                                      cpus.cgroup_cpu_limit()))
    state = trainer.attach(hvd)
    hvd.elastic.run(trainer.train)(state)
    trainer.finish(state)
    return 0
