"""Horovod patch 0108's failure detector: the driver never turns a failure, or its own
stall, against a healthy job, and a host lost by mistake comes back.

Through plain horovodrun with a discovery script, as tests/runtime/test_patch_liveness.py:
the hosts are local names (``localhost``, ``127.0.0.1``, this machine's name) that horovodrun
runs here without SSH but treats as distinct hosts; the job is tests/runtime/detector_job.py.
A worker, or the driver (horovodrun itself), is frozen with SIGSTOP. Each test fails on eh3
(before liveness without a cascade, the observer suspecting itself and quarantine with
probation) and says how.
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
from pathlib import Path

import pytest

from shared.event_kinds import Kind
from tests.runtime.liveness import alive_check, kill_quietly, paused, pid_gone
from tests.runtime.test_horovod_patches import HOROVODRUN, Job, discovery_script, read_log, run_env
from tests.waiting import wait_for

HERE = Path(__file__).parent
JOB = str(HERE / "detector_job.py")


def argv(script: Path, np: int, min_np: int, *extra: str) -> list[str]:
    return [HOROVODRUN, "-np", str(np), "--min-np", str(min_np), "--max-np", str(np),
            "--host-discovery-script", str(script), "--network-interface", "lo",
            "--elastic-timeout", "120", *extra, sys.executable, JOB]


def frozen_pids(log: Path) -> list[int]:
    return [int(p.read_text()) for p in log.parent.glob(f"{log.name}.frozen.*") if p.read_text()]


def trained_after(log: Path, since: float) -> set:
    """The (host, world size) pairs logged after since (unix time)."""
    return {(r["host"], r["size"]) for r in read_log(log) if r["time"] > since}


def finish(job: Job, log: Path) -> None:
    """Ask every rank to stop (the job's stop file) and wait for horovodrun to exit 0."""
    Path(f"{log}.stop").touch()
    job.proc.wait(timeout=240)
    assert job.proc.returncode == 0, job.output()


@pytest.mark.timeout(600)
def test_the_four_ranks_of_a_frozen_pod_are_lost_and_the_other_four_go_on(tmp_path):
    """0108: the four ranks of one pod (127.0.0.1:4) freeze together (SIGSTOP, the pod stays
    listed), the other pod's four train on. Exactly those four are lost, the four others train
    at world size 4 well past a liveness timeout after the loss, and the job ends with 0. The
    quarantine cooldown is long here (no re-admission to tell apart). On eh3: each lost rank's
    aborts went to the other frozen ones (2 x 2 s each) on the 8 threads the pings use, the
    healthy ranks' pings queued and they expired too: all 8 lost, horovodrun exited 1."""
    script, _, _ = discovery_script(tmp_path, "localhost:4\n127.0.0.1:4\n")
    log, events = tmp_path / "det.jsonl", tmp_path / "events.jsonl"
    env = run_env(DET_LOG=str(log), DET_FREEZE_HOST="127.0.0.1", DET_FREEZE_AT_STEP="30",
                  HOROVOD_GLOO_TIMEOUT_SECONDS="300", HOROVOD_ELASTIC_EVENTS_FILE=str(events),
                  HOROVOD_ELASTIC_QUARANTINE_SECONDS="3600")
    job = Job(tmp_path, argv(script, 8, 4), env)
    pids: list[int] = []
    try:
        wait_for(lambda: len(frozen_pids(log)) == 4, 420, "the four ranks on 127.0.0.1 to freeze",
                 alive=alive_check(job), detail=job.output)
        pids = frozen_pids(log)
        wait_for(lambda: [r for r in read_log(events) if r["kind"] == Kind.WORKER_LOST], 120,
                 "the frozen ranks to be lost", alive=alive_check(job), detail=job.output)
        lost_at = time.time()
        wait_for(lambda: {r["host"] for r in read_log(log) if r["size"] == 4 and r["time"] > lost_at + 12}
                 == {"localhost"}, 180, "the four healthy ranks to train at world size 4 past a liveness "
                 "timeout after the loss (eh3: they were lost too)", alive=alive_check(job), detail=job.output)
        wait_for(lambda: all(pid_gone(pid) for pid in pids), 60, "the driver to end the frozen processes")
        pids = []
        lost = [r["detail"] for r in read_log(events) if r["kind"] == Kind.WORKER_LOST]
        finish(job, log)
    finally:
        for pid in pids:
            kill_quietly(pid)
        job.close()
    assert sorted((d["host"], d["slot"]) for d in lost) == [("127.0.0.1", s) for s in range(4)], lost


@pytest.mark.timeout(600)
def test_a_driver_frozen_for_six_seconds_loses_nobody(tmp_path):
    """0108: horovodrun itself (the driver) is stopped for 6 s (SIGSTOP, then SIGCONT: a
    launcher throttled or paused) while its three workers train. At the thaw the liveness
    thread finds it woke about 6 s late, suspects itself and re-baselines: nobody is lost,
    the three train on at world size 3 and the job ends with 0. On eh3: every worker had
    answered nothing for 6 s by the driver's clock: all three lost, every host quarantined,
    horovodrun exited 1."""
    me = socket.gethostname()
    script, _, _ = discovery_script(tmp_path, f"localhost:1\n127.0.0.1:1\n{me}:1\n")
    log, events = tmp_path / "det.jsonl", tmp_path / "events.jsonl"
    env = run_env(DET_LOG=str(log), HOROVOD_GLOO_TIMEOUT_SECONDS="300", HOROVOD_ELASTIC_EVENTS_FILE=str(events))
    job = Job(tmp_path, argv(script, 3, 2), env)
    try:
        wait_for(lambda: any(r["size"] == 3 and r["step"] >= 30 for r in read_log(log)), 420,
                 "the world of three to train", alive=alive_check(job), detail=job.output)
        thawed = paused(job.proc.pid, 6.0)  # the driver stopped for 6 s
        wait_for(lambda: {h for h, size in trained_after(log, thawed + 15) if size == 3}
                 == {"localhost", "127.0.0.1", me} or any(r["kind"] == Kind.WORKER_LOST for r in read_log(events)),
                 180, "the three to train at world size 3 15 s after the thaw", alive=alive_check(job),
                 detail=job.output)
        finish(job, log)
    finally:
        job.close()
    lost = [r["detail"] for r in read_log(events) if r["kind"] == Kind.WORKER_LOST]
    assert not lost, f"the driver's own stall lost workers: {lost}"
    assert [r for r in read_log(events) if r["kind"] == Kind.LIVENESS_REBASELINE]


@pytest.mark.timeout(600)
def test_a_pod_frozen_for_eight_seconds_gets_a_worker_again(tmp_path):
    """0108: the worker on 127.0.0.1 freezes (SIGSTOP) for 8 s and is thawed (SIGCONT), its
    host listed all along. It is lost at the liveness timeout (5 s) and its host quarantined
    with probation: its old process ends (the driver's SIGTERM takes effect at the thaw, its
    SIGKILL at once, even before the thaw), the cooldown (15 s) and the blacklist's (1-2 s
    here) pass, and the host gets a worker again: the job trains at world size 3 with
    127.0.0.1 in it. On eh3 the host stayed quarantined until it left discovery, and the world
    stayed at 2 for good."""
    me = socket.gethostname()
    script, _, _ = discovery_script(tmp_path, f"localhost:1\n127.0.0.1:1\n{me}:1\n")
    log, events = tmp_path / "det.jsonl", tmp_path / "events.jsonl"
    env = run_env(DET_LOG=str(log), DET_FREEZE_HOST="127.0.0.1", DET_FREEZE_AT_STEP="30",
                  HOROVOD_GLOO_TIMEOUT_SECONDS="300", HOROVOD_ELASTIC_EVENTS_FILE=str(events))
    # the blacklist of the failed host ends in 1-2 s (elastic-run: 10-60 s); without a range
    # horovodrun blacklists a failed host for good, whatever the quarantine
    job = Job(tmp_path, argv(script, 3, 2, "--blacklist-cooldown-range", "1", "2"), env)
    pids: list[int] = []
    try:
        wait_for(lambda: frozen_pids(log), 420, "the worker on 127.0.0.1 to freeze", alive=alive_check(job),
                 detail=job.output)
        pids = frozen_pids(log)
        time.sleep(8.0)  # the fault itself: the pod frozen for 8 s (the marker is written just before)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):  # the driver's SIGKILL came first
                os.kill(pid, signal.SIGCONT)
        thawed = time.time()
        wait_for(lambda: ("127.0.0.1", 3) in trained_after(log, thawed), 300,
                 "127.0.0.1 back in a world of three (eh3: never)", alive=alive_check(job), detail=job.output)
        wait_for(lambda: all(pid_gone(pid) for pid in pids), 60, "the old worker on 127.0.0.1 ended")
        pids = []
        finish(job, log)
    finally:
        for pid in pids:
            kill_quietly(pid)
        job.close()
    kinds = [r["kind"] for r in read_log(events)
             if r["kind"] in (Kind.WORKER_LOST, Kind.QUARANTINE, Kind.QUARANTINE_ENDED)]
    assert kinds == [Kind.QUARANTINE, Kind.WORKER_LOST, Kind.QUARANTINE_ENDED] or \
        kinds == [Kind.WORKER_LOST, Kind.QUARANTINE, Kind.QUARANTINE_ENDED], kinds
