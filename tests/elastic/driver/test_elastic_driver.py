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
from tests.runtime.test_patch_detector import JOB, finish, frozen_pids
from tests.waiting import wait_for

pytestmark = [pytest.mark.horovod]

HVDRUN = [sys.executable, "-m", "elastic.driver.hvdrun"]


@pytest.mark.timeout(600)
def test_a_silent_majority_is_lost_and_the_rest_trains(tmp_path):
    """A 1-slot pod (localhost) and a 2-slot pod (127.0.0.1), world of 3, --min-np 1: the
    2-slot pod's training processes hang (SIGSTOP; the pod stays listed). Those two are lost
    (the fork's detector suspected itself instead, for ever: 2 of 3 silent) and the one left
    trains at world size 1 (9-10 s after the hang here, idle: docs/driver.md; the bound itself
    is the simulation's to check)."""
    script, _, _ = discovery_script(tmp_path, "localhost:1\n127.0.0.1:2\n")
    log, events = tmp_path / "det.jsonl", tmp_path / "events.jsonl"
    env = run_env(DET_LOG=str(log), DET_FREEZE_HOST="127.0.0.1", DET_FREEZE_AT_STEP="30",
                  HOROVOD_GLOO_TIMEOUT_SECONDS="300", HOROVOD_ELASTIC_EVENTS_FILE=str(events),
                  HOROVOD_ELASTIC_QUARANTINE_SECONDS="3600")
    argv = [*HVDRUN, "-np", "3", "--min-np", "1", "--max-np", "3", "--host-discovery-script", str(script),
            "--network-interface", "lo", "--elastic-timeout", "120", sys.executable, JOB]
    job = Job(tmp_path, argv, env)
    pids: list[int] = []
    try:
        wait_for(lambda: len(frozen_pids(log)) == 2, 420, "the two ranks on 127.0.0.1 to hang",
                 alive=alive_check(job), detail=job.output)
        hung = max(p.stat().st_mtime for p in log.parent.glob(f"{log.name}.frozen.*"))
        pids = frozen_pids(log)
        wait_for(lambda: any(r["size"] == 1 and r["host"] == "localhost" and r["time"] > hung
                             for r in read_log(log)), 120, "the rank on localhost to train alone",
                 alive=alive_check(job), detail=job.output)
        wait_for(lambda: all(pid_gone(pid) for pid in pids), 60, "the driver to end the hung processes")
        pids = []
        finish(job, log)
    finally:
        for pid in pids:
            kill_quietly(pid)
        job.close()
    lost = sorted((r["detail"]["host"], r["detail"]["slot"]) for r in read_log(events) if r["kind"] == Kind.WORKER_LOST)
    assert lost == [("127.0.0.1", 0), ("127.0.0.1", 1)], lost
    assert not [r for r in read_log(events) if r["kind"] == Kind.LIVENESS_REBASELINE]


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


@pytest.mark.timeout(600)
def test_a_failed_joiners_host_is_retried_after_a_cooldown_and_its_sibling_joins(tmp_path):
    """A 2-slot pod joins a world of one; its slot 1's joiner fails at start (exit 1 before
    hvd.init, every time). Its sibling on slot 0 joins (world size 2), and the pod is refused
    for a cooldown (3 s here, doubling), then slot 1 gets a joiner again: the fork refused the
    pod until it left discovery, so slot 1 was tried once."""
    from tests.runtime.test_patch_joins import JOB as JOINS_JOB
    from tests.runtime.test_patch_joins import finish as finish_joins
    from tests.runtime.test_patch_joins import kinds, steps
    script, hosts, _ = discovery_script(tmp_path, "localhost:1\n")
    log, events, stop = tmp_path / "joins.jsonl", tmp_path / "events.jsonl", tmp_path / "stop"
    env = run_env(JOINS_LOG=str(log), JOINS_STOP=str(stop), HOROVOD_ELASTIC_EVENTS_FILE=str(events),
                  JOINS_BEFORE_INIT="127.0.0.1:1=exit:1", HOROVOD_ELASTIC_QUARANTINE_SECONDS="3",
                  HOROVOD_GLOO_TIMEOUT_SECONDS="120")
    argv = [*HVDRUN, "-np", "1", "--min-np", "1", "--max-np", "3", "--host-discovery-script", str(script),
            "--network-interface", "lo", "--elastic-timeout", "120", sys.executable, JOINS_JOB]
    job = Job(tmp_path, argv, env)

    def starts_on_slot_1() -> list[dict]:
        return [e for e in kinds(events, "worker_start")
                if e["detail"]["host"] == "127.0.0.1" and e["detail"]["slot"] == 1]
    try:
        wait_for(lambda: len(steps(log, size=1)) >= 20, 240, "the world of one to train",
                 alive=alive_check(job), detail=job.output)
        hosts.write_text("localhost:1\n127.0.0.1:2\n")
        wait_for(lambda: steps(log, size=2, host="127.0.0.1", slot=0), 240, "slot 0 of the new pod to join",
                 alive=alive_check(job), detail=job.output)
        wait_for(lambda: len(starts_on_slot_1()) >= 2, 120, "slot 1 to get a joiner again after its cooldown",
                 alive=alive_check(job), detail=job.output)
        finish_joins(job, stop)
    finally:
        job.close()
    dropped = [e for e in kinds(events, "joiner_dropped") if e["detail"]["slot"] == 1]
    ended = [e for e in kinds(events, "refusal_ended") if e["detail"]["host"] == "127.0.0.1"]
    assert dropped and ended, (dropped, ended)
    assert ended[0]["detail"]["after"] >= 3.0
    again = starts_on_slot_1()[1]
    assert again["time"] >= dropped[0]["time"] + 3.0, (dropped[0], again)
    assert not kinds(events, "worker_lost")
