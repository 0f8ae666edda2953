"""An elastic horovod.torch job for the liveness tests (tests/runtime/test_patch_liveness.py).

Every rank trains ``Linear(4, 1)`` and appends one JSON line per step to $LIVE_LOG: host,
rank, world size, step, time. The job ends on every rank at the same step, $LIVE_STEPS (state
lives in a TorchState, so a rank that joins later receives it from rank 0 at the reset).

Knobs (all optional):
- $LIVE_DIE_HOST / $LIVE_DIE_AT_STEP / $LIVE_DIE_SIGNAL (KILL, STOP or TERM): the first worker
  on that host sends itself that signal at that step (a marker file ``$LIVE_LOG.died`` holds
  its pid and keeps it to once). STOP freezes the whole process (its notification service
  too), as on a hung or partitioned node;
- $LIVE_HANG_HOST: when a rank on that host leaves a collective with HorovodInternalError
  it hangs there (before Horovod resets it) while its notification thread keeps answering,
  as a worker whose main thread is stuck; its pid goes to ``$LIVE_LOG.hung``; one rank only,
  unless $LIVE_HANG_EVERY_RANK=1: then every rank there hangs (a multi-slot pod whose GPUs
  all hung), each pid to ``$LIVE_LOG.hung.<pid>``;
- $LIVE_STEP_SECONDS: a pause in every step, 0.05 by default;
- $LIVE_TERM_SLOW_SECONDS: on SIGTERM a rank leaves gracefully (it keeps training until the
  host-update reset takes it out, as a training script that commits and leaves), but its next
  step takes that many seconds more (a slow step while leaving).

Each process writes its pid to ``$LIVE_LOG.pid.<host>`` once it has initialized.

Once ``$LIVE_LOG.stop`` exists the job ends on every rank at the same step, before
$LIVE_STEPS (the ranks agree on it with an allreduce each step): a test that has seen what
it checks ends the job there instead of waiting out its steps.

A rank that leaves a collective with HorovodInternalError appends {"host", "rank", "time"} to
``$LIVE_LOG.left``.
"""

import json
import os
import signal
import socket
import time

import horovod.torch as hvd
import torch
from horovod.common.exceptions import HorovodInternalError

LOG = os.environ["LIVE_LOG"]
STEPS = int(os.environ.get("LIVE_STEPS", "300"))
STEP_SECONDS = float(os.environ.get("LIVE_STEP_SECONDS", "0.05"))
HOST = os.environ.get("HOROVOD_HOSTNAME", socket.gethostname())
DIE_HOST = os.environ.get("LIVE_DIE_HOST")
DIE_AT = int(os.environ.get("LIVE_DIE_AT_STEP", "0"))
DIE_SIGNAL = getattr(signal, "SIG" + os.environ.get("LIVE_DIE_SIGNAL", "KILL"))
HANG_HOST = os.environ.get("LIVE_HANG_HOST")
HANG_EVERY_RANK = os.environ.get("LIVE_HANG_EVERY_RANK") == "1"

terminated = []
if os.environ.get("LIVE_TERM_SLOW_SECONDS"):
    signal.signal(signal.SIGTERM, lambda signum, frame: terminated.append(time.time()))

hvd.init()
# a temporary file of its own: two ranks on one host (a multi-slot pod) must not rename each other's
with open(f"{LOG}.pid.{HOST}.{os.getpid()}.tmp", "w") as pid_file:
    pid_file.write(str(os.getpid()))
os.rename(f"{LOG}.pid.{HOST}.{os.getpid()}.tmp", f"{LOG}.pid.{HOST}")
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.01), named_parameters=model.named_parameters()
)
state = hvd.elastic.TorchState(model=model, optimizer=optimizer, step=0)
log = open(LOG, "a", buffering=1)


def mark_once(path: str) -> bool:
    """Write this pid to path unless it exists; whether this call wrote it."""
    if os.path.exists(path):
        return False
    with open(path + ".tmp", "w") as marker:
        marker.write(str(os.getpid()))
    os.rename(path + ".tmp", path)
    return True


def stop_asked() -> bool:
    """Whether any rank sees ``$LIVE_LOG.stop`` (every rank gets the same answer)."""
    seen = torch.tensor([1.0 if os.path.exists(LOG + ".stop") else 0.0])
    return float(hvd.allreduce(seen, op=hvd.Max, name="live.stop")[0]) > 0


@hvd.elastic.run
def train(state):
    try:
        while state.step < STEPS and not stop_asked():
            x = torch.ones(8, 4) * (hvd.rank() + 1)
            loss = model(x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            state.step += 1
            if HOST == DIE_HOST and state.step == DIE_AT and mark_once(LOG + ".died"):
                os.kill(os.getpid(), DIE_SIGNAL)
            log.write(json.dumps({"time": time.time(), "host": HOST, "rank": hvd.rank(),
                                  "size": hvd.size(), "step": state.step}) + "\n")
            state.commit()
            time.sleep(STEP_SECONDS)
            if len(terminated) == 1:
                terminated.append(time.time())
                time.sleep(float(os.environ["LIVE_TERM_SLOW_SECONDS"]))
    except HorovodInternalError:
        with open(LOG + ".left", "a") as left:
            left.write(json.dumps({"host": HOST, "rank": hvd.rank(), "time": time.time()}) + "\n")
        hang_marker = f"{LOG}.hung.{os.getpid()}" if HANG_EVERY_RANK else LOG + ".hung"
        if HOST == HANG_HOST and mark_once(hang_marker):
            while True:
                time.sleep(1)
        raise


train(state)
