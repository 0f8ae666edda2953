"""A horovod.torch job for tests/runtime/test_patch_gloo_failed_collective.py: every rank
allreduces a 64 MB tensor per step, back to back, until the test SIGKILLs one of them;
each survivor must then leave its collective with HorovodInternalError and shut Horovod
down.

The process horovodrun starts forks at once: the child is the rank (it imports Horovod and
trains), the parent only waits for it and exits 0 when it was killed by SIGKILL (the test's
doing), so non-elastic horovodrun does not end the survivors when it sees the killed rank
exit; any other end of the child (a crash: std::terminate is SIGABRT) is passed on as the
parent's exit code (128 + signal).

Settings (environment):
    GLOO_KILL_DIR          where each rank writes ``events.<rank>.jsonl`` (one JSON object a
                           line: ``event``, ``t`` (time.time()) and details): ``start`` (with the
                           rank's pid), ``initialized``, ``step``/``step_done`` around each
                           allreduce, ``error`` (HorovodInternalError, its message),
                           ``shutdown_done``.
    GLOO_KILL_MAX_SECONDS  the rank gives up (exit 3) after this long (default 600).
"""
import json
import os
import signal
import sys
import time
from pathlib import Path

OUT = Path(os.environ["GLOO_KILL_DIR"])
RANK = int(os.environ["HOROVOD_RANK"])
DEADLINE = time.monotonic() + float(os.environ.get("GLOO_KILL_MAX_SECONDS", "600"))
ELEMENTS = 16 * 1024 * 1024  # 64 MB of float32: Gloo's ring sends it in 1 MB segments


def record(event: str, **details) -> None:
    with open(OUT / f"events.{RANK}.jsonl", "a") as f:
        f.write(json.dumps({"event": event, "t": time.time(), "rank": RANK, **details}) + "\n")


def guard(child: int) -> int:
    _, status = os.waitpid(child, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return 0 if sig == signal.SIGKILL else 128 + sig
    return os.WEXITSTATUS(status)


def rank() -> int:
    import horovod.torch as hvd
    import torch
    from horovod.common.exceptions import HorovodInternalError

    record("start", pid=os.getpid())
    hvd.init()
    record("initialized", size=hvd.size())
    tensor = torch.full((ELEMENTS,), float(RANK + 1))
    step = 0
    while time.monotonic() < DEADLINE:
        record("step", step=step)
        try:
            hvd.allreduce_(tensor, op=hvd.Average, name="big")
        except HorovodInternalError as e:
            record("error", step=step, message=str(e)[:300])
            break
        record("step_done", step=step)
        step += 1
    else:
        return 3
    hvd.shutdown()
    record("shutdown_done")
    return 0


if __name__ == "__main__":
    pid = os.fork()
    if pid:
        sys.exit(guard(pid))
    code = 1
    try:
        code = rank()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
