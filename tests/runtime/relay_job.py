"""An elastic horovod.torch job for tests/runtime/test_patch_relay.py: a chatty worker.

Every rank trains ``Linear(4, 1)``, prints a line of $RELAY_LINE_BYTES characters (2000 by
default) to stdout every step, and appends one JSON line per step to $RELAY_LOG: host, rank,
world size, step, time. Every step the ranks agree (a sum-allreduce) on whether
$RELAY_STOP exists; once it does, every rank prints ``done <rank>`` and ends at the same step.
A step takes at least $RELAY_STEP_SECONDS (0.05).
"""

import json
import os
import socket
import time

import horovod.torch as hvd
import torch

LOG = os.environ["RELAY_LOG"]
STOP = os.environ["RELAY_STOP"]
LINE = "x" * int(os.environ.get("RELAY_LINE_BYTES", "2000"))
STEP_SECONDS = float(os.environ.get("RELAY_STEP_SECONDS", "0.05"))
HOST = os.environ.get("HOROVOD_HOSTNAME", socket.gethostname())

hvd.init()
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.01), named_parameters=model.named_parameters()
)
state = hvd.elastic.TorchState(model=model, optimizer=optimizer, step=0)
log = open(LOG, "a", buffering=1)


@hvd.elastic.run
def train(state):
    while True:
        stop = hvd.allreduce(torch.tensor([float(os.path.exists(STOP))]), op=hvd.Sum, name="stop")
        if stop.item() > 0:
            return
        loss = model(torch.ones(8, 4) * (hvd.rank() + 1)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        state.step += 1
        print(f"step {state.step} rank {hvd.rank()} {LINE}", flush=True)
        log.write(json.dumps({"time": time.time(), "host": HOST, "rank": hvd.rank(),
                              "size": hvd.size(), "step": state.step}) + "\n")
        state.commit()
        time.sleep(STEP_SECONDS)


train(state)
print(f"done {hvd.rank()}", flush=True)
