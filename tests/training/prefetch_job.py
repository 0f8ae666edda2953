"""The CPU decode path's batches on the GPU path, played on a real Trainer (Horovod world of
one, ``--debug-gpu-path``, one loading process): one epoch, recording which thread made each
batch ready (``to_device``: the copy and the normaliser) and, inside each training step k,
waiting (with a deadline) until batch k+1 is ready. Prints JSON: ``ready`` (batches ready seen
in each step), ``threads`` (the thread that made each batch ready), ``timed_out``."""

import json
import sys
import threading

import pytest

from tests.waiting import wait_for
from training import options, resnet50
from training.loop import Trainer
from training.signals import StopFlags


def main(data_dir: str) -> None:
    args = options.parse(["--data-dir", data_dir, "--image-size", "64", "--batch-size", "4",
                          "--debug-gpu-path", "--amp-dtype", "bf16", "--workers", "1",
                          "--num-classes", "3", "--commit-every", "1000"], resnet50.DEFAULTS)
    task = resnet50.make_task(args)
    import horovod.torch as hvd

    trainer = Trainer(task, args, StopFlags())
    hvd.init()
    state = trainer.attach(hvd)
    state.sync()
    trainer.enter(state)
    steps = len(trainer.sampler.steps)
    threads: list[str] = []
    dtypes: list[str] = []
    ready: list[int] = []
    timed_out = []
    to_device, train_step = trainer.to_device, trainer.train_step

    def recording_to_device(batch, train):
        x, y = to_device(batch, train)
        dtypes.append(str(x.dtype))
        threads.append(threading.current_thread().name)
        return x, y

    def waiting_train_step(batch, total):
        """Step k does not finish before batch k+1 is ready (it never is when it is made
        in this thread after the step)."""
        k = len(ready)
        if k + 1 < steps and not timed_out:
            try:
                wait_for(lambda: len(threads) >= k + 2, 60, f"batch {k + 1} ready during step {k}")
            except pytest.fail.Exception:
                timed_out.append(k)
        ready.append(len(threads))
        return train_step(batch, total)

    trainer.to_device = recording_to_device
    trainer.train_step = waiting_train_step
    trainer.train_epoch(state)
    print(json.dumps({"steps": steps, "ready": ready, "threads": threads, "dtypes": dtypes,
                      "timed_out": timed_out, "uint8_batches": task.normalize is not None}))
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1])
