"""The worker side of the elastic run (horovod/common/elastic.py, horovod/torch/elastic), as
patched by horovod-fork 0109: through plain horovodrun with a
discovery script, as tests/runtime/test_horovod_patches.py does, plus unit tests of
``run_fn`` in a single process.

Each horovodrun test fails on a build without its fix (the driver's fixes alone:
``scripts/setup`` with ELASTIC_HOROVOD_WHEELS pointing at such a wheel shows it);
a job that hangs is found by the test's deadline, never waited out.
"""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runtime.test_horovod_patches import HOROVODRUN, Job, answers, discovery_script, run_env
from tests.waiting import wait_for

HERE = Path(__file__).parent
JOB = str(HERE / "resync_job.py")


def records(path: Path) -> list:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def elastic_run(tmp_path: Path, script: Path, np: int, min_np: int, max_np: int, env: dict) -> Job:
    return Job(tmp_path, [HOROVODRUN, "-np", str(np), "--min-np", str(min_np), "--max-np", str(max_np),
                          "--host-discovery-script", str(script), "--network-interface", "lo",
                          "--elastic-timeout", "120", sys.executable, JOB], env)


def alive(job: Job):
    def check() -> None:
        if job.proc.poll() is not None:
            pytest.fail(f"horovodrun exited ({job.proc.returncode}):\n{job.output()}", pytrace=False)
    return check


def finish(job: Job, timeout: float, what: str) -> None:
    """The job ends with exit 0 within timeout seconds (a job that hangs fails here)."""
    wait_for(lambda: job.proc.poll() is not None, timeout, what, interval=0.2, detail=job.output)
    assert job.proc.returncode == 0, job.output()


# -- one decision on re-syncing -----------------------------------------------------------------

@pytest.mark.timeout(400)
def test_ranks_that_leave_a_world_differently_still_sync_together(tmp_path):
    """0109, the Horovod #3494 moment forced: in a world of two, rank 0 leaves with a
    removal-only host update (it may skip the sync) while rank 1 leaves with
    HorovodInternalError (as when an abort lands in ``check_host_updates``'s broadcast after
    rank 0 got it): rank 1 must sync. Before one re-sync decision rank 0 skipped the sync and called its next
    collective while rank 1 broadcast the state: each waited for the other forever (the job
    hangs, found by the deadline). Patched, the ranks agree (an AND of their skip flags) and
    both sync."""
    script, _, _ = discovery_script(tmp_path, "localhost:1\n127.0.0.1:1\n")
    log = tmp_path / "train.jsonl"
    env = run_env(RESYNC_LOG=str(log), RESYNC_FINAL_HOST="127.0.0.1", RESYNC_STEPS_AFTER="12",
                  RESYNC_FORCE_AT_STEP="4")
    job = elastic_run(tmp_path, script, 2, 2, 2, env)
    try:
        finish(job, 240, "the job to end after the ranks left a world with different decisions "
                         "(without one re-sync decision it hangs: one rank skips the sync, the other syncs)")
    finally:
        job.close()
    forced = records(Path(f"{log}.interrupts"))
    assert [r["skip_sync"] for r in forced] == [True], forced
    steps = records(log)
    assert {r["host"] for r in steps if r["step"] == 12} == {"localhost", "127.0.0.1"}
    # one state after the sync: both ranks hold the same parameters at every step
    by_step: dict = {}
    for r in steps:
        by_step.setdefault(r["step"], set()).add(round(r["weight_sum"], 5))
    assert all(len(sums) == 1 for sums in by_step.values()), by_step


@pytest.mark.timeout(400)
def test_a_host_that_joins_after_a_removal_below_min_np_gets_the_state(tmp_path):
    """0109, Horovod #3494 as reported: a world at --min-np loses a host gracefully (it leaves
    discovery: a removal-only update, so the survivor may skip the sync) and waits below
    --min-np until a new host joins. The joiner must sync, and so must the survivor. Before
    one re-sync decision the survivor skipped the sync and the joiner waited in its broadcast: the job hung
    (found by the deadline). Patched, both sync and the job ends on the new world."""
    me = socket.gethostname()
    script, hosts, calls = discovery_script(tmp_path, "localhost:1\n127.0.0.1:1\n")
    log = tmp_path / "train.jsonl"
    env = run_env(RESYNC_LOG=str(log), RESYNC_FINAL_HOST=me, RESYNC_STEPS_AFTER="8")
    job = elastic_run(tmp_path, script, 2, 2, 3, env)
    try:
        wait_for(lambda: any(r["size"] == 2 and r["step"] >= 3 for r in records(log)), 180,
                 "the first world to train", alive=alive(job), detail=job.output)
        hosts.write_text("localhost:1\n")
        wait_for(lambda: any(r["host"] == "localhost" and r["skip_sync"]
                             for r in records(Path(f"{log}.interrupts"))), 120,
                 "the survivor to take the removal-only update", alive=alive(job), detail=job.output)
        hosts.write_text(f"localhost:1\n{me}:1\n")
        seen = len(answers(calls))
        wait_for(lambda: len(answers(calls)) >= seen + 2, 60, "the driver to discover the new host",
                 alive=alive(job), detail=job.output)
        finish(job, 180, "the job to end on the new world (without one re-sync decision it hangs: the survivor skips "
                         "the sync, the joiner waits in it)")
    finally:
        job.close()
    last = [r for r in records(log) if r["hosts"] == sorted(["localhost", me])]
    assert {r["host"] for r in last} == {"localhost", me}, records(log)[-6:]


