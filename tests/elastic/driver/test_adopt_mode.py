"""The driver's adopt mode (``ELASTIC_ADOPT_WORLD``, ``ElasticDriver.adopt``): a second
horovodrun takes over the world a first one started, after the first is killed, without ending
a worker; then it runs that world as its own. Through the project's real ``horovodrun``, the
real lease wrapper (``elastic.worker.lease --adopt-window``) around an elastic horovod.torch job
(tests/runtime/join_job.py), on local host names (run here without SSH, as distinct hosts)."""
from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path

import pytest

from elastic.driver.hvdrun import adopt_window
from elastic.errors import BadEndpoint
from shared.driver_events import read_records
from tests.runtime.test_horovod_patches import HOROVODRUN, Job, discovery_script, read_log, run_env
from tests.waiting import free_port, wait_for

JOB = str(Path(__file__).parents[2] / "runtime" / "join_job.py")
LEASE, WINDOW = 5, 120
# generous deadlines for a loaded 2-core machine (torch imports take up to 48 s there); none
# is a timing check
START_DEADLINE = 300.0
ADOPT_DEADLINE = WINDOW / 2 + 60.0
GROW_DEADLINE = 300.0
END_DEADLINE = 300.0



def _steps(log: Path, after: float = 0.0) -> list[dict]:
    return [r for r in read_log(log) if r["ev"] == "step" and r["time"] > after]


def _launch(tmp_path: Path, name: str, script: Path, port: int, log: Path, stop: Path, **extra: str) -> Job:
    out = tmp_path / name
    out.mkdir()
    env = run_env(JOIN_LOG=str(log), JOIN_STOP=str(stop), JOIN_SLOW_HOST=socket.gethostname(),
                  JOIN_BEFORE_INIT="sleep:0", ELASTIC_RENDEZVOUS_PORT=str(port), ELASTIC_RUN_ID=name,
                  HOROVOD_ELASTIC_EVENTS_FILE=str(out / "events.jsonl"), HOROVOD_GLOO_TIMEOUT_SECONDS="120",
                  **extra)
    return Job(out, [HOROVODRUN, "-np", "2", "--min-np", "2", "--max-np", "3",
                     "--host-discovery-script", str(script), "--network-interface", "lo",
                     "--elastic-timeout", "120",
                     sys.executable, "-m", "elastic.worker.lease", "--seconds", str(LEASE),
                     "--adopt-window", str(WINDOW), "--", sys.executable, JOB], env)


@pytest.mark.horovod
@pytest.mark.timeout(900)
def test_a_second_horovodrun_adopts_the_running_world_and_grows_it(tmp_path):
    """The first horovodrun's world of two trains; its whole process group is SIGKILLed (the
    workers, in their own process groups, train on: their wrappers wait to be adopted). A
    second horovodrun with ``ELASTIC_ADOPT_WORLD`` at the same rendezvous port adopts that
    world: the same two processes train on, none is started again, and its events say
    ``adopted``. Then a host is added: the new driver starts a joiner, tells the adopted
    coordinator (rank 0, as the workers said), and the same two processes and the joiner train
    as a world of three. The stop file ends them all with 0, each adopted exit reported on the
    lease wire, and the second horovodrun exits 0."""
    port = free_port()
    script, hosts, _ = discovery_script(tmp_path, "localhost:1\n127.0.0.1:1\n")
    log, stop = tmp_path / "join.jsonl", tmp_path / "stop"
    first = _launch(tmp_path, "run-1", script, port, log, stop)
    second = None
    try:
        wait_for(lambda: len({r["pid"] for r in _steps(log) if r["size"] == 2}) == 2 and len(_steps(log)) >= 40,
                 START_DEADLINE, "the first world of two to train", detail=first.output)
        trainers = {r["pid"] for r in _steps(log) if r["size"] == 2}
        os.killpg(first.proc.pid, signal.SIGKILL)  # horovodrun and its own processes, not the ranks'
        first.proc.wait()
        killed_at = read_log(log)[-1]["time"]

        second = _launch(tmp_path, "run-2", script, port, log, stop, ELASTIC_ADOPT_WORLD=str(WINDOW))
        events = tmp_path / "run-2" / "events.jsonl"

        def adopted() -> bool:
            return any(e.kind == "adopted" for e in read_records(events))
        wait_for(adopted, ADOPT_DEADLINE, "the second horovodrun to adopt the world", detail=second.output)
        record = next(e for e in read_records(events) if e.kind == "adopted")
        assert record.detail["world_size"] == 2
        # its line follows the event (one print, flushed): waited for, not raced
        wait_for(lambda: "adopted the running world of 2 workers" in second.output(), ADOPT_DEADLINE,
                 "horovodrun's line saying it adopted", detail=second.output)
        # the adopted processes still train, and nothing started on their hosts again
        adopted_at = read_log(log)[-1]["time"]
        wait_for(lambda: {r["pid"] for r in _steps(log, adopted_at)} == trainers, START_DEADLINE,
                 "the adopted processes to train on", detail=second.output)
        assert not [r for r in read_log(log) if r["ev"] == "start" and r["time"] > killed_at]

        hosts.write_text(f"localhost:1\n127.0.0.1:1\n{socket.gethostname()}:1\n")
        wait_for(lambda: len({r["pid"] for r in _steps(log, adopted_at) if r["size"] == 3}) == 3, GROW_DEADLINE,
                 "the adopted world and the joiner to train as three", detail=second.output)
        three = {r["pid"] for r in _steps(log, adopted_at) if r["size"] == 3}
        assert trainers < three, "the adopted processes are not the ones in the world of three"

        stop.touch()
        second.proc.wait(timeout=END_DEADLINE)
        assert second.proc.returncode == 0, second.output()
        exits = [e for e in read_records(events) if e.kind == "worker_exit"]
        assert sorted(e.detail["exit_code"] for e in exits) == [0, 0, 0], exits
    finally:
        if second is not None:
            second.close()
        first.close()


