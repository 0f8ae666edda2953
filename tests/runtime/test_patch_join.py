"""Horovod patch 0107: spawn first, notify later. A host that joins gets its worker at once,
while the world keeps training; the coordinator hears of the change only once that worker
waits at the rendezvous (its hvd.init asked for its rank), so the world pauses for the
rendezvous and the state sync, not for the joiner's start-up. A joiner that fails, hangs or
loses its host before it is ready is dropped and the world never resets for it.

Through plain horovodrun with a discovery script, as tests/runtime/test_horovod_patches.py:
the hosts are local names (``localhost``, ``127.0.0.1``, this machine's name) run here
without SSH but treated as distinct hosts. The joiner is the worker on this machine's name;
its script (join_job.py) sleeps or exits before hvd.init(). Each test fails on a build
without spawn first and says why.
"""
from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runtime.liveness import alive_check, pid_gone
from tests.runtime.test_horovod_patches import HOROVODRUN, Job, discovery_script, read_log, run_env
from tests.waiting import wait_for

HERE = Path(__file__).parent
JOB = str(HERE / "join_job.py")
# How long a join pauses training (last step at the old size -> first at the new one) is
# measured by scripts/benchmarks/bench-elastic --scenario join, side by side with stock Horovod,
# never bounded here: on a loaded machine a reset's own rendezvous and sync take what the load
# gives them. The tests assert the order of events that makes the pause short.
JOINER_SETUP_S = 20.0


def start_job(tmp_path: Path, before_init: str, **extra: str) -> tuple[Job, Path, Path, Path, Path, str]:
    """A job on localhost and 127.0.0.1 (--min-np 2 --max-np 3); the joiner's host is this
    machine's name, not listed yet. (job, hosts file, step log, event log, stop file, joiner host)."""
    me = socket.gethostname()
    script, hosts, _ = discovery_script(tmp_path, "localhost:1\n127.0.0.1:1\n")
    log, events, stop = tmp_path / "join.jsonl", tmp_path / "events.jsonl", tmp_path / "stop"
    env = run_env(JOIN_LOG=str(log), JOIN_STOP=str(stop), JOIN_SLOW_HOST=me, JOIN_BEFORE_INIT=before_init,
                  HOROVOD_ELASTIC_EVENTS_FILE=str(events), HOROVOD_GLOO_TIMEOUT_SECONDS="120", **extra)
    job = Job(tmp_path, [HOROVODRUN, "-np", "2", "--min-np", "2", "--max-np", "3",
                         "--host-discovery-script", str(script), "--network-interface", "lo",
                         "--elastic-timeout", "120", sys.executable, JOB], env)
    wait_for(lambda: steps(log, size=2, after=0) >= 20, 240, "the world of two to train",
             alive=alive_check(job), detail=job.output)
    return job, hosts, log, events, stop, me


def steps(log: Path, size: int, after: float, until: float = float("inf")) -> int:
    """How many steps were logged at world size ``size`` within (after, until)."""
    return sum(1 for r in read_log(log) if r["ev"] == "step" and r["size"] == size and after < r["time"] < until)


def first(records: list, **match) -> dict | None:
    return next((r for r in records if all(r.get(k) == v for k, v in match.items())), None)


def finish(job: Job, stop: Path) -> None:
    stop.touch()
    job.proc.wait(timeout=240)
    assert job.proc.returncode == 0, job.output()


def kinds(events: Path, kind: str) -> list:
    return [e for e in read_log(events) if e["kind"] == kind]


@pytest.mark.timeout(500)
def test_a_joiner_with_a_long_start_up_joins_while_the_world_trains(tmp_path):
    """0107/0108: a joiner whose script sleeps 20 s before hvd.init() joins a world of two. While it
    starts, the two keep stepping (at least 50 steps at size 2 between its start and its call
    of hvd.init: 20 s of 0.05 s steps), and the coordinator hears of the joiner only after it
    is ready, so the pause holds no part of its start-up. Before spawn first the coordinator was told at once,
    the world reset and then waited in the rendezvous for the joiner's whole start-up: no step
    during it, a pause over 20 s."""
    job, hosts, log, events, stop, me = start_job(tmp_path, f"sleep:{JOINER_SETUP_S:g}")
    try:
        hosts.write_text(f"localhost:1\n127.0.0.1:1\n{me}:1\n")
        wait_for(lambda: steps(log, size=3, after=0) >= 20, 300, "the world of three to train",
                 alive=alive_check(job), detail=job.output)
        finish(job, stop)
    finally:
        job.close()
    records = read_log(log)
    joiner_start = first(records, ev="start", host=me)
    joiner_init = first(records, ev="init_called", host=me)
    assert joiner_start and joiner_init, f"the joiner's start-up was not logged:\n{job.output()}"
    during = steps(log, size=2, after=joiner_start["time"], until=joiner_init["time"])
    assert during >= 50, (
        f"the world of two made {during} steps during the joiner's {JOINER_SETUP_S:g} s start-up: "
        "it waited for the joiner instead of training")
    ready = kinds(events, "joiner_ready")
    assert [(e["detail"]["host"], e["detail"]["slot"]) for e in ready] == [(me, 0)], ready
    notified = [e for e in kinds(events, "notify") if e["time"] > joiner_start["time"]]
    assert notified and notified[0]["time"] >= ready[0]["time"], \
        "the coordinator was told of the joiner before it waited at the rendezvous"


