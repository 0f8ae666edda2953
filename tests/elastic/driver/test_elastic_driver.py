"""The project's driver (elastic.driver.elastic_driver) with real Horovod: horovodrun through
the project's entry (``python -m elastic.driver.hvdrun``, what elastic-run starts), local host
names as distinct hosts, tests/runtime/detector_job.py as the job. A GPU hang is a SIGSTOP of
the training processes only."""
from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from shared.event_kinds import Kind
from tests.runtime.liveness import JOB as LIVENESS_JOB
from tests.runtime.liveness import alive_check, kill_quietly, pid_gone, stop
from tests.runtime.test_horovod_patches import Job, discovery_script, read_log, run_env
from tests.waiting import wait_for

pytestmark = [pytest.mark.horovod]

HVDRUN = [sys.executable, "-m", "elastic.driver.hvdrun"]


@pytest.mark.timeout(600)
def test_a_pod_whose_ranks_all_hung_is_lost_at_the_barrier_deadline(tmp_path):
    """World of 4: localhost:1, 127.0.0.1:1 and a 2-slot pod (this machine's name). The rank
    on 127.0.0.1 is killed; both ranks of the 2-slot pod hang after the abort (their main
    threads stuck, their notification threads answering pings: liveness keeps them), so only
    localhost checks in for the next world. The barrier deadline (3 s here) arms once anyone
    has checked in, and loses the two idle ranks; localhost trains on. The fork armed the
    deadline only with exactly one worker missing: the world waited for them for ever."""
    me = socket.gethostname()
    script, _, _ = discovery_script(tmp_path, f"localhost:1\n127.0.0.1:1\n{me}:2\n")
    log, events = tmp_path / "live.jsonl", tmp_path / "events.jsonl"
    env = run_env(LIVE_LOG=str(log), LIVE_STEPS="100000", LIVE_DIE_HOST="127.0.0.1", LIVE_DIE_AT_STEP="20",
                  LIVE_DIE_SIGNAL="KILL", LIVE_HANG_HOST=me, LIVE_HANG_EVERY_RANK="1",
                  HOROVOD_GLOO_TIMEOUT_SECONDS="300", HOROVOD_ELASTIC_BARRIER_DEADLINE_SECONDS="3",
                  HOROVOD_ELASTIC_EVENTS_FILE=str(events))
    argv = [*HVDRUN, "-np", "4", "--min-np", "1", "--max-np", "4", "--host-discovery-script", str(script),
            "--network-interface", "lo", "--elastic-timeout", "120", sys.executable, LIVENESS_JOB]
    job = Job(tmp_path, argv, env)
    pids: list[int] = []

    def hung() -> list[int]:
        return [int(p.read_text()) for p in log.parent.glob(f"{log.name}.hung.*") if p.suffix != ".tmp"]
    try:
        wait_for(lambda: len(hung()) == 2, 420, f"both ranks on {me} to hang", alive=alive_check(job),
                 detail=job.output)
        pids = hung()
        wait_for(lambda: all(pid_gone(pid) for pid in pids), 90,
                 "the driver to end the two hung processes (without the deadline: never)",
                 alive=alive_check(job), detail=job.output)
        ended = Path(f"{log}.hung.{pids[0]}").stat().st_mtime
        wait_for(lambda: any(r["host"] == "localhost" and r["time"] > ended for r in read_log(log)), 120,
                 "localhost to train on", alive=alive_check(job), detail=job.output)
        pids = []
        stop(log)
        job.proc.wait(timeout=240)
        assert job.proc.returncode == 0, job.output()
    finally:
        for pid in pids:
            kill_quietly(pid)
        job.close()
    lost = {(r["detail"]["host"], r["detail"]["slot"]): r["detail"].get("reason", "")
            for r in read_log(events) if r["kind"] == Kind.WORKER_LOST}
    assert {(me, 0), (me, 1)} <= set(lost), lost
    assert all("made no progress" in lost[(me, slot)] for slot in (0, 1)), lost