@pytest.mark.horovod
@pytest.mark.timeout(900)
def test_a_world_that_lost_a_worker_while_nobody_led_is_adopted_and_trains_on(tmp_path):
    """0112: a peer lost while no launcher leads. The first horovodrun's process group is
    SIGKILLed, then one of its two training processes: the other's collective fails, it
    restores its last commit and begins a reset, which waits for a driver (it says so)
    instead of ending in Gloo's rendezvous. A second horovodrun in adopt mode takes it over
    between two worlds (``adopted`` with ``between_worlds``) and forms the next world with it
    and a new process on the lost one's host: the survivor trains on from its commit, rank 0
    (the new process's state is synced from it), and the job ends with 0. Without the patch's
    wait the survivor dies in Gloo's HTTP store and there is nothing to adopt."""
    port = free_port()
    script, _, _ = discovery_script(tmp_path, "localhost:1\n127.0.0.1:1\n")
    log, stop = tmp_path / "join.jsonl", tmp_path / "stop"
    worker_logs = tmp_path / "worker-logs"  # where a wrapper whose session is gone writes
    worker_logs.mkdir()
    first = _launch(tmp_path, "run-1", script, port, log, stop, TMPDIR=str(worker_logs))
    second = None
    try:
        wait_for(lambda: len({r["pid"] for r in _steps(log) if r["size"] == 2}) == 2 and len(_steps(log)) >= 40,
                 START_DEADLINE, "the first world of two to train", detail=first.output)
        os.killpg(first.proc.pid, signal.SIGKILL)
        first.proc.wait()
        by_host = {r["host"]: r["pid"] for r in _steps(log) if r["size"] == 2}
        survivor, lost = by_host["localhost"], by_host["127.0.0.1"]
        os.kill(lost, signal.SIGKILL)
        killed_at = read_log(log)[-1]["time"]
        last_step = max(r["step"] for r in _steps(log) if r["pid"] == survivor)

        def waits_for_a_driver() -> bool:
            return any("no driver answers the rendezvous" in p.read_text(errors="replace")
                       for p in worker_logs.glob("elastic-run-worker-*.log"))
        wait_for(waits_for_a_driver, START_DEADLINE, "the survivor's reset to wait for a driver",
                 detail=lambda: "\n".join(p.read_text(errors="replace")[-2000:]
                                          for p in worker_logs.glob("elastic-run-worker-*.log")))

        second = _launch(tmp_path, "run-2", script, port, log, stop, ELASTIC_ADOPT_WORLD=str(WINDOW))
        events = tmp_path / "run-2" / "events.jsonl"
        wait_for(lambda: any(e.kind == "adopted" for e in read_records(events)), ADOPT_DEADLINE,
                 "the second horovodrun to adopt the survivor", detail=second.output)
        record = next(e for e in read_records(events) if e.kind == "adopted")
        assert record.detail["between_worlds"] is True and record.detail["world_size"] == 1, record
        wait_for(lambda: "adopted the running world's 1 workers between two worlds" in second.output(),
                 ADOPT_DEADLINE, "horovodrun's line saying it adopted", detail=second.output)

        def next_world() -> list[dict]:
            return [r for r in _steps(log, killed_at) if r["size"] == 2]
        wait_for(lambda: len({r["pid"] for r in next_world()}) == 2, START_DEADLINE,
                 "the survivor and a new process to train as two", detail=second.output)
        steps = next_world()
        assert survivor in {r["pid"] for r in steps} and lost not in {r["pid"] for r in steps}
        first_of = {pid: min(r["step"] for r in steps if r["pid"] == pid) for pid in {r["pid"] for r in steps}}
        assert first_of[survivor] >= last_step, "the survivor did not train on from its last commit"
        assert all(step >= last_step for step in first_of.values()), \
            f"the new process did not get the survivor's state: {first_of}, last step {last_step}"
        assert {r["rank"] for r in steps if r["pid"] == survivor} == {0}

        stop.touch()
        second.proc.wait(timeout=END_DEADLINE)
        assert second.proc.returncode == 0, second.output()
        exits = [e for e in read_records(events) if e.kind == "worker_exit"]
        assert sorted(e.detail["exit_code"] for e in exits) == [0, 0], exits
    finally:
        if second is not None:
            second.close()
        first.close()


