"""A horovod.torch job for tests/runtime/test_patch_gloo_failed_collective.py: every rank
allreduces a 64 MB tensor per step, back to back, until the test SIGKILLs one of them;
each survivor must then leave its collective with HorovodInternalError and shut Horovod
down.

The process horovodrun starts forks at once: the child is the rank (it imports Horovod and
trains), the parent only waits for it and exits 0 when it was killed by SIGKILL (the test's
doing), so non-elastic horovodrun does not end the survivors when it sees the killed rank
exit; any other end of the child (a crash: std::terminate is SIGABRT) is passed on as the
parent's exit code (128 + signal).

Settings (environment): those of tests/runtime/gloo_ranks.py; the events are ``start`` (with
the rank's pid), ``initialized``, ``step``/``step_done`` around each allreduce, ``error``
(HorovodInternalError, its message), ``shutdown_done``; at the deadline the rank exits 3.
"""
import os
import signal
import sys

from gloo_ranks import ELEMENTS, RANK, record, train


def guard(child: int) -> int:
    _, status = os.waitpid(child, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return 0 if sig == signal.SIGKILL else 128 + sig
    return os.WEXITSTATUS(status)


def rank() -> int:
    import horovod.torch as hvd
    import torch

    record("start", pid=os.getpid())
    hvd.init()
    record("initialized", size=hvd.size())
    tensor = torch.full((ELEMENTS,), float(RANK + 1))
    if not train(hvd, tensor):
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
