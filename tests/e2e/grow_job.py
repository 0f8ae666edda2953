"""An elastic horovod.torch job that trains until it has trained at world size $TARGET_SIZE:
each step an allreduce of ones (its sum is the world size every rank agrees on), a commit,
and a short pause; rank 0 appends "size N step S" to $SIZES_FILE each step. It ends once
$TARGET_SIZE ranks have made 3 steps together (or after $MAX_STEPS steps: exit 1)."""
import os
import sys
import time

import horovod.torch as hvd
import torch

TARGET = int(os.environ["TARGET_SIZE"])
MAX_STEPS = int(os.environ.get("MAX_STEPS", "3000"))

hvd.init()
state = hvd.elastic.TorchState(model=torch.nn.Linear(1, 1), step=0, at_target=0)


@hvd.elastic.run
def train(state):
    while state.step < MAX_STEPS and state.at_target < 3:
        size = int(hvd.allreduce(torch.ones(1), op=hvd.Sum, name=f"size.{state.step}").item())
        if hvd.rank() == 0:
            with open(os.environ["SIZES_FILE"], "a") as f:
                f.write(f"size {size} step {state.step}\n")
        state.at_target = state.at_target + 1 if size == TARGET else 0
        state.step += 1
        state.commit()
        time.sleep(0.5)


train(state)
sys.exit(0 if state.at_target >= 3 else 1)
