"""An elastic horovod.torch job for the failure-detector tests (tests/runtime/test_patch_detector.py).

Every rank trains ``Linear(4, 1)`` and appends one JSON line per step to $DET_LOG: host,
rank, world size, step, time. Every step the ranks agree (a MAX allreduce) whether the file
``$DET_LOG.stop`` exists; once it does, every rank ends at that same step.

Knobs (optional): $DET_FREEZE_HOST / $DET_FREEZE_AT_STEP: every worker on that host writes
its pid to ``$DET_LOG.frozen.<pid>`` and sends itself SIGSTOP at that step (each process once),
as the ranks of one pod on a hung node; $DET_STEP_SECONDS: a pause in every step (0.05).
"""

import json
import os
import signal
import socket
import time

import horovod.torch as hvd
import torch

LOG = os.environ["DET_LOG"]
STEP_SECONDS = float(os.environ.get("DET_STEP_SECONDS", "0.05"))
HOST = os.environ.get("HOROVOD_HOSTNAME", socket.gethostname())
FREEZE_HOST = os.environ.get("DET_FREEZE_HOST")
FREEZE_AT = int(os.environ.get("DET_FREEZE_AT_STEP", "0"))

hvd.init()
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.01), named_parameters=model.named_parameters()
)
state = hvd.elastic.TorchState(model=model, optimizer=optimizer, step=0)
log = open(LOG, "a", buffering=1)
froze = []


@hvd.elastic.run
def train(state):
    while True:
        stop = hvd.allreduce(torch.tensor([float(os.path.exists(LOG + ".stop"))]), op=hvd.Max, name="stop")
        if stop.item() > 0:
            return
        x = torch.ones(8, 4) * (hvd.rank() + 1)
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        state.step += 1
        if HOST == FREEZE_HOST and state.step == FREEZE_AT and not froze:
            froze.append(True)
            with open(f"{LOG}.frozen.{os.getpid()}", "w") as marker:
                marker.write(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGSTOP)
        log.write(json.dumps({"time": time.time(), "host": HOST, "rank": hvd.rank(),
                              "size": hvd.size(), "step": state.step}) + "\n")
        state.commit()
        time.sleep(STEP_SECONDS)


train(state)
