"""The part of ``Trainer`` that keeps committed state (``CheckpointPart``).

After each commit (``keep_committed``): the host's local snapshot every ``--snapshot-every``
commits (local rank 0) and rank 0's periodic checkpoint when ``--checkpoint-every`` is due,
both written in the background from the commit's copies, at most one write in flight each
(``training.background``); a failed write is reported, never fatal. ``write_checkpoint``
writes the last commit's state now or in the background; ``before_restore`` and
``check_signals`` wait for the writes in flight and, after a SIGTERM, have rank 0 write the
last commit's state and the process leave with ``EXIT_TERM``.
"""

from __future__ import annotations

import time

from training import checkpoint, snapshots
from training.errors import CheckpointError
from training.signals import EXIT_TERM, leave
from training.trainer_base import TrainerParts, log


class CheckpointPart(TrainerParts):
    """Snapshots, checkpoints, leaving on SIGTERM (see the module docstring)."""

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
