"""An elastic horovod.torch job for the tests of the worker-side patches (re-sync decision,
a failed re-initialisation): it trains until a given host has been in its world for a few
steps, then ends on every rank at the same step.

Each world starts (inside ``hvd.elastic.run``, after the state sync) with one allgather of
the ranks' host names, so every rank knows who is in it; once $RESYNC_FINAL_HOST is, the job
ends $RESYNC_STEPS_AFTER steps later (the step is kept in the TorchState, so every rank stops
at the same one). Every step each rank appends one JSON line to $RESYNC_LOG: host, rank,
world size, hosts, step and the sum of the parameters.

Knobs (all optional but $RESYNC_LOG):
- a rank that leaves a world with HostsUpdatedInterrupt appends {"host", "skip_sync"} to
  $RESYNC_LOG.interrupts (so a test knows it took the host update);
- $RESYNC_FORCE_AT_STEP: at that step, once per process (a marker file next to $RESYNC_LOG),
  rank 0 raises HostsUpdatedInterrupt(skip_sync=True), as if its broadcast in
  ``check_host_updates`` had completed with a removal-only update, and every other rank raises
  HorovodInternalError, as if an abort had landed in that broadcast: the decisions of the
  Horovod #3494 moment, forced;
- $RESYNC_DIE_AT_INIT_HOST: the first process on that host (a marker file next to $RESYNC_LOG
  keeps it to once) kills itself with SIGKILL right where it would call ``hvd.init``, after
  writing its pid to $RESYNC_LOG.died: a peer lost while the others are in their init.
"""

import json
import os
import signal
import socket
import time

import horovod.torch as hvd
import torch
from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt

LOG = os.environ["RESYNC_LOG"]
final_host = os.environ.get("RESYNC_FINAL_HOST", "")
steps_after = int(os.environ.get("RESYNC_STEPS_AFTER", "5"))
max_steps = int(os.environ.get("RESYNC_MAX_STEPS", "2000"))
force_at = int(os.environ.get("RESYNC_FORCE_AT_STEP", "-1"))
host = os.environ.get("HOROVOD_HOSTNAME", socket.gethostname())


def once(marker: str) -> bool:
    """True the first time this marker is claimed (by any process)."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


if host == os.environ.get("RESYNC_DIE_AT_INIT_HOST") and once(LOG + ".die-at-init"):
    with open(LOG + ".died.tmp", "w") as died:
        died.write(str(os.getpid()))
    os.rename(LOG + ".died.tmp", LOG + ".died")
    os.kill(os.getpid(), signal.SIGKILL)

hvd.init()
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.01), named_parameters=model.named_parameters()
)
state = hvd.elastic.TorchState(model=model, optimizer=optimizer, step=0, stop_at=-1)
log = open(LOG, "a", buffering=1)


def note(path: str, record: dict) -> None:
    with open(path, "a") as out:
        out.write(json.dumps(record) + "\n")


@hvd.elastic.run
def train(state):
    try:
        steps(state)
    except HostsUpdatedInterrupt as interrupt:
        note(LOG + ".interrupts", {"host": host, "rank": hvd.rank(), "skip_sync": interrupt.skip_sync})
        raise


def steps(state):
    hosts = sorted(hvd.allgather_object(host))
    if final_host in hosts and state.stop_at < 0:
        state.stop_at = state.step + steps_after
    while state.step < max_steps and not (0 <= state.stop_at <= state.step):
        if state.step == force_at and once(f"{LOG}.forced.{host}"):
            if hvd.rank() == 0:
                raise HostsUpdatedInterrupt(True)
            raise HorovodInternalError("forced: as if an abort landed in check_host_updates")
        x = torch.ones(8, 4) * (hvd.rank() + 1)
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        state.step += 1
        log.write(json.dumps({
            "time": time.time(),
            "host": host,
            "rank": hvd.rank(),
            "size": hvd.size(),
            "hosts": hosts,
            "step": state.step,
            "weight_sum": float(sum(p.detach().sum() for p in model.parameters())),
        }) + "\n")
        state.commit()
        time.sleep(0.1)  # a step the test can act within


train(state)