@pytest.mark.timeout(500)
@pytest.mark.parametrize("before_init, extra, why", [
    ("exit:3", {}, "exited with 3 before it was waiting at the rendezvous"),
    ("sleep:600", {"HOROVOD_ELASTIC_JOIN_DEADLINE_SECONDS": "5"}, "not waiting at the rendezvous 5 s after"),
], ids=["dies", "hangs"])
def test_a_joiner_that_fails_before_it_is_ready_never_resets_the_world(tmp_path, before_init, extra, why):
    """0107/0108: a joiner dies before hvd.init() (exit 3), or hangs there past
    HOROVOD_ELASTIC_JOIN_DEADLINE_SECONDS (5 s here): the driver drops it with a line saying
    why, ends its process, starts no other worker on its host until its refusal ends, and the
    world of two trains on without a reset, abort or rollback. Before spawn first the world reset for
    the join at once and then lost the joiner: a second reset (dies), or waited in the
    rendezvous for it (hangs)."""
    job, hosts, log, events, stop, me = start_job(tmp_path, before_init, **extra)
    try:
        hosts.write_text(f"localhost:1\n127.0.0.1:1\n{me}:1\n")
        dropped = wait_for(lambda: kinds(events, "joiner_dropped"), 240,
                           "the driver to drop the joiner (before spawn first: no such event)",
                           alive=alive_check(job), detail=job.output)
        since = dropped[0]["time"]
        wait_for(lambda: steps(log, size=2, after=since) >= 40, 120, "the world of two to train on",
                 alive=alive_check(job), detail=job.output)
        finish(job, stop)
    finally:
        job.close()
    assert why in dropped[0]["detail"]["reason"], dropped
    assert f"joiner {me}[0] dropped: " in job.output(), "no line saying why the joiner was dropped"
    resets = kinds(events, "reset")
    assert len(resets) == 1, f"the world was reset for a joiner that never was ready: {resets}"
    assert not kinds(events, "abort") and not kinds(events, "worker_lost")
    # its host is refused after each drop: nothing starts there again until that refusal ends
    # (the project's driver: a cooldown, docs/driver.md; the fork's: until the host leaves
    # discovery), and a joiner that fails again resets nothing either (one reset, above)
    starts = [e["time"] for e in kinds(events, "worker_start") if e["detail"]["host"] == me]
    drops = [e["time"] for e in kinds(events, "joiner_dropped") if e["detail"]["host"] == me]
    ends = [e["time"] for e in kinds(events, "refusal_ended") if e["detail"]["host"] == me]
    for start in starts[1:]:
        drop = max(d for d in drops if d < start)
        assert any(drop <= end <= start for end in ends), \
            f"a worker started on the refused host before its refusal ended: {starts=} {drops=} {ends=}"
    pids = {r["pid"] for r in read_log(log) if r["host"] == me}
    assert all(pid_gone(pid) for pid in pids), "the dropped joiner's process still runs"


@pytest.mark.timeout(500)
def test_a_host_that_leaves_while_its_joiner_starts_resets_nothing(tmp_path):
    """0107/0108: the joiner's host leaves discovery while its worker is still in its set-up (before
    hvd.init): the driver drops the joiner and ends its process; the world never hears of the
    host and trains on without a reset. Before spawn first the world reset for the host at once, and
    again when it left."""
    job, hosts, log, events, stop, me = start_job(tmp_path, "sleep:600")
    try:
        hosts.write_text(f"localhost:1\n127.0.0.1:1\n{me}:1\n")
        wait_for(lambda: first(read_log(log), ev="start", host=me), 240, "the joiner to start",
                 alive=alive_check(job), detail=job.output)
        hosts.write_text("localhost:1\n127.0.0.1:1\n")
        dropped = wait_for(lambda: kinds(events, "joiner_dropped"), 120, "the driver to drop the joiner",
                           alive=alive_check(job), detail=job.output)
        wait_for(lambda: steps(log, size=2, after=dropped[0]["time"]) >= 40, 120, "the world of two to train on",
                 alive=alive_check(job), detail=job.output)
        finish(job, stop)
    finally:
        job.close()
    assert "its host left discovery" in dropped[0]["detail"]["reason"], dropped
    assert len(kinds(events, "reset")) == 1, kinds(events, "reset")
    pids = {r["pid"] for r in read_log(log) if r["host"] == me}
    assert pids and all(pid_gone(pid) for pid in pids), "the dropped joiner's process still runs"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("value", ["soon", "-5", "inf"])
def test_a_bad_join_deadline_is_a_one_line_error(tmp_path, value):
    """0107/0108: a bad HOROVOD_ELASTIC_JOIN_DEADLINE_SECONDS is a one-line usage error and exit 2 before
    anything starts, as the driver's other variables (SIGTERM leaves). Before spawn first it was ignored."""
    script, _, _ = discovery_script(tmp_path, "localhost:1\n")
    proc = subprocess.run([HOROVODRUN, "-np", "1", "--min-np", "1", "--host-discovery-script", str(script),
                           sys.executable, "-c", "pass"],
                          env=run_env(HOROVOD_ELASTIC_JOIN_DEADLINE_SECONDS=value), capture_output=True,
                          text=True, timeout=50)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("horovodrun: error:")]
    assert len(lines) == 1 and "HOROVOD_ELASTIC_JOIN_DEADLINE_SECONDS" in lines[0], proc.stderr
