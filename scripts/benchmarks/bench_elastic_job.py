"""The job scripts/benchmarks/bench-elastic runs under elastic-run: each rank appends JSON lines to
$BENCH_LOG at the moments a join or a leave is made of (unix time "t", "ev", "host",
"pid", "size", "rank", "step"):

  start     the script runs (the interpreter is up; before any import)
  imported  torch and horovod.torch are imported
  init      hvd.init() returned (rendezvous done; a joiner's first world)
  built     the model, optimizer and state are built: hvd.elastic.run is entered next (it
            registers the worker's notification service with the driver, then syncs the state)
  synced    the state is synced: the train function was (re-)entered after a reset
  step      the first step at a world size this process had not stepped at before
  tick      with $BENCH_TICKS=1, rank 0 after every step ("t0": when the step's large
            allreduce began, with $BENCH_ALLREDUCE_MB): the fault rounds' pause measurements
  busy      rank 0 starts its work outside collectives ($BENCH_BUSY_TRIGGER, below)
  idle      ... and ends it

With $BENCH_PRINT=N every rank prints a line per step to stdout (a training log), padded to
N characters when N > 1; with
$BENCH_GARBLE=PATH, once PATH exists, rank 1 writes one line that is not UTF-8 to stdout
(and a marker record "garbled" to $BENCH_LOG).

It trains a tiny model forever (an allreduce and a commit per step, $BENCH_STEP_DELAY s
apart), until $BENCH_STOP exists. With $BENCH_ALLREDUCE_MB=N each step also allreduces an
N MB float32 tensor (hvd.allreduce, one message: a rank killed mid-send leaves its peers in a
large transfer), while the state to sync stays tiny. When the file $BENCH_BUSY_TRIGGER
exists, rank 0, after its next commit, works $BENCH_BUSY_SECONDS (20) s outside any collective
(saves a checkpoint and computes, again and again: a rank-0-only checkpoint or evaluation),
once. A process on a host listed in the file $BENCH_SLOW_HOSTS (one per line, read after the
imports) sleeps $BENCH_SLOW_SECONDS (30) s before hvd.init(): a joiner with a long set-up.
"""
import json
import os
import socket
import time

T_START = time.time()
LOG = open(os.environ["BENCH_LOG"], "a", buffering=1)
HOST = os.environ.get("HOROVOD_HOSTNAME", socket.gethostname())


def emit(ev, **fields):
    LOG.write(json.dumps({"t": time.time() if ev != "start" else T_START, "ev": ev, "host": HOST,
                          "pid": os.getpid(), **fields}) + "\n")


emit("start")
import horovod.torch as hvd  # noqa: E402
import torch  # noqa: E402

emit("imported")
slow_hosts = os.environ.get("BENCH_SLOW_HOSTS")
if slow_hosts and os.path.exists(slow_hosts) and HOST in open(slow_hosts).read().split():
    time.sleep(float(os.environ.get("BENCH_SLOW_SECONDS", "30")))
hvd.init()
emit("init", size=hvd.size(), rank=hvd.rank())
model = torch.nn.Linear(8, 1)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                     named_parameters=model.named_parameters())
state = hvd.elastic.TorchState(model=model, optimizer=optimizer, step=0)
delay = float(os.environ.get("BENCH_STEP_DELAY", "0.05"))
stop = os.environ["BENCH_STOP"]
ticks = os.environ.get("BENCH_TICKS") == "1"
big_mb = float(os.environ.get("BENCH_ALLREDUCE_MB", "0"))
big = torch.ones(int(big_mb * (1 << 20) / 4)) if big_mb > 0 else None
chatty = int(os.environ.get("BENCH_PRINT") or "0")
pad = "." * max(0, chatty - 60)
garble = os.environ.get("BENCH_GARBLE")
garbled: list[bool] = []
busy_trigger = os.environ.get("BENCH_BUSY_TRIGGER")
busy_seconds = float(os.environ.get("BENCH_BUSY_SECONDS", "20"))


def busy():
    """Rank 0's work outside collectives, once: a checkpoint saved and computing, for busy_seconds."""
    import tempfile
    open(busy_trigger + ".busy", "w").close()
    emit("busy")
    payload = {"model": model.state_dict(), "ballast": torch.zeros(1 << 20)}
    end = time.monotonic() + busy_seconds
    with tempfile.TemporaryDirectory() as tmp:
        while time.monotonic() < end:
            torch.save(payload, os.path.join(tmp, "checkpoint.pt"))
            torch.mm(torch.ones(128, 128), torch.ones(128, 128))
    emit("idle")


@hvd.elastic.run
def train(state):
    emit("synced", size=hvd.size(), rank=hvd.rank())
    stepped_at = None
    while not os.path.exists(stop):
        loss = model(torch.ones(4, 8)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        t0 = time.time()
        if big is not None:
            hvd.allreduce(big, op=hvd.Sum, name="bench.large")
        state.step += 1
        if ticks and hvd.rank() == 0:
            emit("tick", size=hvd.size(), rank=0, step=state.step, t0=t0)
        if stepped_at != hvd.size():
            stepped_at = hvd.size()
            emit("step", size=hvd.size(), rank=hvd.rank(), step=state.step)
        if chatty:
            print(f"step {state.step} rank {hvd.rank()} size {hvd.size()} loss {loss.item():.6f} {pad}", flush=True)
        if garble and not garbled and hvd.rank() == 1 and os.path.exists(garble):
            garbled.append(True)
            os.write(1, b"caf\xe9 \xff\xfe not utf-8\n")
            emit("garbled", size=hvd.size(), rank=1, step=state.step)
        state.commit()
        if busy_trigger and hvd.rank() == 0 and os.path.exists(busy_trigger) \
                and not os.path.exists(busy_trigger + ".busy"):
            busy()
        time.sleep(delay)

emit("built")
train(state)
