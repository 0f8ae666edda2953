"""Horovod patches 0103 and 0106-0109: the failure handling around a world that
forms never ends, stalls or shrinks a healthy job.

- aborts during init: an abort reaches a world that is still forming
  (HOROVOD_GLOO_ABORT_DURING_INIT on by default): a peer lost during a rendezvous no longer
  costs the whole Gloo timeout;
- the barrier deadline judging progress: the registration barrier's deadline judges a worker
  that has not checked in by its main thread's progress: a rank busy outside its collectives
  after a failure (rank 0 writing a checkpoint) is not lost;
- a joiner's deadline at --min-np: a joiner taken in at --min-np while still starting keeps
  its join deadline, and its world waits for it before Gloo's rendezvous, not in it;
- the bounded sibling wait: a joiner that waits at the rendezvous waits for joiners still
  starting at most HOROVOD_ELASTIC_JOIN_SIBLING_WAIT_SECONDS, then joins without them.

Through plain horovodrun with a discovery script, as tests/runtime/test_patch_join.py: the
hosts are local names (``localhost``, ``127.0.0.1``, this machine's name) run here without
SSH but treated as distinct hosts; the job is tests/runtime/joins_job.py. Each test fails on
the build before its patch and says why.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runtime.gloo_jobs import GLOO_TIMEOUT, PROMPT, GlooJob, last
from tests.runtime.liveness import alive_check, kill_quietly, pid_gone
from tests.runtime.test_horovod_patches import HOROVODRUN, Job, discovery_script, read_log, run_env
from tests.waiting import wait_for

HERE = Path(__file__).parent
JOB = str(HERE / "joins_job.py")


def start(tmp_path: Path, hosts_text: str, np: int, min_np: int, max_np: int, *extra_argv: str,
          **extra_env: str) -> tuple[Job, Path, Path, Path, Path]:
    """horovodrun running joins_job.py on the hosts of hosts_text. (job, hosts file, step log,
    event log, stop file)."""
    script, hosts, _ = discovery_script(tmp_path, hosts_text)
    log, events, stop = tmp_path / "joins.jsonl", tmp_path / "events.jsonl", tmp_path / "stop"
    env = run_env(JOINS_LOG=str(log), JOINS_STOP=str(stop), HOROVOD_ELASTIC_EVENTS_FILE=str(events),
                  **extra_env)
    job = Job(tmp_path, [HOROVODRUN, "-np", str(np), "--min-np", str(min_np), "--max-np", str(max_np),
                         "--host-discovery-script", str(script), "--network-interface", "lo",
                         "--elastic-timeout", "120", *extra_argv, sys.executable, JOB], env)
    return job, hosts, log, events, stop


def steps(log: Path, after: float = 0.0, **match) -> list[dict]:
    return [r for r in read_log(log) if r["ev"] == "step" and r["time"] > after
            and all(r.get(k) == v for k, v in match.items())]


def kinds(events: Path, kind: str) -> list[dict]:
    return [e for e in read_log(events) if e["kind"] == kind]


def first(log: Path, **match) -> dict | None:
    return next((r for r in read_log(log) if all(r.get(k) == v for k, v in match.items())), None)


def finish(job: Job, stop: Path) -> None:
    stop.touch()
    job.proc.wait(timeout=240)
    assert job.proc.returncode == 0, job.output()


def pid_of(log: Path, host: str, slot: int = 0) -> int:
    return int(Path(f"{log}.pid.{host}.{slot}").read_text())


@pytest.mark.timeout(300)
def test_an_abort_during_init_fails_the_init_by_default(tmp_path, monkeypatch):
    """0103/0108/0109: rank 1 stops before hvd.init, so rank 0's init waits in the rendezvous for it;
    rank 0 is then aborted (what the elastic driver's WorkerLostRequest does when a peer of
    a forming world is lost). Without HOROVOD_GLOO_ABORT_DURING_INIT in the environment the
    init must fail within PROMPT s with HorovodInternalError. Before aborts during init (the
    Gloo abort: off unless set to 1) the abort did nothing and the init waited out the Gloo timeout."""
    monkeypatch.delenv("HOROVOD_GLOO_ABORT_DURING_INIT", raising=False)
    job = GlooJob(tmp_path, "gloo_abort_job.py", 2, GLOO_ABORT_MODE="init")
    try:
        out = job.out
        wait_for(lambda: last(out, 1, "freezing") and last(out, 0, "init"), 180,
                 "rank 1 to stop and rank 0 to start hvd.init", alive=job.alive, detail=job.detail)
        (out / "abort").touch()
        failed = wait_for(lambda: last(out, 0, "init_failed"), PROMPT,
                          f"rank 0's hvd.init to fail (without aborts during init: after Gloo's {GLOO_TIMEOUT} s)",
                          alive=job.alive, detail=job.detail)
    finally:
        job.close()
    assert failed["error"] == "HorovodInternalError", failed


@pytest.mark.timeout(500)
@pytest.mark.parametrize("busy_in", ["main", "background"])
def test_a_rank_busy_outside_collectives_after_a_failure_is_not_lost(tmp_path, busy_in):
    """0108 (the barrier deadline judges progress; declared work): rank 0 (localhost) spends 15 s outside any
    collective (it saves a checkpoint and computes, again and again; in its main thread, or in
    the trainer's background writer while its main thread waits idle for it, as a trainer's
    restore waits for its write in flight) and meanwhile the worker on 127.0.0.1 is killed: the third
    worker checks in for the next world at once, rank 0 only when its next collective fails.
    The barrier deadline is 3 s: at it, and every 3 s after, the driver asks rank 0 how far
    its main thread has come, finds it busy and keeps it. Rank 0 and the third worker then
    train at world size 2; nobody else is lost. Before the barrier deadline judged progress
    rank 0 was lost 3 s after the others checked in ("not checked in"), its host blacklisted,
    the job went on without it;
    before declared work, so was the rank waiting for its background writer."""
    me = socket.gethostname()
    job, _, log, events, stop = start(
        tmp_path, f"localhost:1\n127.0.0.1:1\n{me}:1\n", 3, 1, 3,
        JOINS_BUSY_HOST="localhost", JOINS_BUSY_AT_STEP="20", JOINS_BUSY_SECONDS="15", JOINS_BUSY_IN=busy_in,
        HOROVOD_ELASTIC_BARRIER_DEADLINE_SECONDS="3", HOROVOD_GLOO_TIMEOUT_SECONDS="300")
    victim = None
    try:
        wait_for(lambda: Path(f"{log}.busy").exists(), 240, "rank 0 to start its work outside collectives",
                 alive=alive_check(job), detail=job.output)
        victim = pid_of(log, "127.0.0.1")
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: any(e["detail"]["host"] == "localhost" for e in kinds(events, "worker_lost"))
                 or (steps(log, host="localhost", size=2) and steps(log, host=me, size=2)), 180,
                 "rank 0 and the third worker to train at world size 2, or rank 0 to be lost",
                 alive=alive_check(job), detail=job.output)
        lost = [e["detail"] for e in kinds(events, "worker_lost")]
        assert not any(d["host"] == "localhost" for d in lost), f"the busy rank 0 was lost: {lost}"
        finish(job, stop)
    finally:
        kill_quietly(victim if victim is not None and not pid_gone(victim) else None)
        job.close()
    busy = kinds(events, "barrier_busy")
    assert busy and all(e["detail"]["host"] == "localhost" for e in busy), busy
    assert not kinds(events, "worker_lost"), kinds(events, "worker_lost")


@pytest.mark.timeout(500)
def test_a_joiner_taken_in_at_min_np_that_hangs_is_lost_at_its_join_deadline(tmp_path):
    """0107 (with 0103's aborts during init): a world of two at --min-np 2; a joiner starts on
    this machine's name and hangs before hvd.init; the worker on 127.0.0.1 is killed. The next world would be
    below --min-np without the joiner, so it is taken in while still starting. Its join
    deadline (20 s from its start; it is taken in within a second or two of it) keeps
    running: it is lost then, its world (rank 0 waiting
    for it before the rendezvous) aborted, and rank 0 trains again with a new worker on
    127.0.0.1 (its blacklist cooldown is 1-2 s). Gloo's timeout is 300 s. Before a joiner kept
    its deadline at --min-np the deadline stopped when the joiner was taken in: rank 0 waited in the rendezvous for the
    hung joiner for the whole Gloo timeout, then for it at the barrier, forever."""
    me = socket.gethostname()
    job, hosts, log, events, stop = start(
        tmp_path, "localhost:1\n127.0.0.1:1\n", 2, 2, 3, "--blacklist-cooldown-range", "1", "2",
        JOINS_BEFORE_INIT=f"{me}:0=sleep:600", HOROVOD_ELASTIC_JOIN_DEADLINE_SECONDS="20",
        HOROVOD_GLOO_TIMEOUT_SECONDS="300")
    joiner = None
    try:
        wait_for(lambda: len(steps(log, size=2)) >= 40, 240, "the world of two to train",
                 alive=alive_check(job), detail=job.output)
        hosts.write_text(f"localhost:1\n127.0.0.1:1\n{me}:1\n")
        started = wait_for(lambda: first(log, ev="start", host=me), 120, "the joiner to start",
                           alive=alive_check(job), detail=job.output)
        joiner = started["pid"]
        os.kill(pid_of(log, "127.0.0.1"), signal.SIGKILL)
        taken = wait_for(lambda: [e for e in kinds(events, "joiner_taken") if e["detail"]["host"] == me], 120,
                         "the starting joiner to be taken in at --min-np", alive=alive_check(job), detail=job.output)
        assert taken[0]["detail"]["waited"] is None, taken
        lost = wait_for(lambda: [e for e in kinds(events, "worker_lost") if e["detail"]["host"] == me], 150,
                        "the hung joiner to be lost at its join deadline (before it kept that deadline: never)",
                        alive=alive_check(job), detail=job.output)
        since = lost[0]["time"]
        wait_for(lambda: len(steps(log, after=since, host="localhost")) >= 20, 240,
                 "rank 0 to train again after the joiner was lost", alive=alive_check(job), detail=job.output)
        wait_for(lambda: pid_gone(joiner), 30, "the driver to end the hung joiner")
        joiner = None
        finish(job, stop)
    finally:
        kill_quietly(joiner)
        job.close()
    assert "join deadline" in lost[0]["detail"]["reason"] or "JOIN_DEADLINE" in lost[0]["detail"]["reason"], lost


@pytest.mark.timeout(600)
def test_a_slow_joiner_taken_in_at_min_np_does_not_fail_the_rendezvous(tmp_path):
    """0107: as above, but the joiner is slow, not hung: 20 s of set-up before hvd.init, twice
    Gloo's timeout of 10 s. Its world (rank 0) waits for it before the rendezvous, so the
    rendezvous starts once it is ready and succeeds: rank 0 and the joiner train at world size
    2, no worker is lost and no rank fails. Before a joiner kept its deadline at --min-np rank 0
    waited in the rendezvous, ran out Gloo's 10 s timeout again and again, and the joiner's first world failed."""
    me = socket.gethostname()
    job, hosts, log, events, stop = start(
        tmp_path, "localhost:1\n127.0.0.1:1\n", 2, 2, 3, "--blacklist-cooldown-range", "1", "2",
        JOINS_BEFORE_INIT=f"{me}:0=sleep:20", HOROVOD_GLOO_TIMEOUT_SECONDS="10")
    try:
        wait_for(lambda: len(steps(log, size=2)) >= 40, 240, "the world of two to train",
                 alive=alive_check(job), detail=job.output)
        hosts.write_text(f"localhost:1\n127.0.0.1:1\n{me}:1\n")
        wait_for(lambda: first(log, ev="start", host=me), 120, "the joiner to start",
                 alive=alive_check(job), detail=job.output)
        killed = pid_of(log, "127.0.0.1")
        os.kill(killed, signal.SIGKILL)
        taken = wait_for(lambda: [e for e in kinds(events, "joiner_taken") if e["detail"]["host"] == me], 120,
                         "the starting joiner to be taken in at --min-np", alive=alive_check(job), detail=job.output)
        assert taken[0]["detail"]["waited"] is None, taken
        wait_for(lambda: steps(log, host=me) and steps(log, after=taken[0]["time"], host="localhost"), 240,
                 "rank 0 and the joiner to train", alive=alive_check(job), detail=job.output)
        finish(job, stop)
    finally:
        job.close()
    assert not kinds(events, "worker_lost"), kinds(events, "worker_lost")
    # exits once the job ends do not count: a joiner the driver started meanwhile on the
    # killed host (back after its 1-2 s cooldown) is ended with 143 by the job's stop
    stopped = min((e["time"] for e in kinds(events, "stop")), default=float("inf"))
    failed = [e["detail"] for e in kinds(events, "worker_exit")
              if e["detail"]["exit_code"] not in (0, None) and taken[0]["time"] < e["time"] < stopped]
    assert not failed, f"ranks failed while the slow joiner started: {failed}"
    assert len([r for r in read_log(log) if r["ev"] == "start" and r["host"] == me]) == 1, \
        "the joiner's host got another worker: its first one failed"


@pytest.mark.timeout(600)
def test_a_ready_joiner_joins_without_a_sibling_that_still_starts(tmp_path):
    """0107 (a ready joiner's bounded sibling wait): a host with two slots joins a world of two;
    its slot 1's set-up lasts until the test ends it (a file). Slot 0 waits at the rendezvous for its sibling at most
    HOROVOD_ELASTIC_JOIN_SIBLING_WAIT_SECONDS (5 s by default), then joins alone: the world
    trains at size 3 while slot 1 still starts, and at size 4 once it is in. Before the bounded sibling wait the
    ready joiner waited for its sibling's whole set-up (up to the 300 s join deadline): the
    world went from 2 straight to 4."""
    me = socket.gethostname()
    job, hosts, log, events, stop = start(
        tmp_path, "localhost:1\n127.0.0.1:1\n", 2, 2, 4, JOINS_BEFORE_INIT=f"{me}:1=wait:set-up-done",
        HOROVOD_GLOO_TIMEOUT_SECONDS="120")
    try:
        wait_for(lambda: len(steps(log, size=2)) >= 40, 240, "the world of two to train",
                 alive=alive_check(job), detail=job.output)
        hosts.write_text(f"localhost:1\n127.0.0.1:1\n{me}:2\n")
        wait_for(lambda: steps(log, size=3), 300, "the world to train at size 3 while slot 1 still sets up "
                 "(without the sibling wait: the ready joiner waits for it)", alive=alive_check(job), detail=job.output)
        assert not first(log, ev="init_called", host=me, slot=1)
        Path(f"{log}.set-up-done").touch()
        wait_for(lambda: steps(log, size=4, host=me, slot=1), 300, "the slow sibling to join (world size 4)",
                 alive=alive_check(job), detail=job.output)
        finish(job, stop)
    finally:
        job.close()
    alone = kinds(events, "joiner_alone")
    assert [(e["detail"]["host"], e["detail"]["slot"]) for e in alone] == [(me, 0)], alone
    assert not kinds(events, "worker_lost") and not kinds(events, "joiner_dropped")


@pytest.mark.timeout(900)
def test_a_failed_joiners_ready_sibling_is_dropped_and_its_host_tried_again_after_its_refusal(tmp_path):
    """The project's driver (the joins' core, elastic/driver/joins.py): a 2-slot host joins a
    world of two; its slot 0 fails at start (exit 3) until the test mends it, its slot 1 starts
    fine and waits at the rendezvous. Slot 1 could be taken in only with slot 0 (local ranks
    0..n-1): while the host is refused it is dropped, not left waiting; the host is tried again
    once each refusal (3 s here, doubling) ends, and once slot 0 starts fine both join (size 4).
    Before, slot 1 waited at the rendezvous holding its memory while the host was refused (with
    the fork's refusal, for ever) and was never dropped."""
    me = socket.gethostname()
    job, hosts, log, events, stop = start(
        tmp_path, "localhost:1\n127.0.0.1:1\n", 2, 2, 4, JOINS_BEFORE_INIT=f"{me}:0=exit-unless:slot-0-mended",
        HOROVOD_ELASTIC_QUARANTINE_SECONDS="3", HOROVOD_GLOO_TIMEOUT_SECONDS="120")

    def on_me(kind: str, slot: int, after: float = 0.0) -> list[dict]:
        return [e for e in kinds(events, kind) if e["detail"]["host"] == me and e["detail"].get("slot", slot) == slot
                and e["time"] > after]

    try:
        wait_for(lambda: len(steps(log, size=2)) >= 40, 240, "the world of two to train",
                 alive=alive_check(job), detail=job.output)
        hosts.write_text(f"localhost:1\n127.0.0.1:1\n{me}:2\n")
        stranded = wait_for(lambda: [e for e in on_me("joiner_dropped", 1) if "has no worker" in e["detail"]["reason"]],
                            240, "slot 1 dropped while slot 0 has no worker and the host is refused (before: it "
                            "waited at the rendezvous)", alive=alive_check(job), detail=job.output)
        since = stranded[0]["time"]
        ended = wait_for(lambda: on_me("refusal_ended", 0, after=since), 240, "the host's refusal to end",
                         alive=alive_check(job), detail=job.output)
        wait_for(lambda: on_me("worker_start", 0, after=ended[0]["time"]), 120, "slot 0 tried again after the refusal",
                 alive=alive_check(job), detail=job.output)
        Path(f"{log}.slot-0-mended").touch()
        wait_for(lambda: steps(log, size=4, host=me, slot=1), 400, "both slots of the host to join (world size 4)",
                 alive=alive_check(job), detail=job.output)
        finish(job, stop)
    finally:
        job.close()
    assert "slot 0 of its host has no worker" in stranded[0]["detail"]["reason"], stranded
    assert not kinds(events, "worker_lost"), "a joiner's failure cost the world a worker"
    # every start on the host after a drop came after a refusal's end: the host was refused
    drops = [e["time"] for e in on_me("joiner_dropped", 0) if "has no worker" not in e["detail"]["reason"]]
    ends = [e["time"] for e in on_me("refusal_ended", 0)]
    for start_ in [e["time"] for e in on_me("worker_start", 0)]:
        before = [d for d in drops if d < start_]
        assert not before or any(max(before) <= end <= start_ for end in ends), \
            f"slot 0 started again on the refused host before its refusal ended: {drops=} {ends=}"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("value", ["soon", "-1", "nan"])
def test_a_bad_sibling_wait_is_a_one_line_error(tmp_path, value):
    """0108: a bad HOROVOD_ELASTIC_JOIN_SIBLING_WAIT_SECONDS is a one-line usage error and exit 2
    before anything starts, as the driver's other variables (SIGTERM leaves). Before the bounded sibling wait it
    was ignored."""
    script, _, _ = discovery_script(tmp_path, "localhost:1\n")
    proc = subprocess.run([HOROVODRUN, "-np", "1", "--min-np", "1", "--host-discovery-script", str(script),
                           sys.executable, "-c", "pass"],
                          env=run_env(HOROVOD_ELASTIC_JOIN_SIBLING_WAIT_SECONDS=value), capture_output=True,
                          text=True, timeout=50)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("horovodrun: error:")]
    assert len(lines) == 1 and "HOROVOD_ELASTIC_JOIN_SIBLING_WAIT_SECONDS" in lines[0], proc.stderr
