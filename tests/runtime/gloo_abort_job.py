"""A horovod.torch job for tests/runtime/test_patch_gloo_abort.py: a peer freezes and the
others are aborted (horovod's ``gloo_abort``, what the elastic driver's WorkerLostRequest
calls) from a thread, as the notification service does.

Settings (environment):
    GLOO_ABORT_MODE  ``allreduce``: every rank allreduces one 64 MB tensor per step, then
                     rank 0 broadcasts a 256 MB one (a state sync), until the test freezes
                     one (SIGSTOP from outside); ``init``: rank 1 stops itself
                     before hvd.init, rank 0 inits; ``shutdown``: both allreduce a few steps,
                     then rank 1 stops itself and rank 0 calls hvd.shutdown.
    GLOO_JOB_DIR     (and GLOO_JOB_MAX_SECONDS: the job gives up, exit 3, after it) as in
                     tests/runtime/gloo_ranks.py; the test creates ``abort`` there: from then on
                     each rank calls gloo_abort every 0.2 s until its main thread is done, so
                     the abort lands whatever the main thread is in.
    GLOO_ABORT_PROCESS_SETS  optional, e.g. ``0,1;1,2``: hvd.init with dynamic process sets,
                     these added (hvd.add_process_set), and each step also allreduces on every
                     set the rank belongs to, so each set's Gloo contexts are in use.
"""
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import horovod.torch as hvd
import torch
from gloo_ranks import DEADLINE, ELEMENTS, OUT, RANK, record, train
from horovod.torch.mpi_ops import _basics

MODE = os.environ["GLOO_ABORT_MODE"]
done = threading.Event()


def aborter() -> None:
    trigger = OUT / "abort"
    while not done.is_set() and not trigger.exists():
        if time.monotonic() > DEADLINE:
            return
        time.sleep(0.05)
    first = True
    while not done.is_set() and time.monotonic() < DEADLINE:
        n = _basics.gloo_abort("test: a peer is frozen")
        if first or n:
            record("abort", connections=n)
            first = False
        done.wait(0.2)


def freeze_self() -> None:
    record("freezing")
    os.kill(os.getpid(), signal.SIGSTOP)


def peer_stopped(rank: int) -> bool:
    """Whether the process of ``rank`` (same machine: its pid from its ``start`` event) is
    stopped (SIGSTOP: state T in /proc/PID/stat)."""
    try:
        lines = (OUT / f"events.{rank}.jsonl").read_text().splitlines()
        pid = next(json.loads(line)["pid"] for line in lines if '"start"' in line)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, StopIteration, ValueError, KeyError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] == "T"


def wait_peer_stopped(rank: int) -> None:
    """Until ``rank`` is stopped (or the job's deadline): the shutdown must meet a frozen peer,
    not race with its last background cycle before the SIGSTOP lands."""
    while not peer_stopped(rank) and time.monotonic() < DEADLINE:
        time.sleep(0.01)


def main() -> int:
    record("start", pid=os.getpid())
    threading.Thread(target=aborter, daemon=True).start()
    if MODE == "init" and RANK == 1:
        freeze_self()
    record("init")
    sets_spec = os.environ.get("GLOO_ABORT_PROCESS_SETS", "")
    try:
        hvd.init(process_sets="dynamic") if sets_spec else hvd.init()
    except Exception as e:  # noqa: BLE001 - the test reads what init raised
        record("init_failed", error=type(e).__name__, message=str(e)[:300])
        return 0
    process_sets = [hvd.add_process_set([int(r) for r in spec.split(",")])
                    for spec in sets_spec.split(";") if spec]
    mine = [(i, ps) for i, ps in enumerate(process_sets) if ps.included()]
    record("initialized", size=hvd.size(), process_sets=len(process_sets), mine=len(mine))
    tensor = torch.full((ELEMENTS if MODE == "allreduce" else 4,), float(RANK + 1))
    # more than socket buffers can hold (on loopback they grow to about 40 MB per connection)
    state = torch.zeros((4 * ELEMENTS if MODE == "allreduce" else 1,))

    def after_allreduce(step: int) -> None:
        for i, ps in mine:  # one name per set on every rank
            hvd.allreduce_(tensor, op=hvd.Average, name=f"set{i}", process_set=ps)
        if MODE == "allreduce":
            # a state sync: one 64 MB message from rank 0 to each peer
            record("sync", step=step)
            hvd.broadcast_(state, root_rank=0, name="sync")
            record("sync_done", step=step)

    def stop_before(step: int) -> bool:
        if MODE != "shutdown" or step != 3:
            return False
        if RANK == 1:
            freeze_self()
        else:
            wait_peer_stopped(1)
        return True

    if not train(hvd, tensor, after_allreduce=after_allreduce, stop_before=stop_before):
        return 3
    record("shutdown")
    hvd.shutdown()
    record("shutdown_done")
    done.set()
    return 0


if __name__ == "__main__":
    sys.exit(main())
