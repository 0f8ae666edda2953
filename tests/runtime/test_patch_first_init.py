"""Horovod patches 0108 and 0109: an elastic worker's first ``hvd.init`` survives a peer lost
while its world forms.

- first inits retried: a first init that fails asks the driver for a place in the next world
  instead of exiting;
- a first init told of its world's abort: a first init still waiting in a rendezvous whose
  world the driver aborted is told (it asks the driver: it has no notification service yet)
  and leaves it at once.

The race behind it, found by scripts/benchmarks/bench-parity on CI: a joiner is taken into a world of
three just as rank 1 is killed. The joiner's first ``hvd.init`` (the Gloo rendezvous of a
world that lost a rank) fails. Before first inits retried the joiner exited 1; the driver counted that as a failure
of its host and blacklisted it, and the world waited a blacklist cooldown and a new
process's start for it (15-51 s measured on the local cluster), or went on without its GPUs
(Horovod's default: no cooldown, blacklisted for good).

Through plain horovodrun with a discovery script, as tests/runtime/test_patch_joins.py; the job
is tests/runtime/joins_job.py, whose joiner is held between being taken in and its
``hvd.init`` ($JOINS_HOLD_AFTER_JOIN) so that the kill lands in that window every time.
"""
from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest

from tests.runtime.liveness import alive_check, kill_quietly, pid_gone
from tests.runtime.test_horovod_patches import read_log
from tests.runtime.test_patch_joins import finish, first, kinds, pid_of, start, steps
from tests.waiting import wait_for


@pytest.mark.timeout(600)
def test_a_joiner_whose_first_init_fails_joins_the_next_world(tmp_path):
    """0109: a world of two (localhost, 127.0.0.1) at --min-np 2; a joiner on this machine's
    name is taken into a world of three and held before its ``hvd.init``; the worker on
    127.0.0.1 is then killed, and the joiner let go. Its first init fails (a rank of its world
    is gone). It must init again and train with rank 0 at world size 2: the same process, no
    failed exit, no second process on its host. Before first inits retried it exited 1 and its host was
    blacklisted (for good: horovodrun's default), so the world never trained again."""
    me = socket.gethostname()
    job, hosts, log, events, stop = start(
        tmp_path, "localhost:1\n127.0.0.1:1\n", 2, 2, 3, JOINS_HOLD_AFTER_JOIN=f"{me}:0",
        HOROVOD_GLOO_TIMEOUT_SECONDS="20")
    victim = joiner = None
    try:
        wait_for(lambda: len(steps(log, size=2)) >= 40, 240, "the world of two to train",
                 alive=alive_check(job), detail=job.output)
        victim = pid_of(log, "127.0.0.1")
        hosts.write_text(f"localhost:1\n127.0.0.1:1\n{me}:1\n")
        taken = wait_for(lambda: first(log, ev="taken", host=me), 240, "the joiner to be taken into a world",
                         alive=alive_check(job), detail=job.output)
        assert taken["size"] == 3, taken
        joiner = taken["pid"]
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: [e for e in kinds(events, "worker_exit") if e["detail"]["host"] == "127.0.0.1"], 120,
                 "the driver to see rank 1's exit", alive=alive_check(job), detail=job.output)
        victim = None
        (tmp_path / "joins.jsonl.go").touch()
        wait_for(lambda: steps(log, host=me, size=2) or pid_gone(joiner), 240,
                 "the joiner to train at world size 2, or to exit", alive=alive_check(job), detail=job.output)
        assert not pid_gone(joiner), (
            "the joiner exited after its first init failed (as before first inits retried)\n" + job.output())
        wait_for(lambda: steps(log, host="localhost", size=2, after=steps(log, host=me, size=2)[0]["time"]), 120,
                 "rank 0 to train with the joiner", alive=alive_check(job), detail=job.output)
        finish(job, stop)
        joiner = None
    finally:
        kill_quietly(victim)
        kill_quietly(joiner if joiner is not None and not pid_gone(joiner) else None)
        job.close()
    assert len([r for r in read_log(log) if r["ev"] == "start" and r["host"] == me]) == 1, \
        "the joiner's host got another process"
    failed = [e["detail"] for e in kinds(events, "worker_exit")
              if e["detail"]["host"] == me and e["detail"]["exit_code"] not in (0, None)]
    assert not failed, failed
    assert "the first initialization failed" in job.out_path.read_text(), "no retry was logged"


@pytest.mark.timeout(600)
def test_a_first_init_waiting_for_a_lost_peer_is_aborted(tmp_path):
    """0108/0109: a first world of two (localhost, 127.0.0.1) at --min-np 1; the worker on 127.0.0.1
    stops itself before its ``hvd.init``, so rank 0's first init waits in the rendezvous for
    it; it is then killed. The driver aborts the forming world, and rank 0, still in its first
    init, must learn of it, leave the rendezvous, init again (first inits retried) and
    train, long before Gloo's timeout (300 s here). Before a first init was told of its world's
    abort nothing could reach it (no notification service yet): it waited out the timeout."""
    job, _, log, events, stop = start(
        tmp_path, "localhost:1\n127.0.0.1:1\n", 2, 1, 2, "--blacklist-cooldown-range", "1", "2",
        JOINS_STOP_BEFORE_INIT="127.0.0.1:0", HOROVOD_GLOO_TIMEOUT_SECONDS="300")
    stopped_file = Path(f"{log}.stopped.127.0.0.1.0")
    victim = None
    try:
        rank0 = wait_for(lambda: stopped_file.exists() and first(log, ev="init_called", host="localhost"), 240,
                         "the worker on 127.0.0.1 to stop and rank 0 to call hvd.init",
                         alive=alive_check(job), detail=job.output)
        victim = int(stopped_file.read_text())
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: steps(log, host="localhost", pid=rank0["pid"]), 150,
                 "rank 0 to train (untold of the abort: after Gloo's 300 s timeout)",
                 alive=alive_check(job), detail=job.output)
        victim = None
        finish(job, stop)
    finally:
        kill_quietly(victim)
        job.close()
    assert kinds(events, "abort_first_init"), [e["kind"] for e in read_log(events)]
    assert len([r for r in read_log(log) if r["ev"] == "start" and r["host"] == "localhost"]) == 1, \
        "rank 0's host got another process"
    failed = [e["detail"] for e in kinds(events, "worker_exit")
              if e["detail"]["host"] == "localhost" and e["detail"]["exit_code"] not in (0, None)]
    assert not failed, failed