# -- a peer lost while the next world forms ----------------------------------------------------

@pytest.mark.timeout(400)
def test_a_peer_lost_while_the_world_forms_does_not_end_the_survivors(tmp_path):
    """0109: a world of two grows by a host whose worker dies right at ``hvd.init`` (SIGKILL,
    once), while the two survivors are in their reset's init waiting for it in Gloo's
    rendezvous. Their init fails (at the Gloo timeout, 10 s here, unless an abort ends it
    first). Before the Gloo abort that failure ends both survivors (exit 134: the Gloo error is
    std::terminate in Horovod's background thread; were it raised, it would leave
    ``hvd.elastic.run``, whose reset is outside its ``try``): they are blacklisted and the job
    fails. Patched, ``hvd.init`` fails with an error (the C++ side: a Gloo error while the
    world forms fails the init) and ``hvd.elastic.run`` resets again (failed reset inits retried): the survivors form
    the next world without the lost host and train to the end."""
    me = socket.gethostname()
    script, hosts, _ = discovery_script(tmp_path, "localhost:1\n127.0.0.1:1\n")
    log = tmp_path / "train.jsonl"
    died = Path(f"{log}.died")
    env = run_env(RESYNC_LOG=str(log), RESYNC_MAX_STEPS="150", RESYNC_DIE_AT_INIT_HOST=me,
                  HOROVOD_GLOO_TIMEOUT_SECONDS="10")
    job = Job(tmp_path, [HOROVODRUN, "-np", "2", "--min-np", "2", "--max-np", "3",
                         "--host-discovery-script", str(script), "--network-interface", "lo",
                         "--elastic-timeout", "120", "--blacklist-cooldown-range", "600", "900",
                         sys.executable, JOB], env)
    try:
        wait_for(lambda: any(r["size"] == 2 and r["step"] >= 3 for r in records(log)), 180,
                 "the first world to train", alive=alive(job), detail=job.output)
        hosts.write_text(f"localhost:1\n127.0.0.1:1\n{me}:1\n")
        wait_for(died.exists, 120, "the worker on the new host to die at hvd.init", alive=alive(job),
                 detail=job.output)
        lost_at = max(r["step"] for r in records(log))
        finish(job, 240, "the survivors to train to the end (unretried, their failed init ended them)")
    finally:
        job.close()
    after = [r for r in records(log) if r["step"] > lost_at]
    assert {r["host"] for r in after} == {"localhost", "127.0.0.1"}, records(log)[-6:]
    assert max(r["step"] for r in after) == 150


# -- run_fn in one process: the order of a world's first steps ---------------------------------

class RecordingState:
    """A State whose sync, restore and reset are recorded (run_fn's collaborator, not under test)."""

    def __init__(self, calls: list):
        self.calls = calls

    def on_hosts_updated(self, timestamp, update_res):  # the notification manager's listener
        pass

    def sync(self):
        self.calls.append("sync")

    def restore(self):
        self.calls.append("restore")

    def on_reset(self):
        self.calls.append("on_reset")


def run_worlds(outcomes: list, agree_answers: list | None, monkeypatch) -> list:
    """Runs run_fn over worlds whose func raises each of outcomes in turn (then returns)."""
    from horovod.common.elastic import run_fn

    monkeypatch.delenv("HOROVOD_GLOO_RENDEZVOUS_ADDR", raising=False)
    calls: list = []
    pending = list(outcomes)

    def func(state):
        calls.append("func")
        if pending:
            raise pending.pop(0)
        return "done"

    def all_agree(flag):
        calls.append(f"agree({flag})")
        assert agree_answers is not None
        return agree_answers.pop(0) and flag

    agree = None if agree_answers is None else all_agree
    assert run_fn(func, lambda: calls.append("reset"), agree)(RecordingState(calls)) == "done"
    return calls


