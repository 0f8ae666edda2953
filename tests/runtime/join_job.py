"""An elastic horovod.torch job for the join tests (tests/runtime/test_patch_join.py).

Every rank trains ``Linear(4, 1)`` forever, one commit per step, and appends JSON lines to
$JOIN_LOG ("ev", "time", "host", "pid", and "size", "rank", "step" where they apply):

  start        the script runs (before any import)
  init_called  hvd.init() is called next (the script's own set-up before it is done)
  init         hvd.init() returned: this process is in a world
  step         every step (after the optimizer step, before the commit)

The job ends on every rank at the same step: rank 0 broadcasts each step whether the file
$JOIN_STOP exists.

Knobs: the process on host $JOIN_SLOW_HOST (the joiner the tests add) does $JOIN_BEFORE_INIT
before hvd.init(): ``sleep:S`` (a long set-up: CUDA init, a dataset scan) or ``exit:CODE``
(a set-up that fails); $JOIN_STEP_SECONDS is a pause in every step (0.05 by default).
"""

import json
import os
import socket
import sys
import time

T_START = time.time()
LOG = open(os.environ["JOIN_LOG"], "a", buffering=1)
HOST = os.environ.get("HOROVOD_HOSTNAME", socket.gethostname())


def emit(ev, **fields):
    LOG.write(json.dumps({"ev": ev, "time": time.time() if ev != "start" else T_START, "host": HOST,
                          "pid": os.getpid(), **fields}) + "\n")


emit("start")
import horovod.torch as hvd  # noqa: E402
import torch  # noqa: E402

if HOST == os.environ.get("JOIN_SLOW_HOST"):
    what, _, arg = os.environ.get("JOIN_BEFORE_INIT", "sleep:20").partition(":")
    if what == "exit":
        sys.exit(int(arg))
    time.sleep(float(arg))
STEP_SECONDS = float(os.environ.get("JOIN_STEP_SECONDS", "0.05"))
STOP = os.environ["JOIN_STOP"]

emit("init_called")
hvd.init()
emit("init", size=hvd.size(), rank=hvd.rank())
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.01), named_parameters=model.named_parameters()
)
state = hvd.elastic.TorchState(model=model, optimizer=optimizer, step=0)


@hvd.elastic.run
def train(state):
    while not hvd.broadcast_object(os.path.exists(STOP), root_rank=0, name="join.stop"):
        loss = model(torch.ones(8, 4)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        state.step += 1
        emit("step", size=hvd.size(), rank=hvd.rank(), step=state.step)
        state.commit()
        time.sleep(STEP_SECONDS)


train(state)
