"""The wrapper scripts/benchmarks/bench-elastic --scenario join runs a training script under, unchanged:

    python scripts/benchmarks/bench_join_job.py SCRIPT.py ARGS...     (e.g. Horovod's elastic example)
    python scripts/benchmarks/bench_join_job.py -m MODULE ARGS...     (e.g. training.mnist)

It appends JSON lines to $BENCH_LOG (unix time "t", "ev", "host", "pid", "size") at the
moments a join is made of, then runs the script as ``python SCRIPT``/``python -m`` would:

  start        the interpreter runs this wrapper (before any import)
  imported     horovod.torch (and so torch) is imported
  init_called  the script calls hvd.init() (its own set-up before it is done; the slow
               joiner's sleep below included)
  init         hvd.init() returned (a joiner: it was taken into a world)
  step         an optimizer step returned (torch's global step hook), at most every
               $BENCH_STEP_LOG_S (0.1) seconds and at every new world size

A process started once the file $BENCH_SLOW_AFTER exists (a joiner, on any build) sleeps
$BENCH_JOINER_SLEEP seconds when the script calls hvd.init(), before Horovod's own init,
standing in for a long set-up (CUDA init, a dataset scan) the script does before hvd.init().
"""
import json
import os
import runpy
import socket
import sys
import time

T_START = time.time()
LOG = open(os.environ["BENCH_LOG"], "a", buffering=1)
HOST = os.environ.get("HOROVOD_HOSTNAME", socket.gethostname())
SLOW = bool(os.environ.get("BENCH_SLOW_AFTER")) and os.path.exists(os.environ["BENCH_SLOW_AFTER"])


def emit(ev, t=None, **fields):
    LOG.write(json.dumps({"t": t or time.time(), "ev": ev, "host": HOST, "pid": os.getpid(), **fields}) + "\n")


emit("start", t=T_START)
import horovod.torch as hvd  # noqa: E402
from torch.optim.optimizer import register_optimizer_step_post_hook  # noqa: E402

emit("imported")
_init = hvd.init
_last = [0.0, None]
EVERY = float(os.environ.get("BENCH_STEP_LOG_S", "0.1"))


def init(*args, **kwargs):
    if SLOW:  # the script's own set-up before hvd.init, made longer
        time.sleep(float(os.environ.get("BENCH_JOINER_SLEEP", "20")))
    emit("init_called", slow=SLOW)
    result = _init(*args, **kwargs)
    emit("init", size=hvd.size(), rank=hvd.rank())
    return result


def after_step(optimizer, args, kwargs):
    if not hvd.is_initialized():  # a step before hvd.init (a script warming its optimizer up)
        return
    now, size = time.time(), hvd.size()
    if size != _last[1] or now - _last[0] >= EVERY:
        _last[0], _last[1] = now, size
        emit("step", t=now, size=size, rank=hvd.rank())


hvd.init = init
register_optimizer_step_post_hook(after_step)

if len(sys.argv) < 2:
    sys.exit("usage: bench_join_job.py SCRIPT.py ARGS... | -m MODULE ARGS...")
if sys.argv[1] == "-m":
    sys.argv = sys.argv[2:]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
else:
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