def test_every_world_starts_with_the_agreement_and_syncs_unless_all_skip(monkeypatch):
    """0109: the agreement is each world's first collective on every rank; the sync is
    skipped only when every rank may skip it."""
    from horovod.common.exceptions import HostsUpdatedInterrupt

    calls = run_worlds([HostsUpdatedInterrupt(True)], [True, True], monkeypatch)
    assert calls == ["agree(False)", "sync", "func", "reset", "on_reset", "agree(True)", "func"]


def test_a_rank_that_may_skip_syncs_when_another_may_not(monkeypatch):
    """0109: a rank that took a removal-only update still syncs when any rank of the new
    world may not skip (it joined, or left with HorovodInternalError): Horovod #3494."""
    from horovod.common.exceptions import HostsUpdatedInterrupt

    calls = run_worlds([HostsUpdatedInterrupt(True)], [True, False], monkeypatch)
    assert calls == ["agree(False)", "sync", "func", "reset", "on_reset", "agree(True)", "sync", "func"]


def test_without_an_agreement_every_world_syncs(monkeypatch):
    """0109: a framework that gives run_fn no agreement collective never skips the sync."""
    from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt

    calls = run_worlds([HostsUpdatedInterrupt(True), HorovodInternalError("x")], None, monkeypatch)
    assert calls == ["sync", "func", "reset", "on_reset", "sync", "func", "restore", "reset", "on_reset",
                     "sync", "func"]


def test_a_failed_reinitialisation_is_retried_like_an_internal_error(monkeypatch):
    """0109: a reset whose init fails (a peer lost while the world forms) restores the state
    and resets again; the next world syncs."""
    from horovod.common.elastic import run_fn
    from horovod.common.exceptions import HostsUpdatedInterrupt

    monkeypatch.delenv("HOROVOD_GLOO_RENDEZVOUS_ADDR", raising=False)
    calls: list = []
    outcomes = [HostsUpdatedInterrupt(True)]
    resets = [ValueError("Horovod initialization failed"), None]

    def func(state):
        calls.append("func")
        if outcomes:
            raise outcomes.pop(0)

    def reset():
        calls.append("reset")
        error = resets.pop(0)
        if error is not None:
            raise error

    def all_agree(flag):
        calls.append(f"agree({flag})")
        return flag

    run_fn(func, reset, all_agree)(RecordingState(calls))
    assert calls == ["agree(False)", "sync", "func", "reset", "reset", "restore", "on_reset",
                     "agree(False)", "sync", "func"]


RESTORE_AFTER_FAILED_INIT = """
import json
import horovod.torch as hvd
from horovod.common.elastic import run_fn
from horovod.torch.elastic import ElasticSampler, TorchState

hvd.init()
sampler = ElasticSampler(list(range(10)), shuffle=False)
state = TorchState(sampler=sampler)
worlds = []
failures = [ValueError("Horovod initialization failed: a peer was lost")]

def reset():
    hvd.shutdown()
    if failures:
        raise failures.pop()
    hvd.init()

def func(state):
    worlds.append(hvd.size())
    if len(worlds) == 1:
        from horovod.common.exceptions import HorovodInternalError
        raise HorovodInternalError("a peer left the collective")
    return "done"

print(json.dumps({"result": run_fn(func, reset)(state), "worlds": worlds}))
"""


@pytest.mark.timeout(180)
def test_the_state_is_restored_once_horovod_is_initialized_again():
    """0109: a reset whose init fails leaves Horovod uninitialized; restoring the state then
    (as the first form of failed reset inits retried did) runs the sampler's handler, whose
    re-plan asks ``hvd.size()`` and raises
    ``ValueError: Horovod has not been initialized`` -- seen in scripts/soak: after a pod was
    killed every rank of the next world timed out in the rendezvous and each died at its first
    retry. The restore now waits for an initialisation that succeeded; real Horovod, one
    process, a world of one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOROVOD_")}
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run([sys.executable, "-c", RESTORE_AFTER_FAILED_INIT], capture_output=True, text=True,
                          env=env, timeout=150)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"result": "done", "worlds": [1, 1]}


def test_a_reinitialisation_that_keeps_failing_is_raised(monkeypatch):
    """0109: the retries are bounded (RESET_RETRIES in a row), so a misconfiguration that
    fails every init still ends the worker with its error."""
    from horovod.common import elastic
    from horovod.common.exceptions import HorovodInternalError

    monkeypatch.delenv("HOROVOD_GLOO_RENDEZVOUS_ADDR", raising=False)
    calls: list = []

    def func(state):
        raise HorovodInternalError("peer gone")

    def reset():
        calls.append("reset")
        raise ValueError("Horovod initialization failed")

    with pytest.raises(ValueError, match="initialization failed"):
        elastic.run_fn(func, reset)(RecordingState(calls))
    assert calls.count("reset") == elastic.RESET_RETRIES + 1
