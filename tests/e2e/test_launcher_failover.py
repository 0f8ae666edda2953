"""Two launchers of one job (``elastic-run --leader-election``, the same ``--job-id``) on a local
cluster of two pods, training the real elastic MNIST: one leads, the other stands by, warm.

- the leader's process group SIGKILLed mid-training: the standby leads once the Lease expired
  (3 s here), says that without an adoption window it does not adopt, starts the job again and
  the training resumes
  from the workers' last commit;
- with ``--adopt-window`` (and a fixed ``--rendezvous-port``), the leader's process group
  SIGKILLed mid-training: the standby leads and adopts the running world: the same training
  processes train on, none is started again, then a pod added and one deleted are the new
  leader's joins and leaves, and the job ends with 0 under it;
- across the SIGKILL with adoption, the per-step sample logs (``--debug-sample-log``,
  ``training.sample_audit``) show the world that trained at the kill train on after the
  adoption (no reset, so no rollback), and in that epoch no sample trained twice or never (the
  later pod's add and delete reset the world: what they roll back is reported as re-trained
  after a reset, not counted); the audit finds a step dropped from those same records;
- the leader (every one of its processes, as when its node freezes) SIGSTOPped past its Lease,
  then SIGCONTed once the standby leads and trains: the old leader exits ``EXIT_FENCED`` with
  one line saying why, and did not touch the job after it woke: its driver recorded no new
  world, no worker of its own appeared, the new leader's workers are the same processes.

The figures (SIGKILL to the standby leading, to the next training step; with adoption the
longest gap between two progress records across the takeover) are printed."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from localcluster.testing import running_cluster
from shared.driver_events import read_records as read_events
from shared.exitcodes import EXIT_FENCED
from shared.metrics_record import read_records
from tests.e2e.test_launcher_loss import BIN, GONE_TIMEOUT, START_TIMEOUT, TAG, env, launcher_tree, processes, trainers
from tests.waiting import free_port, wait_for
from training import sample_audit

ELECTION = ["--leader-election", "--leader-lease-duration", "3", "--leader-renew-deadline", "2",
            "--leader-retry-period", "0.5"]
WORLD_KINDS = {"worker_start", "worker_ready", "reset", "notify", "abort"}  # acting on a world


class Launcher:
    """One elastic-run of the test's job; ``name`` is its leader identity."""

    def __init__(self, cluster, work: Path, job_id: str, name: str, extra: tuple[str, ...] = (),
                 max_np: int = 2, epochs: int = 3):
        self.name = name
        self.tag = uuid.uuid4().hex
        self.log_path = work / f"{name}.log"
        self.events = work / f"{name}-events.jsonl"
        self.metrics = work / "metrics.jsonl"
        args = [str(BIN / "elastic-run"), "--selector", "app=elastic-horovod,role=worker",
                "--kubeconfig", str(cluster.kubeconfig), "--ssh-port", str(cluster.ssh_port),
                "--ssh-identity-file", str(cluster.identity), "--network-interface", "lo",
                "--min-np", "2", "--max-np", str(max_np), "--elastic-timeout", "120", "--stall-timeout", "0",
                "--job-id", job_id, *ELECTION, "--leader-identity", name, "--events-file", str(self.events),
                *extra, "-x", "OMP_NUM_THREADS=1", "--",
                "python", "-m", "training.mnist", "--synthetic", "--synthetic-size", "20000", "--epochs", str(epochs),
                "--batch-size", "16", "--commit-every", "5", "--log-every", "5", "--debug-step-delay", "0.1",
                "--checkpoint-dir", str(work / "checkpoints"), "--metrics-file", str(self.metrics),
                "--debug-sample-log", str(work / "samples")]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env(self.tag),
                                         start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def tail(self) -> str:
        return f"--- {self.name}:\n{self.log()[-5000:]}"

    def alive(self) -> None:
        if self.proc.poll() is not None:
            pytest.fail(f"elastic-run {self.name} exited {self.proc.returncode}:\n{self.tail()}", pytrace=False)

    def says(self, text: str) -> bool:
        return text in self.log()

    def trainers(self) -> list[int]:
        return trainers(self.tag)

    def kill_everything(self) -> None:
        signal_all(launcher_tree(self.proc.pid) + tagged(self.tag), signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:  # ended meanwhile (a discover-hosts, an ssh client)
            pass


def tagged(tag: str) -> list[int]:
    """Every live process of one launcher: elastic-run, what it started, its workers."""
    return [pid for pid, (_, e, _) in processes().items() if e.get(TAG) == tag]


def trains(launcher: Launcher, since: float) -> bool:
    """A progress record written after ``since`` while ``launcher``'s workers run."""
    return bool(launcher.trainers()) and any(r.event == "progress" and r.time > since
                                             for r in read_records(launcher.metrics))


def new_world_step(new: Launcher, old: Launcher, since: float) -> float:
    """When the new leader's world made its first step: the first progress record written after
    ``since`` and after the old world was last seen (both write the job's one metrics file)."""
    seen = {"old": since}

    def step():
        now = time.time()
        if old.trainers():
            seen["old"] = now
            return None
        if len(new.trainers()) < 2:
            return None
        return next((r.time for r in read_records(new.metrics)
                     if r.event == "progress" and r.time > seen["old"]), None)
    return wait_for(step, START_TIMEOUT, f"{new.name}'s world to train", interval=0.1, alive=new.alive,
                    detail=new.tail)


@contextlib.contextmanager
def launchers(tmp_path: Path, *extra: str, max_np: int = 2, epochs: int = 3):
    """A local cluster of two pods, and the two launchers of one job: ``a`` leads and trains,
    ``b`` stands by: (job id, a, b, the cluster)."""
    with running_cluster(tmp_path / "cluster", workers=2) as cluster:
        job = f"failover-{uuid.uuid4().hex[:8]}"
        a = Launcher(cluster, tmp_path, job, "a", extra, max_np, epochs)
        b = None
        try:
            wait_for(lambda: a.says(f"elastic-run: leading job {job}"), START_TIMEOUT, "a to lead",
                     alive=a.alive, detail=a.tail)
            b = Launcher(cluster, tmp_path, job, "b", extra, max_np, epochs)
            wait_for(lambda: b.says(f"elastic-run: standing by for job {job} (led by a)"), START_TIMEOUT,
                     "b to stand by", alive=b.alive, detail=b.tail)
            wait_for(lambda: trains(a, 0), START_TIMEOUT, "a's world to train", interval=0.2, alive=a.alive,
                     detail=a.tail)
            assert not b.says("leading job") and not b.trainers()
            yield job, a, b, cluster
        finally:
            a.kill_everything()
            if b is not None:
                b.kill_everything()


@pytest.fixture
def pair(tmp_path):
    """``launchers`` without adoption: (job id, a, b)."""
    with launchers(tmp_path) as (job, a, b, _):
        yield job, a, b


@pytest.mark.timeout(900)
def test_the_standby_leads_when_the_leader_is_killed_and_the_training_resumes(pair, tmp_path):
    job, a, b = pair
    killed = time.time()
    os.killpg(a.proc.pid, signal.SIGKILL)
    wait_for(lambda: b.says(f"elastic-run: leading job {job}"), GONE_TIMEOUT, "b to lead", interval=0.05,
             alive=b.alive, detail=b.tail)
    leading = time.time()
    assert b.says(f"job {job}: took over from a; without --adopt-window its running world is not adopted: "
                  "resuming from the last commit"), b.tail()
    stepped = new_world_step(b, a, killed)
    assert b.says("resuming from"), b.tail()
    assert not a.trainers(), "a's world outlived it"
    print(f"\nfailover after SIGKILL: standby leading {leading - killed:.1f} s, next step {stepped - killed:.1f} s")
    for e in sample_audit.audit(sample_audit.load(tmp_path / "samples")).values():
        print(f"  {e.summary()}")  # today's path: the new run re-trains from its last commit



def longest_gap(metrics: Path, since: float, until: float) -> float:
    """The longest time between two progress records (training steps) within (since, until)."""
    times = sorted(r.time for r in read_records(metrics) if r.event == "progress" and since < r.time < until)
    return max((later - earlier for earlier, later in zip(times, times[1:], strict=False)), default=0.0)


@pytest.mark.timeout(1200)
def test_the_standby_adopts_the_running_world_when_the_leader_is_killed(tmp_path):
    adopt = ("--rendezvous-port", str(free_port()), "--adopt-window", "90")
    with launchers(tmp_path, *adopt, max_np=3, epochs=4) as (job, a, b, cluster):
        workers = sorted(a.trainers())
        assert len(workers) == 2
        killed = time.time()
        os.killpg(a.proc.pid, signal.SIGKILL)
        wait_for(lambda: b.says(f"elastic-run: leading job {job}"), GONE_TIMEOUT, "b to lead", interval=0.05,
                 alive=b.alive, detail=b.tail)
        leading = time.time()
        wait_for(lambda: b.says(f"job {job}: took over from a: adopting its running world"), GONE_TIMEOUT,
                 "b to say it adopts", alive=b.alive, detail=b.tail)
        wait_for(lambda: any(r.kind == "adopted" for r in read_events(b.events)), GONE_TIMEOUT + 60,
                 "b's driver to adopt the running world", alive=b.alive, detail=b.tail)
        adopted = time.time()
        wait_for(lambda: trains(a, adopted), START_TIMEOUT, "the adopted world to train on", interval=0.2,
                 alive=b.alive, detail=b.tail)
        assert sorted(a.trainers()) == workers, "a training process was started again"
        assert not b.trainers(), "b started training processes for the adopted world"
        gap = longest_gap(a.metrics, killed - 30, time.time())
        print(f"\nadoption after SIGKILL: standby leading {leading - killed:.1f} s, world adopted "
              f"{adopted - killed:.1f} s, longest gap between steps {gap:.1f} s")

        cluster.create_pod("worker-extra", labels={"app": "elastic-horovod", "role": "worker"})
        wait_for(lambda: any(r.kind == "reset" and r.detail.get("world_size") == 3 for r in read_events(b.events)),
                 START_TIMEOUT, "b's world to grow to three with the added pod", alive=b.alive, detail=b.tail)
        victim = "worker-0"  # one of the adopted pods: its worker's leave is the new leader's
        cluster.delete_pod(victim)
        wait_for(lambda: any(r.kind == "reset" and r.detail.get("world_size") == 2
                             for r in read_events(b.events) if r.time > adopted), START_TIMEOUT,
                 f"b's world to shrink to two without {victim}", alive=b.alive, detail=b.tail)
        assert b.proc.wait(timeout=START_TIMEOUT * 2) == 0, b.tail()
        check_samples_across_the_takeover(tmp_path / "samples", killed, adopted)


def check_samples_across_the_takeover(logs: Path, killed: float, adopted: float) -> None:
    """The world training at ``killed`` trained on after ``adopted`` without a reset, and in
    its epoch nothing was trained twice or never; the figures printed; a dropped step found."""
    records = sample_audit.load(logs)
    steps = sorted((r for r in records if r.get("kind") == "step"), key=lambda r: r["time"])
    at_kill = [r for r in steps if r["time"] < killed][-1]
    world, epoch = at_kill["world"], at_kill["epoch"]
    after = next(r for r in steps if r["time"] > adopted)
    assert after["world"] == world, f"the takeover reset the world: {world} before, {after['world']} after"
    audits = sample_audit.audit(records)
    took_over = audits[epoch]
    print(f"\nsamples across the takeover: {took_over.summary()}")
    for e in audits.values():
        for r in e.rollbacks:
            print(f"  re-trained after a reset: epoch {r.epoch}, {r.samples} samples of {r.world} "
                  f"from {r.resumed_at} to {r.reached}, again in {r.successor}")
    assert took_over.complete and not took_over.twice and not took_over.never, took_over.summary()
    assert all(r.world != world or r.time > adopted for r in took_over.rollbacks), took_over.rollbacks
    # the check has teeth on these very records: one kept step of the takeover's world dropped
    dropped = next(r for r in steps if r["world"] == world and r["epoch"] == epoch and r["indices"]
                   and r["time"] > killed)
    broken = sample_audit.audit([r for r in records if r is not dropped])[epoch]
    assert set(broken.never) == set(dropped["indices"]), broken.summary()


@pytest.mark.timeout(900)
def test_a_leader_paused_past_its_lease_is_fenced_when_it_wakes(pair):
    job, a, b = pair
    frozen = launcher_tree(a.proc.pid)
    signal_all(frozen, signal.SIGSTOP)
    stopped = time.time()
    wait_for(lambda: b.says(f"elastic-run: leading job {job}"), GONE_TIMEOUT, "b to lead", interval=0.05,
             alive=b.alive, detail=b.tail)
    new_world_step(b, a, stopped)
    b_workers = sorted(b.trainers())
    before = len(read_events(a.events))
    woke = time.time()
    signal_all(frozen, signal.SIGCONT)
    assert a.proc.wait(timeout=GONE_TIMEOUT) == EXIT_FENCED, a.tail()
    assert a.says(f"elastic-run: fenced: no longer the leader of job {job}: "), a.tail()
    assert "without touching the workers" in a.log().splitlines()[-1], a.tail()
    acted = [r.kind for r in read_events(a.events)[before:] if r.kind in WORLD_KINDS]
    assert not acted, f"the fenced leader's driver acted after it woke: {acted}"
    assert not a.trainers(), "the fenced leader started workers"
    wait_for(lambda: not tagged(a.tag), GONE_TIMEOUT, "no process of the fenced leader left",
             detail=lambda: str(tagged(a.tag)))
    assert sorted(b.trainers()) == b_workers, "the new leader's workers were touched"
    b.alive()
    print(f"\nSIGSTOP: standby leading after the stop, fenced leader exited {time.time() - woke:.1f} s after SIGCONT")
