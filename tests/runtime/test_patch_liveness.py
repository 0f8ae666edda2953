"""Horovod patches 0106 and 0108: vanished and frozen workers leave the world in seconds,
every request between the driver and a worker has a deadline.

Through plain horovodrun with a discovery script, as tests/runtime/test_horovod_patches.py:
the hosts are local names (``localhost``, ``127.0.0.1``, this machine's name) that horovodrun
runs here without SSH but treats as distinct hosts. A worker is frozen with SIGSTOP (its
notification service too: no FIN, no RST, as on a hung or partitioned node). Each test fails
on a build without its fix (with the fixes before it) and says why.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from shared.event_kinds import Kind
from tests.runtime.liveness import alive_check, job_argv, lose_one, sizes_after, stop
from tests.runtime.test_horovod_patches import HOROVODRUN, Job, answers, discovery_script, read_log, run_env
from tests.waiting import wait_for

SERVICE = """
import os, sys, time
from horovod.runner.elastic.worker import WorkerNotificationManager, WorkerNotificationService
from horovod.runner.common.util import secret
key = secret.make_secret_key()
service = WorkerNotificationService(key, ['lo'], WorkerNotificationManager())
print(repr((service.addresses(), key)), flush=True)
time.sleep(600)
"""


@pytest.mark.timeout(120)
def test_a_request_to_a_frozen_worker_fails_within_its_deadline():
    """0106: the driver's client of a worker's notification service (what the notifier of a host
    change kept until acted on and the aborts for a lost worker use) against a real service in a
    process then frozen with SIGSTOP.
    The kernel accepts the connection, nothing answers: stock BasicClient set no socket timeout
    and the request blocked forever (the notifier thread with it, and stop(), which joins it)."""
    from horovod.runner.elastic.worker import HostUpdateResult, WorkerNotificationClient

    proc = subprocess.Popen([sys.executable, "-c", SERVICE], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        addresses, key = eval(proc.stdout.readline())  # noqa: S307 - our own child's repr
        client = WorkerNotificationClient(addresses, key, verbose=0)
        client.notify_hosts_updated(1, HostUpdateResult.added)  # answered while it runs
        os.kill(proc.pid, signal.SIGSTOP)
        outcome: list = []

        def send() -> None:
            try:
                client.notify_hosts_updated(2, HostUpdateResult.added)
                outcome.append("answered")
            except Exception as error:  # noqa: BLE001 - any failure is the expected outcome
                outcome.append(error)

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        wait_for(lambda: outcome, 60, "the request to the frozen service to fail (stock: never)")
        assert outcome[0] != "answered"
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.mark.timeout(400)
def test_a_vanished_host_leaves_the_world_without_waiting_for_its_process(tmp_path):
    """0106: a worker's host vanishes (the process is frozen mid-training) and leaves discovery.
    After the leave grace the driver records the worker as failed and terminates its process
    itself: the survivors train at world size 2 without anyone ending the frozen process.
    Before the leave grace (the aborts for a lost worker only abort the collectives) the next
    world waited for the frozen process to exit (on a real cluster: its ssh client, 60 s) - here, forever. The liveness
    check is turned off, so this is the leave path alone."""
    me = socket.gethostname()
    script, hosts, _ = discovery_script(tmp_path, f"localhost:1\n127.0.0.1:1\n{me}:1\n")
    log = tmp_path / "live.jsonl"
    env = run_env(LIVE_LOG=str(log), LIVE_STEPS="250", LIVE_DIE_HOST="127.0.0.1", LIVE_DIE_AT_STEP="20",
                  LIVE_DIE_SIGNAL="STOP", HOROVOD_GLOO_TIMEOUT_SECONDS="300",
                  HOROVOD_ELASTIC_LIVENESS_TIMEOUT_SECONDS="0", HOROVOD_ELASTIC_LEAVE_GRACE_SECONDS="2")
    job = Job(tmp_path, job_argv(script, 3, 2), env)
    lose_one(job, log, "died", "the worker on 127.0.0.1 to freeze", {("localhost", 2), (me, 2)},
             "the survivors to train at world size 2 (without the leave grace: never, the frozen process holds it)",
             "the driver to end the frozen process", then=lambda: hosts.write_text(f"localhost:1\n{me}:1\n"))


@pytest.mark.timeout(400)
def test_a_silent_worker_whose_host_left_is_lost_without_the_grace(tmp_path):
    """0108: a worker freezes (SIGSTOP) and its host then leaves discovery (a node gone, marked
    NotReady). Its liveness pings have gone unanswered, so it is not finishing a graceful
    leave: the driver loses it at once instead of after the leave grace. The grace and the
    liveness timeout are both 150 s here and the Gloo timeout 300 s, so only the new path can
    free the survivors within the 90 s they are given. Before a silent leaver was lost at once
    the frozen worker stayed in the world for the whole grace."""
    me = socket.gethostname()
    script, hosts, _ = discovery_script(tmp_path, f"localhost:1\n127.0.0.1:1\n{me}:1\n")
    log, events = tmp_path / "live.jsonl", tmp_path / "events.jsonl"
    env = run_env(LIVE_LOG=str(log), LIVE_STEPS="250", LIVE_DIE_HOST="127.0.0.1", LIVE_DIE_AT_STEP="20",
                  LIVE_DIE_SIGNAL="STOP", HOROVOD_GLOO_TIMEOUT_SECONDS="300",
                  HOROVOD_ELASTIC_LIVENESS_TIMEOUT_SECONDS="150", HOROVOD_ELASTIC_EVENTS_FILE=str(events))
    job = Job(tmp_path, job_argv(script, 3, 2, "--elastic-leave-grace", "150"), env)
    lose_one(job, log, "died", "the worker on 127.0.0.1 to freeze", {("localhost", 2), (me, 2)},
             "the survivors to train at world size 2 (a silent leaver kept: after the 150 s leave grace)",
             "the driver to end the frozen process", then=lambda: hosts.write_text(f"localhost:1\n{me}:1\n"))
    lost = [r for r in read_log(events) if r["kind"] == Kind.WORKER_LOST]
    assert [r["detail"]["host"] for r in lost] == ["127.0.0.1"], lost
    assert "no answer from it" in lost[0]["detail"]["reason"], lost


@pytest.mark.timeout(400)
@pytest.mark.parametrize("frozen", ["127.0.0.1", "localhost"], ids=["rank1", "coordinator"])
def test_a_frozen_worker_on_a_listed_host_is_lost_and_its_host_gets_no_new_worker(tmp_path, frozen):
    """0108: a worker freezes (SIGSTOP) and its host stays in discovery (a hung process on a
    node Kubernetes sees as Ready); the coordinator too. The Gloo timeout is 300 s. The
    driver's pings go unanswered, the worker is lost after the liveness timeout: its peers are
    aborted, it is recorded once and terminated, and the survivors train at world size 2.
    Its host is quarantined: though the blacklist cooldown (1-2 s) ends, no worker is started
    there again while it stays listed and its quarantine lasts (quarantine with probation: a
    cooldown, an hour here; tests/runtime/test_patch_detector.py has the host come back after it). Before liveness
    the survivors waited in their collective for the 300 s Gloo timeout (the test gives them
    90 s)."""
    me = socket.gethostname()
    script, _, _ = discovery_script(tmp_path, f"localhost:1\n127.0.0.1:1\n{me}:1\n")
    log, events = tmp_path / "live.jsonl", tmp_path / "events.jsonl"
    env = run_env(LIVE_LOG=str(log), LIVE_STEPS="250", LIVE_DIE_HOST=frozen, LIVE_DIE_AT_STEP="20",
                  LIVE_DIE_SIGNAL="STOP", HOROVOD_GLOO_TIMEOUT_SECONDS="300",
                  HOROVOD_ELASTIC_EVENTS_FILE=str(events), HOROVOD_ELASTIC_QUARANTINE_SECONDS="3600")
    job = Job(tmp_path, job_argv(script, 3, 2, "--blacklist-cooldown-range", "1", "2"), env)
    survivors = {h for h in ("localhost", "127.0.0.1", me) if h != frozen}
    lose_one(job, log, "died", f"the worker on {frozen} to freeze", {(h, 2) for h in survivors},
             "the survivors to train at world size 2 (before liveness: the 300 s Gloo timeout)",
             "the driver to end the frozen process")
    records = read_log(events)
    lost = [r for r in records if r["kind"] == Kind.WORKER_LOST]
    assert [r["detail"]["host"] for r in lost] == [frozen], lost
    restarted = [r for r in records if r["kind"] == Kind.WORKER_START and r["detail"]["host"] == frozen
                 and r["time"] > lost[0]["time"]]
    assert not restarted, f"a worker was started on the silent host {frozen} again: {restarted}"
    last = max(r["step"] for r in read_log(log))
    assert {r["host"] for r in read_log(log) if r["step"] == last} == survivors


@pytest.mark.timeout(400)
def test_a_worker_that_never_checks_in_is_lost_at_the_barrier_deadline(tmp_path):
    """0108: a worker is killed; of its two peers (aborted as for any lost worker), one checks in
    for the next world and the other hangs before it does (its main thread stuck, its notification
    thread answering the driver's pings, so liveness does not see it). After the barrier
    deadline (3 s here) the driver loses the hung worker and the last one trains alone.
    Stock, the registration barrier has no deadline: the job waits for it forever."""
    me = socket.gethostname()
    script, _, _ = discovery_script(tmp_path, f"localhost:1\n127.0.0.1:1\n{me}:1\n")
    log = tmp_path / "live.jsonl"
    env = run_env(LIVE_LOG=str(log), LIVE_STEPS="250", LIVE_DIE_HOST="127.0.0.1", LIVE_DIE_AT_STEP="20",
                  LIVE_DIE_SIGNAL="KILL", LIVE_HANG_HOST=me, HOROVOD_GLOO_TIMEOUT_SECONDS="300",
                  HOROVOD_ELASTIC_BARRIER_DEADLINE_SECONDS="3")
    job = Job(tmp_path, job_argv(script, 3, 1), env)
    lose_one(job, log, "hung", f"the worker on {me} to hang", {("localhost", 1)},
             "the last worker to train alone (without the barrier deadline: never)",
             "the driver to end the hung process")


@pytest.mark.timeout(400)
def test_a_host_that_flaps_within_the_grace_aborts_nothing_and_resets_nothing(tmp_path):
    """0106: a host leaves discovery and is listed again at once (a readiness blip), well
    within the leave grace (8 s here). Nothing is aborted and no worker is lost. Before aborts that
    named their world the driver aborted every rank at the end of the grace if the host's workers were in the
    world then, which they are again once it is back: a healthy world was broken.
    With held readiness flaps the world does not reset either: the driver held the removal back
    (its workers answered, none was leaving) and dropped it when the host came back, so the
    coordinator was told of neither change. Before, the flap cost two resets (the removal, then
    the return)."""
    me = socket.gethostname()
    everyone = f"localhost:1\n127.0.0.1:1\n{me}:1\n"
    script, hosts, calls = discovery_script(tmp_path, everyone)
    log, events = tmp_path / "live.jsonl", tmp_path / "events.jsonl"
    env = run_env(LIVE_LOG=str(log), LIVE_STEPS="600", HOROVOD_GLOO_TIMEOUT_SECONDS="300",
                  HOROVOD_ELASTIC_EVENTS_FILE=str(events), HOROVOD_ELASTIC_LEAVE_GRACE_SECONDS="8")
    job = Job(tmp_path, job_argv(script, 3, 2), env)
    try:
        wait_for(lambda: any(r["size"] == 3 and r["step"] >= 20 for r in read_log(log)), 240,
                 "the world of three to train", alive=alive_check(job))
        resets = len([r for r in read_log(events) if r["kind"] == Kind.RESET])
        hosts.write_text(f"localhost:1\n{me}:1\n")
        seen = len(answers(calls))
        wait_for(lambda: len(answers(calls)) > seen and "127.0.0.1" not in answers(calls)[-1], 30,
                 "the driver to see the host gone", alive=alive_check(job))
        hosts.write_text(everyone)
        flapped = time.time()
        wait_for(lambda: any(r["kind"] in (Kind.ABORT, Kind.WORKER_LOST) for r in read_log(events))
                 or max((r["time"] for r in read_log(log)), default=0) > flapped + 15, 120,
                 "the grace to pass with the job training", alive=alive_check(job))
        kinds = [r["kind"] for r in read_log(events)]  # before the job ends
        stop(log)
        job.proc.wait(timeout=300)
        assert job.proc.returncode == 0, job.output()
    finally:
        job.close()
    misfired = [r for r in read_log(events) if r["kind"] in (Kind.ABORT, Kind.WORKER_LOST)]
    assert not misfired, f"the flap aborted the world: {misfired}"
    assert Kind.REMOVAL_HELD in kinds and Kind.REMOVAL_DROPPED in kinds, kinds
    assert kinds.count("reset") == resets, f"the flap reset the world: {kinds}"


@pytest.mark.timeout(400)
def test_a_worker_that_says_it_is_leaving_is_waited_for_not_aborted(tmp_path):
    """0106: a worker gets SIGTERM and its host leaves discovery (a pod deleted gracefully);
    its training script leaves through the host-update reset, but its step takes 6 s more,
    longer than the leave grace (2 s, given as --elastic-leave-grace). The worker said it is
    leaving when it got the signal, so the driver waits for it: no abort, no rollback, the
    survivors train on at world size 2. Before SIGTERM leaves the grace ran out and every rank was
    aborted (and rolled back to its last commit)."""
    me = socket.gethostname()
    script, hosts, _ = discovery_script(tmp_path, f"localhost:1\n127.0.0.1:1\n{me}:1\n")
    log, events = tmp_path / "live.jsonl", tmp_path / "events.jsonl"
    env = run_env(LIVE_LOG=str(log), LIVE_STEPS="250", LIVE_TERM_SLOW_SECONDS="6",
                  HOROVOD_GLOO_TIMEOUT_SECONDS="300", HOROVOD_ELASTIC_EVENTS_FILE=str(events))
    job = Job(tmp_path, job_argv(script, 3, 2, "--elastic-leave-grace", "2"), env)
    try:
        wait_for(lambda: any(r["size"] == 3 and r["step"] >= 20 for r in read_log(log)), 240,
                 "the world of three to train", alive=alive_check(job))
        pid = int(Path(f"{log}.pid.127.0.0.1").read_text())
        os.kill(pid, signal.SIGTERM)
        hosts.write_text(f"localhost:1\n{me}:1\n")
        wait_for(lambda: {("localhost", 2), (me, 2)} <= sizes_after(log, 0), 120,
                 "the survivors to train at world size 2", alive=alive_check(job), detail=job.output)
        stop(log)
        job.proc.wait(timeout=300)
        assert job.proc.returncode == 0, job.output()
    finally:
        job.close()
    records = read_log(events)
    assert any(r["kind"] == Kind.WORKER_LEAVING for r in records), "the worker did not say it is leaving"
    aborted = [r for r in records if r["kind"] in (Kind.ABORT, Kind.WORKER_LOST)]
    assert not aborted, f"the leaving worker's peers were aborted: {aborted}"
    assert not Path(f"{log}.left").exists(), "a rank left its collective with an error (rolled back)"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("argv, env", [
    (["--elastic-leave-grace", "soon"], {}),
    (["--elastic-leave-grace", "-1"], {}),
    ([], {"HOROVOD_ELASTIC_LEAVE_GRACE_SECONDS": "five"}),
    ([], {"HOROVOD_ELASTIC_LIVENESS_TIMEOUT_SECONDS": "-2"}),
    ([], {"HOROVOD_ELASTIC_BARRIER_DEADLINE_SECONDS": "nan"}),
], ids=["grace-word", "grace-negative", "grace-env", "liveness-env", "barrier-env"])
def test_a_bad_leave_grace_or_timeout_is_a_one_line_error(tmp_path, argv, env):
    """0106: a bad --elastic-leave-grace or a bad value of the driver's timeout variables is a
    one-line usage error and exit 2 before anything starts. Before SIGTERM leaves there was no option,
    and a bad HOROVOD_ELASTIC_LEAVE_GRACE_SECONDS crashed horovodrun with a traceback when it
    imported the driver."""
    script, _, _ = discovery_script(tmp_path, "localhost:1\n")
    proc = subprocess.run([HOROVODRUN, "-np", "1", "--min-np", "1", "--host-discovery-script", str(script),
                           *argv, sys.executable, "-c", "pass"],
                          env=run_env(**env), capture_output=True, text=True, timeout=50)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("horovodrun: error:")]
    assert len(lines) == 1, proc.stderr
