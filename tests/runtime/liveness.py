"""What the liveness tests (tests/runtime/test_patch_liveness.py, test_patch_join.py) share:
checks on a horovodrun ``Job`` (tests/runtime/test_horovod_patches.py) running
tests/runtime/liveness_job.py, and ``lose_one``, the course of the tests in which one worker
freezes or hangs and the driver must drop it."""
from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.runtime.test_horovod_patches import HOROVODRUN, Job, read_log
from tests.waiting import wait_for

HERE = Path(__file__).parent
JOB = str(HERE / "liveness_job.py")


def alive_check(job: Job):
    def check() -> None:
        if job.proc.poll() is not None:
            pytest.fail(f"horovodrun exited ({job.proc.returncode}):\n{job.output()}", pytrace=False)
    return check


def paused(pid: int, seconds: float) -> float:
    """The fault of a paused process (a launcher throttled, a VM paused): SIGSTOP ``pid``, keep
    it stopped ``seconds`` -- the fault's length, not a wait for anything -- then SIGCONT it.
    Returns the unix time of the thaw."""
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)
    return time.time()


def pid_gone(pid: int) -> bool:
    """Whether pid no longer names a live process (a zombie counts as gone). A process that ends
    between the open and the read makes the read fail with ESRCH: gone too."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def kill_quietly(pid: int | None) -> None:
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def job_argv(script: Path, np: int, min_np: int, *extra: str) -> list[str]:
    return [HOROVODRUN, "-np", str(np), "--min-np", str(min_np), "--max-np", str(np),
            "--host-discovery-script", str(script), "--network-interface", "lo",
            "--elastic-timeout", "120", *extra, sys.executable, JOB]


def stop(log: Path) -> None:
    """Tell liveness_job.py's ranks to end at their next step (``<log>.stop``)."""
    Path(f"{log}.stop").touch()


def sizes_after(log: Path, since: float) -> set:
    return {(r["host"], r["size"]) for r in read_log(log) if r["time"] > since}


def lose_one(job: Job, log: Path, marker: str, became: str, survivors: set, trained: str, ended: str,
             then: Callable[[], None] | None = None) -> None:
    """One worker of ``job`` freezes or hangs (liveness_job.py writes its pid to
    ``<log>.<marker>``: waited for as ``became``, 240 s); ``then()`` runs (e.g. its host leaves
    discovery); the survivors must train (the (host, size) pairs ``survivors`` in ``log``,
    90 s: ``trained``), the driver must end that process (30 s: ``ended``), and then, told to
    stop (``stop``), horovodrun must exit 0 (240 s). Whatever happened, the process is killed
    and the job closed."""
    marker_file = Path(f"{log}.{marker}")
    stopped = None
    try:
        wait_for(marker_file.exists, 240, became, alive=alive_check(job))
        stopped = int(marker_file.read_text())
        if then is not None:
            then()
        wait_for(lambda: survivors <= sizes_after(log, 0), 90, trained, alive=alive_check(job), detail=job.output)
        wait_for(lambda: pid_gone(stopped), 30, ended)
        stopped = None
        stop(log)
        job.proc.wait(timeout=240)
        assert job.proc.returncode == 0, job.output()
    finally:
        kill_quietly(stopped)
        job.close()
