"""An elastic horovod.torch job for tests/runtime/test_patch_joins.py (the barrier deadline, a
joiner taken in at --min-np, sibling joiners).

Every rank trains ``Linear(4, 1)`` until the file $JOINS_STOP exists (rank 0 broadcasts it each
step, so every rank ends at the same step), one commit per step, and appends JSON lines to
$JOINS_LOG ("ev", "time", "host", "slot", "pid", and "size", "rank", "step" where they apply):

  start        the script runs (before any import)
  taken        a held joiner was taken into a world ($JOINS_HOLD_AFTER_JOIN)
  init_called  hvd.init() is called next (the script's own set-up before it is done)
  init         hvd.init() returned: this process is in a world
  step         every step (after the optimizer step, before the commit)
  busy / idle  the busy rank (below) starts and ends its work outside collectives

Each process writes its pid to ``$JOINS_LOG.pid.<host>.<slot>`` once it has initialized.

Knobs (all optional):
- $JOINS_BEFORE_INIT: ``host:slot=sleep:S``, ``host:slot=wait:NAME``, ``host:slot=exit:CODE`` or
  ``host:slot=exit-unless:NAME`` (exit 3 unless the file ``$JOINS_LOG.NAME`` exists: a set-up
  that fails until the test mends it) entries separated by ``;`` (host ``*``: any host's
  joiner on that slot, e.g. a pod whose address the test learns only once it exists): a
  joiner (started while the world trains, $HOROVOD_ELASTIC_JOINING=1) on that slot sleeps (a
  long set-up), waits until the file ``$JOINS_LOG.NAME`` exists (a set-up that lasts until the
  test says: at most 600 s) or exits (a set-up that fails) before hvd.init(); workers that are
  no joiners start at once;
- $JOINS_BUSY_HOST / $JOINS_BUSY_AT_STEP / $JOINS_BUSY_SECONDS: the rank on that host, after
  its commit of that step, works that long outside any collective (writes a checkpoint with
  torch.save and computes, again and again: rank 0 saving or evaluating), once (its pid goes
  to ``$JOINS_LOG.busy`` first); with $JOINS_BUSY_IN=background the work runs in the
  trainer's background writer (``training.background.BackgroundWriter``) and the main thread
  waits for it, idle, as a trainer's ``restore`` waits for its checkpoint write in flight;
- $JOINS_HOLD_AFTER_JOIN: ``host:slot``: a joiner on that slot, once the driver has taken it
  into a world (it asks for its rank itself, as ``hvd.init`` would), logs ``taken`` (with
  ``size`` and ``rank``) and waits until the file ``$JOINS_LOG.go`` exists before its
  ``hvd.init`` (the world's Gloo rendezvous): a test changes that world meanwhile;
- $JOINS_STOP_BEFORE_INIT: ``host:slot``: the worker of the first world on that slot writes
  its pid to ``$JOINS_LOG.stopped.<host>.<slot>`` and stops itself (SIGSTOP) before
  ``hvd.init``: the first world's rendezvous waits for it (a test then kills it); once: a
  later process on that slot starts at once;
- $JOINS_STEP_SECONDS: a pause in every step (0.05 by default).
"""

import json
import os
import signal
import socket
import sys
import tempfile
import threading
import time

T_START = time.time()
LOG_PATH = os.environ["JOINS_LOG"]
LOG = open(LOG_PATH, "a", buffering=1)
HOST = os.environ.get("HOROVOD_HOSTNAME", socket.gethostname())
SLOT = int(os.environ.get("HOROVOD_LOCAL_RANK", "0"))
JOINER = os.environ.get("HOROVOD_ELASTIC_JOINING") == "1"


def emit(ev, **fields):
    LOG.write(json.dumps({"ev": ev, "time": time.time() if ev != "start" else T_START, "host": HOST,
                          "slot": SLOT, "pid": os.getpid(), "joiner": JOINER, **fields}) + "\n")


def write_atomically(path, text):
    with open(path + ".tmp", "w") as out:
        out.write(text)
    os.rename(path + ".tmp", path)


emit("start")
import horovod.torch as hvd  # noqa: E402
import torch  # noqa: E402

