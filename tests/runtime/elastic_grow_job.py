"""An elastic horovod.torch job that trains until the world has grown, then a few steps more.

Every step each rank appends one JSON line to $GROW_LOG: rank, world size, the committed step
counter and the sum of a parameter. The job ends on every rank at the same step: once the
world size has reached $GROW_TARGET_SIZE for $GROW_STEPS_AFTER steps. State (model, optimizer,
step counter, the step at which the world grew) lives in a TorchState, so a rank that joins
later receives it from rank 0 at the reset.

Knobs for the tests of the Horovod patches (all optional):
- $GROW_STARTED / $GROW_GATE: each process touches GROW_STARTED.<host>.<pid> once it has
  initialized, then waits for the file GROW_GATE before it enters ``hvd.elastic.run`` (where
  it registers its notification service): the workers are "still starting" until then;
- $GROW_DIE_HOST / $GROW_DIE_AT_STEP: the first worker on that host kills itself with
  SIGKILL at that step (a hard crash; a marker file next to $GROW_LOG keeps it to once and
  holds the worker's pid); with $GROW_DIE_SIGNAL=STOP it stops itself instead (SIGSTOP: a
  host that vanished without closing its connections, as after a power loss or a partition).

When a rank leaves a collective with HorovodInternalError (a peer is gone), it appends
{"host", "rank", "time", "error"} to $GROW_LOG.left before Horovod resets it.
"""

import json
import os
import signal
import socket
import time

import horovod.torch as hvd
import torch
from horovod.common.exceptions import HorovodInternalError

target_size = int(os.environ.get("GROW_TARGET_SIZE", "2"))
steps_after = int(os.environ.get("GROW_STEPS_AFTER", "5"))
max_steps = int(os.environ.get("GROW_MAX_STEPS", "400"))

hvd.init()
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.01), named_parameters=model.named_parameters()
)
state = hvd.elastic.TorchState(model=model, optimizer=optimizer, step=0, grown_at=-1)
log = open(os.environ["GROW_LOG"], "a", buffering=1)
host = os.environ.get("HOROVOD_HOSTNAME", socket.gethostname())
die_host, die_at = os.environ.get("GROW_DIE_HOST"), int(os.environ.get("GROW_DIE_AT_STEP", "0"))
die_signal = signal.SIGSTOP if os.environ.get("GROW_DIE_SIGNAL") == "STOP" else signal.SIGKILL
died_marker = os.environ["GROW_LOG"] + ".died"

if os.environ.get("GROW_STARTED"):
    open(f"{os.environ['GROW_STARTED']}.{host}.{os.getpid()}", "w").close()
    while not os.path.exists(os.environ["GROW_GATE"]):
        time.sleep(0.05)


@hvd.elastic.run
def train(state):
    try:
        steps(state)
    except HorovodInternalError as error:
        with open(os.environ["GROW_LOG"] + ".left", "a") as left:
            left.write(json.dumps({"host": host, "rank": hvd.rank(), "time": time.time(),
                                   "error": str(error)[:200]}) + "\n")
        raise


def steps(state):
    while state.step < max_steps:
        if hvd.size() >= target_size and state.grown_at < 0:
            state.grown_at = state.step
        if state.grown_at >= 0 and state.step >= state.grown_at + steps_after:
            return
        x = torch.ones(8, 4) * (hvd.rank() + 1)
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        state.step += 1
        if host == die_host and state.step == die_at and not os.path.exists(died_marker):
            with open(died_marker + ".tmp", "w") as marker:
                marker.write(str(os.getpid()))
            os.rename(died_marker + ".tmp", died_marker)
            os.kill(os.getpid(), die_signal)
        log.write(json.dumps({
            "time": time.time(),
            "host": host,
            "rank": hvd.rank(),
            "size": hvd.size(),
            "step": state.step,
            "weight_sum": float(sum(p.detach().sum() for p in model.parameters())),
        }) + "\n")
        state.commit()
        if hvd.size() < target_size:
            time.sleep(0.2)  # give the test time to add a slot


train(state)
