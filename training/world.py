"""The part of ``Trainer`` that ties a worker to a world (``WorldPart``).

- ``attach(hvd)`` after ``hvd.init()``: Horovod's optimizer wrapper (fp16 allreduce when
  ``fp16_allreduce``), the loading processes' count, the local snapshot store, and the fresh
  elastic state with this part's callbacks registered on it;
- ``agree(state)`` before every state sync: which committed state the world starts from
  (live memory, a host's local snapshot or the shared checkpoint: ``offer``,
  ``valid_offers``, ``snapshots.choose``), loaded on rank 0 by ``apply``, which refuses a
  state that does not fit this run (``CheckpointError``/``ConfigError`` carried in
  ``state.refused`` to every rank);
- ``on_reset(state)``: the reset callback (count it, drop uncommitted work, rescale the rate).
"""

from __future__ import annotations

import io
from pathlib import Path

import torch

from training import checkpoint, cpus, fingerprint, loaders, snapshots
from training.errors import CheckpointError, ConfigError
from training.layout import LayoutCompression
from training.trainer_base import TrainerParts, describe, log


class WorldPart(TrainerParts):
    """Attach, agree on the starting state, reset (see the module docstring)."""

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

    def fp16_allreduce(self) -> bool:
        """Compress gradients to fp16: ``--allreduce-dtype fp16`` or ``--fp16-allreduce``, or
        ``auto`` on the GPU path with fp16 mixed precision (the scaled gradients fit fp16,
        an overflow is an inf the gradient scaler skips). Not with bf16: Horovod 0.28.1
        cannot allreduce bfloat16, and fp16 without a loss scale flushes small gradients."""
        a = self.args
        if a.fp16_allreduce or a.allreduce_dtype == "fp16":
            return True
        return a.allreduce_dtype == "auto" and self.amp and a.amp_dtype == "fp16"

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