@pytest.mark.horovod
@pytest.mark.timeout(600)
def test_with_no_world_to_adopt_horovodrun_says_so_and_starts_the_job(tmp_path):
    """Adopt mode with nobody asking to be adopted (the old world ended, or never started):
    after half the window one line and an ``adoption_failed`` event name what was missing, and
    the job starts as without adoption: a world of two trains and ends with 0."""
    script, _, _ = discovery_script(tmp_path, "localhost:1\n127.0.0.1:1\n")
    log, stop = tmp_path / "join.jsonl", tmp_path / "stop"
    job = _launch(tmp_path, "run-1", script, free_port(), log, stop, ELASTIC_ADOPT_WORLD="10")
    try:
        wait_for(lambda: len({r["pid"] for r in _steps(log) if r["size"] == 2}) == 2, START_DEADLINE,
                 "the job to start and train as two", detail=job.output)
        stop.touch()
        job.proc.wait(timeout=END_DEADLINE)
        assert job.proc.returncode == 0, job.output()
        assert "could not adopt the running world: no worker has asked to be adopted; starting the job " \
               "again" in job.output()
        failed = [e for e in read_records(tmp_path / "run-1" / "events.jsonl") if e.kind == "adoption_failed"]
        assert [e.detail["reason"] for e in failed] == ["no worker has asked to be adopted"]
    finally:
        job.close()


@pytest.mark.parametrize("env, message", [
    ({"ELASTIC_ADOPT_WORLD": "60"}, "needs ELASTIC_RENDEZVOUS_PORT"),
    ({"ELASTIC_ADOPT_WORLD": "soon", "ELASTIC_RENDEZVOUS_PORT": "7000"}, "must be a number of seconds"),
    ({"ELASTIC_ADOPT_WORLD": "-1", "ELASTIC_RENDEZVOUS_PORT": "7000"}, "must be a number of seconds"),
    ({"ELASTIC_ADOPT_WORLD": "inf", "ELASTIC_RENDEZVOUS_PORT": "7000"}, "must be a number of seconds"),
])
def test_a_bad_adopt_window_is_named(env, message):
    with pytest.raises(BadEndpoint, match=message):
        adopt_window(env)


def test_no_adopt_window_is_no_adoption():
    assert adopt_window({}) is None
    assert adopt_window({"ELASTIC_ADOPT_WORLD": "0"}) is None
    assert adopt_window({"ELASTIC_ADOPT_WORLD": "60", "ELASTIC_RENDEZVOUS_PORT": "7000"}) == 60.0