BEFORE_INIT = dict(entry.split("=", 1) for entry in os.environ.get("JOINS_BEFORE_INIT", "").split(";") if entry)
BEFORE_MINE = BEFORE_INIT.get(f"{HOST}:{SLOT}", BEFORE_INIT.get(f"*:{SLOT}"))
if JOINER and BEFORE_MINE is not None:
    what, _, arg = BEFORE_MINE.partition(":")
    if what == "exit":
        sys.exit(int(arg))
    elif what == "exit-unless":
        if not os.path.exists(f"{LOG_PATH}.{arg}"):
            sys.exit(3)
    elif what == "wait":
        set_up, set_up_until = threading.Event(), time.monotonic() + 600
        while not os.path.exists(f"{LOG_PATH}.{arg}"):
            if time.monotonic() > set_up_until:
                sys.exit(f"joins_job: $JOINS_LOG.{arg} never appeared within 600 s")
            set_up.wait(0.05)
    else:
        time.sleep(float(arg))
STEP_SECONDS = float(os.environ.get("JOINS_STEP_SECONDS", "0.05"))
STOP = os.environ["JOINS_STOP"]
BUSY_HOST = os.environ.get("JOINS_BUSY_HOST")
BUSY_AT = int(os.environ.get("JOINS_BUSY_AT_STEP", "20"))
BUSY_SECONDS = float(os.environ.get("JOINS_BUSY_SECONDS", "0"))
BUSY_IN = os.environ.get("JOINS_BUSY_IN", "main")

if JOINER and os.environ.get("JOINS_HOLD_AFTER_JOIN") == f"{HOST}:{SLOT}":
    from horovod.runner.elastic.worker import join_world

    join_world()  # hvd.init's own call then does nothing: the flag is cleared
    emit("taken", size=int(os.environ["HOROVOD_SIZE"]), rank=int(os.environ["HOROVOD_RANK"]))
    go, held_until = threading.Event(), time.monotonic() + 600  # the test's own timeout is 600 s
    while not os.path.exists(LOG_PATH + ".go"):
        if time.monotonic() > held_until:
            sys.exit("joins_job: never let go ($JOINS_LOG.go) within 600 s")
        go.wait(0.05)
STOPPED = f"{LOG_PATH}.stopped.{HOST}.{SLOT}"
if not JOINER and os.environ.get("JOINS_STOP_BEFORE_INIT") == f"{HOST}:{SLOT}" and not os.path.exists(STOPPED):
    write_atomically(STOPPED, str(os.getpid()))
    os.kill(os.getpid(), signal.SIGSTOP)
emit("init_called")
hvd.init()
emit("init", size=hvd.size(), rank=hvd.rank())
write_atomically(f"{LOG_PATH}.pid.{HOST}.{SLOT}", str(os.getpid()))
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.01), named_parameters=model.named_parameters()
)
state = hvd.elastic.TorchState(model=model, optimizer=optimizer, step=0)


def busy(seconds):
    """Work outside any collective for seconds: save a checkpoint and compute, again and again."""
    write_atomically(LOG_PATH + ".busy", str(os.getpid()))
    emit("busy")
    payload = {"model": model.state_dict(), "ballast": torch.zeros(1 << 20)}
    end = time.monotonic() + seconds
    with tempfile.TemporaryDirectory() as tmp:
        while time.monotonic() < end:
            torch.save(payload, os.path.join(tmp, "checkpoint.pt"))
            torch.mm(torch.ones(128, 128), torch.ones(128, 128))
    emit("idle")


@hvd.elastic.run
def train(state):
    while not hvd.broadcast_object(os.path.exists(STOP), root_rank=0, name="joins.stop"):
        loss = model(torch.ones(8, 4)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        state.step += 1
        emit("step", size=hvd.size(), rank=hvd.rank(), step=state.step)
        state.commit()
        if HOST == BUSY_HOST and state.step == BUSY_AT and not os.path.exists(LOG_PATH + ".busy"):
            if BUSY_IN == "background":
                from training.background import BackgroundWriter

                writer = BackgroundWriter("joins")
                writer.submit(lambda: busy(BUSY_SECONDS), "checkpoint")
                writer.wait()
            else:
                busy(BUSY_SECONDS)
        time.sleep(STEP_SECONDS)


train(state)
