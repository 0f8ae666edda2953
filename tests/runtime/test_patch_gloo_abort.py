"""Two fixes of patch 0103: Gloo's abort of queued operations (an abort wakes every queued send
and receive, behind the public ``gloo::Context::abort``) and the Gloo abort (horovod_gloo_abort
through it, during init and shutdown too), through real horovodrun: a peer freezes (SIGSTOP:
its sockets stay open and silent, as on a hung or partitioned node) and the others are aborted
with Horovod's ``gloo_abort`` (what the elastic driver's WorkerLostRequest calls), from a
thread of their own (tests/runtime/gloo_abort_job.py). HOROVOD_GLOO_TIMEOUT_SECONDS is 120;
each test waits at most 45 s for the survivors, so the Gloo timeout can never be what frees
them.

Without these two fixes each test times out: a survivor caught mid-send of a 64 MB
tensor (its send partly written, the socket buffer full) or mid-receive is not woken by the
abort; an abort during hvd.init or hvd.shutdown does nothing.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.runtime.gloo_jobs import GLOO_TIMEOUT, PROMPT, GlooJob, last
from tests.waiting import wait_for

FREEZE_OFFSETS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.4)


class Job(GlooJob):
    """gloo_abort_job.py in MODE on ``np`` ranks (``extra``: more environment)."""

    def __init__(self, tmp_path: Path, np: int, mode: str, **extra: str):
        super().__init__(tmp_path, "gloo_abort_job.py", np, GLOO_ABORT_MODE=mode, **extra)

    def abort(self) -> float:
        """Tell every rank to call gloo_abort (from now on, every 0.2 s); returns when."""
        (self.out / "abort").touch()
        return time.time()


def stopped(pid: int) -> bool:
    """True when the process is stopped (state T in /proc/PID/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")


def stuck_for(out: Path, rank: int, seconds: float) -> bool:
    """True when rank entered a step more than ``seconds`` ago and has not finished it."""
    entered, finished = last(out, rank, "step"), last(out, rank, "step_done")
    if entered is None or (finished is not None and finished["step"] >= entered["step"]):
        return False
    return time.time() - entered["t"] > seconds


def socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:["):-1])
    return inodes


def in_flight_to(pid: int) -> int:
    """Bytes sent to the process over TCP that it has not read: in its sockets' receive
    queues and in its peers' send queues toward it (/proc/net/tcp)."""
    mine = socket_inodes(pid)
    rows = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        rows += [line.split() for line in Path(table).read_text().splitlines()[1:]]
    addresses = {row[1] for row in rows if row[9] in mine}
    total = 0
    for row in rows:
        tx, rx = (int(n, 16) for n in row[4].split(":"))
        if row[9] in mine:
            total += rx
        elif row[2] in addresses:
            total += tx
    return total


def within(predicate, seconds: float) -> bool:
    """Polls predicate for up to ``seconds``; whether it became true (no failure)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


@pytest.mark.timeout(420)
def test_an_abort_frees_ranks_caught_mid_send_of_a_large_tensor(tmp_path):
    """0103: three ranks allreduce a 64 MB tensor per step, then rank 0 broadcasts a 256 MB
    one (a state sync: one message to each peer, far more than socket buffers hold).
    Rank 1 is frozen while rank 0 is sending it the broadcast and more than 1 MB of it waits
    unread in socket queues (else rank 1 is resumed and frozen again a step later), so rank
    0's send stays partly written in Gloo's transmit queue, the only operation on its
    buffer. Once rank 0 has been stuck in that broadcast and rank 2 in the step for 2 s,
    both are aborted: they must raise HorovodInternalError within PROMPT s, and
    hvd.shutdown must then return.

    Gloo's ring allreduce alone rarely shows the bug (its 1 MB segments are pipelined on one
    buffer, so another pending operation on that buffer usually wakes it); the allreduce
    stays as the everyday case."""
    job = Job(tmp_path, 3, "allreduce")
    try:
        out = job.out

        def steps_done(rank: int) -> int:
            done = last(out, rank, "step_done")
            return -1 if done is None else done["step"]

        wait_for(lambda: min(steps_done(r) for r in range(3)) >= 2, 240,
                 "three ranks to finish 3 steps of 64 MB allreduces", alive=job.alive, detail=job.detail)
        frozen = last(out, 1, "start")
        assert frozen is not None
        pid = frozen["pid"]

        def sync_step(rank: int) -> int:
            entered = last(out, rank, "sync")
            return -1 if entered is None else entered["step"]

        def in_sync(rank: int) -> bool:
            entered, finished = last(out, rank, "sync"), last(out, rank, "sync_done")
            return entered is not None and (finished is None or finished["step"] < entered["step"])

        for attempt in range(60):
            step = sync_step(0)
            wait_for(lambda step=step: sync_step(0) > step, 120, "rank 0 to start a broadcast",
                     alive=job.alive, detail=job.detail)
            # not a wait for a condition: where in the broadcast to freeze rank 1, tried in turn
            time.sleep(FREEZE_OFFSETS[attempt % len(FREEZE_OFFSETS)])
            os.kill(pid, signal.SIGSTOP)
            wait_for(lambda: stopped(pid), 10, "rank 1 to stop")
            # rank 0 still in the broadcast 2 s later, with data for rank 1 unread: its send
            # is stuck, partly written (the rest did not fit in the socket buffers)
            if within(lambda: in_flight_to(pid) >= 1024 * 1024 and in_sync(0)
                      and time.time() - last(out, 0, "sync")["t"] > 2, 3.0):
                break
            os.kill(pid, signal.SIGCONT)
        else:
            pytest.fail("rank 1 was never frozen while rank 0 was sending it the broadcast")
        wait_for(lambda: stuck_for(out, 2, 2), 60, "rank 2 to be stuck in the step with rank 1 frozen",
                 alive=job.alive, detail=job.detail)
        job.abort()
        wait_for(lambda: last(out, 0, "error") and last(out, 2, "error"), PROMPT,
                 f"ranks 0 and 2 to leave the collective (HorovodInternalError); Gloo's own timeout is "
                 f"{GLOO_TIMEOUT} s", alive=job.alive, detail=job.detail)
        wait_for(lambda: last(out, 0, "shutdown_done") and last(out, 2, "shutdown_done"), PROMPT,
                 "ranks 0 and 2 to shut Horovod down after the abort", alive=job.alive, detail=job.detail)
    finally:
        job.close()
    # the HorovodInternalError says either the abort ("aborted: ...", raised in the Gloo
    # operation) or "Horovod has been shut down" (the background loop ended on it first)
    for rank in (0, 2):
        message = last(out, rank, "error")["message"]
        assert "aborted: test: a peer is frozen" in message or "has been shut down" in message, message


@pytest.mark.timeout(300)
def test_an_abort_during_init_fails_the_init_at_once(tmp_path):
    """0103: rank 1 stops before hvd.init, so rank 0's init waits in the rendezvous for it.
    With HOROVOD_GLOO_ABORT_DURING_INIT=1 (the default with aborts during init; set here so that the test
    shows the Gloo abort on its own; that default: tests/runtime/test_patch_joins.py), the aborted init
    must fail within PROMPT s with HorovodInternalError (recoverable, as a failed
    collective), not wait out the Gloo timeout and end the process (std::terminate from the
    background thread, as stock Horovod does)."""
    job = Job(tmp_path, 2, "init", HOROVOD_GLOO_ABORT_DURING_INIT="1")
    try:
        out = job.out
        wait_for(lambda: last(out, 1, "freezing") and last(out, 0, "init"), 180,
                 "rank 1 to stop and rank 0 to start hvd.init", alive=job.alive, detail=job.detail)
        job.abort()
        failed = wait_for(lambda: last(out, 0, "init_failed"), PROMPT,
                          f"rank 0's hvd.init to fail; Gloo's own timeout is {GLOO_TIMEOUT} s",
                          alive=job.alive, detail=job.detail)
    finally:
        job.close()
    assert failed["error"] == "HorovodInternalError", failed
    assert "aborted: test: a peer is frozen" in failed["message"], failed


@pytest.mark.timeout(300)
def test_an_abort_during_shutdown_ends_it(tmp_path):
    """0103: after three steps rank 1 stops and rank 0 calls hvd.shutdown, whose last
    background cycle is a collective with rank 1. Aborted once it has been in shutdown for
    1 s, rank 0's hvd.shutdown must return within PROMPT s."""
    job = Job(tmp_path, 2, "shutdown")
    try:
        out = job.out
        entered = wait_for(lambda: last(out, 1, "freezing") and last(out, 0, "shutdown"), 180,
                           "rank 1 to stop and rank 0 to call hvd.shutdown", alive=job.alive, detail=job.detail)
        wait_for(lambda: time.time() - entered["t"] > 1 and not last(out, 0, "shutdown_done"), 30,
                 "rank 0 to be in hvd.shutdown for 1 s (it must wait for the frozen rank 1)",
                 alive=job.alive, detail=job.detail)
        job.abort()
        wait_for(lambda: last(out, 0, "shutdown_done"), PROMPT,
                 f"rank 0's hvd.shutdown to return; Gloo's own timeout is {GLOO_TIMEOUT} s",
                 alive=job.alive, detail=job.detail)
    finally:
        job.close()


@pytest.mark.timeout(400)
def test_an_abort_during_shutdown_reaches_every_process_sets_contexts(tmp_path):
    """0103, an abort during shutdown with process sets (hvd.add_process_set): 3 ranks, sets {0,1} and {1,2}, each step
    allreduces on the global set and on each set a rank is in; then rank 1 stops and ranks 0
    and 2 call hvd.shutdown, whose last cycles are collectives with rank 1 on the global
    contexts and on those of their set. Aborted, both must return within PROMPT s: the abort
    reaches every process set's contexts (they are made through the same Rendezvous, which
    registers each context for the abort), not only the global ones."""
    job = Job(tmp_path, 3, "shutdown", GLOO_ABORT_PROCESS_SETS="0,1;1,2")
    try:
        out = job.out
        entered = wait_for(lambda: last(out, 1, "freezing") and last(out, 0, "shutdown") and last(out, 2, "shutdown"),
                           240, "rank 1 to stop and ranks 0 and 2 to call hvd.shutdown", alive=job.alive,
                           detail=job.detail)
        assert last(out, 0, "initialized")["mine"] == 1 and last(out, 2, "initialized")["mine"] == 1
        wait_for(lambda: time.time() - entered["t"] > 1 and not last(out, 0, "shutdown_done")
                 and not last(out, 2, "shutdown_done"), 30,
                 "ranks 0 and 2 in hvd.shutdown for 1 s (they must wait for the frozen rank 1)",
                 alive=job.alive, detail=job.detail)
        job.abort()
        wait_for(lambda: last(out, 0, "shutdown_done") and last(out, 2, "shutdown_done"), PROMPT,
                 f"ranks 0 and 2's hvd.shutdown to return; Gloo's own timeout is {GLOO_TIMEOUT} s",
                 alive=job.alive, detail=job.detail)
    finally:
        job.close()


SESSION_CHECK = """
import json
import horovod.torch as hvd
from horovod.torch.mpi_ops import _basics
seen = {"before": [_basics.gloo_abort("x"), _basics._gloo_abort_reason()]}
hvd.init()
seen["session"] = [_basics.gloo_abort("y"), _basics._gloo_abort_reason()]
hvd.shutdown()
seen["after"] = [_basics.gloo_abort("z"), _basics._gloo_abort_reason()]
hvd.init()
seen["next"] = [hvd.size(), _basics._gloo_abort_reason()]
hvd.shutdown()
print(json.dumps(seen))
"""


@pytest.mark.timeout(120)
def test_an_abort_applies_to_its_session_only():
    """0103, in one process (a world of one, no horovodrun): an abort before hvd.init or
    after hvd.shutdown does nothing; one during a session marks it aborted (the reason is
    kept, with the "aborted: " prefix) and ends with it: the next hvd.init starts clean."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOROVOD_")}
    env["OMP_NUM_THREADS"] = "1"
    out = subprocess.run([sys.executable, "-c", SESSION_CHECK], capture_output=True, text=True,
                         env=env, timeout=100)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen == {"before": [0, None], "session": [0, "aborted: y"], "after": [0, None],
                    "next": [1, None]}, seen
