"""A failure before the first commit, played on a real Trainer (Horovod world of one):
print the loss scale at entry, after an overflowing step, and after the roll-back that
``hvd.elastic.run`` does on ``HorovodInternalError`` (restore, reset callbacks, sync, enter)."""

import json
import sys

import torch

from training import mnist, options
from training.loop import Trainer
from training.signals import StopFlags

args = options.parse(["--synthetic", "--synthetic-size", "64", "--batch-size", "8",
                      "--debug-gpu-path", "--amp-dtype", "fp16", "--workers", "0",
                      "--commit-every", "1000"], mnist.DEFAULTS)
task = mnist.make_task(args)
import horovod.torch as hvd  # noqa: E402

trainer = Trainer(task, args, StopFlags())  # what needs no rank, before hvd.init()
hvd.init()
state = trainer.attach(hvd)
state.sync()
trainer.enter(state)
entry = trainer.scaler.get_scale()
x = torch.full((8, 1, 28, 28), 1e30)  # overflows in fp16: the scaler skips the step and backs off
trainer.train_step((x, torch.zeros(8, dtype=torch.int64)), 8)
after_overflow = trainer.scaler.get_scale()
state.restore()
state.on_reset()
state.sync()
trainer.enter(state)
rolled_back = trainer.scaler.get_scale()
joiner = Trainer(task, args, StopFlags())
joiner_state = joiner.attach(hvd)
joiner_state.sync()
joiner.enter(joiner_state)
print(json.dumps({"entry": entry, "after_overflow": after_overflow, "rolled_back": rolled_back,
                  "joiner": joiner.scaler.get_scale()}))
sys.stdout.flush()
