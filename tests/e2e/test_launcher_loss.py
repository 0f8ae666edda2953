"""The launcher is a pod like any other: elastic-run running the real elastic MNIST
training (``--checkpoint-dir``, ``--commit-every 5``) on a local cluster of two pods, and the
launcher lost mid-training as a node loss, a drain or a retry would lose it.

- every launcher process (elastic-run, horovodrun, the discovery daemon, the ssh clients)
  SIGKILLed (the kernel closes their connections) or SIGSTOPped (a vanished node: the
  connections stay open and silent), while the workers import torch or while they train; then
  elastic-run started again with the same arguments, as the Job's retry does: no process of
  the old run is alive once the new run has a worker, and the old world is gone;
- the launcher SIGSTOPped and not retried: its workers end by themselves (lease / session);
- SIGTERM to elastic-run mid-epoch: it says what it does, the training commits and rank 0
  writes a checkpoint mid-epoch, elastic-run exits 143; the retry resumes from that checkpoint.

Processes are told apart by a tag in their environment (``LAUNCHER_LOSS_TAG``, one per
elastic-run: horovodrun exports it to the workers); the launcher's processes are elastic-run
and its descendants, the workers are the tagged processes running the training."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from localcluster.testing import running_cluster
from shared.metrics_record import MetricsRecord, read_records
from tests.waiting import wait_for

BIN = Path(sys.executable).parent
TAG = "LAUNCHER_LOSS_TAG"
START_TIMEOUT = 300.0  # a world's start: torch imports on a loaded 2-core machine
GONE_TIMEOUT = 90.0  # the lease (15 s) + ssh keep-alives + the reap, generously


def env(tag: str) -> dict:
    e = dict(os.environ)
    e["PATH"] = f"{BIN}:{e.get('PATH', '')}"
    e["PYTHONUNBUFFERED"] = "1"
    for name in ("DISCOVERY_URL", "DISCOVERY_SELECTOR", "DISCOVERY_PORT", "ELASTIC_DATASET", "ELASTIC_JOB_ID"):
        e.pop(name, None)
    e[TAG] = tag
    return e


def processes() -> dict[int, tuple[int, dict[str, str], list[str]]]:
    """{pid: (ppid, environment, argv)} of every live process this test can read."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
            if not raw:
                continue  # a zombie
            environ = (entry / "environ").read_bytes().split(b"\0")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        pairs = dict(item.decode(errors="replace").partition("=")[::2] for item in environ if b"=" in item)
        found[int(entry.name)] = (ppid, pairs, raw.decode(errors="replace").rstrip("\0").split("\0"))
    return found


def trainers(tag: str) -> list[int]:
    """The run's training processes (on the pods): tagged, `python -m training.mnist` (not horovodrun,
    whose argv holds the training command too)."""
    return [pid for pid, (_, e, argv) in processes().items()
            if e.get(TAG) == tag and argv[1:3] == ["-m", "training.mnist"]]


def launcher_tree(root: int) -> list[int]:
    """elastic-run and every process under it (daemon, horovodrun, ssh clients, hooks)."""
    procs = processes()
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, (ppid, _, _) in procs.items() if ppid in tree} - tree
        tree |= more
        grew = bool(more)
    return sorted(tree)


def records(path: Path) -> list[MetricsRecord]:
    """Rank 0's metrics records so far (a partial last line is skipped)."""
    return read_records(path)


class Job:
    """One elastic-run of the test's job (the same arguments every time)."""

    def __init__(self, cluster, work: Path, name: str):
        self.tag = uuid.uuid4().hex
        self.log_path = work / f"{name}.log"
        self.metrics = work / "metrics.jsonl"
        self.checkpoints = work / "checkpoints"
        args = [str(BIN / "elastic-run"), "--selector", "app=elastic-horovod,role=worker",
                "--kubeconfig", str(cluster.kubeconfig), "--ssh-port", str(cluster.ssh_port),
                "--ssh-identity-file", str(cluster.identity), "--network-interface", "lo",
                "--min-np", "2", "--max-np", "2", "--elastic-timeout", "120", "--stall-timeout", "0",
                "-x", "OMP_NUM_THREADS=1", "--",
                "python", "-m", "training.mnist", "--synthetic", "--synthetic-size", "20000", "--epochs", "3",
                "--batch-size", "16", "--commit-every", "5", "--log-every", "5", "--debug-step-delay", "0.1",
                "--checkpoint-dir", str(self.checkpoints), "--metrics-file", str(self.metrics)]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env(self.tag))

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def alive(self) -> None:
        if self.proc.poll() is not None:
            pytest.fail(f"elastic-run exited {self.proc.returncode}:\n{self.log()}", pytrace=False)

    def trainers(self) -> list[int]:
        return trainers(self.tag)

    def kill_everything(self) -> None:
        for pid, (_, e, _) in processes().items():
            if e.get(TAG) == self.tag:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def wait_training(job: Job, since: float, steps: int = 10) -> MetricsRecord:
    """The first progress record written after ``since`` (unix time) once ``steps`` batches of
    the epoch are done."""
    def found():
        return next((r for r in records(job.metrics) if r.event == "progress"
                     and r.time > since and r.batch >= steps), None)
    return wait_for(found, START_TIMEOUT, "the job to train", interval=0.2, alive=job.alive, detail=job.log)


def lose_launcher(job: Job, sig: int) -> list[int]:
    """Send ``sig`` to every launcher process at once; the pids."""
    tree = launcher_tree(job.proc.pid)
    for pid in tree:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    return tree


@pytest.fixture
def cluster(tmp_path):
    with running_cluster(tmp_path / "cluster", workers=2) as c:
        yield c


STAGES = ("importing", "training")


@pytest.mark.timeout(900)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["SIGKILL", "SIGSTOP"])
@pytest.mark.parametrize("stage", STAGES)
def test_a_retried_launcher_never_trains_beside_the_old_world(cluster, tmp_path, stage, sig):
    """Before: the retry had a new run id and reaped nothing; the old workers, their launcher
    frozen (SIGSTOP) or gone before they registered, went on training beside the new world."""
    old = Job(cluster, tmp_path, "old")
    new = None
    try:
        if stage == "training":
            wait_training(old, 0)
        else:  # the workers run and import torch: the driver does not know them yet
            wait_for(lambda: len(old.trainers()) == 2, START_TIMEOUT, "the old run's workers to start",
                     alive=old.alive, detail=old.log)
        lose_launcher(old, sig)
        lost = time.time()
        new = Job(cluster, tmp_path, "new")
        overlap: list[tuple[list[int], list[int]]] = []

        def new_trains():
            olds, news = old.trainers(), new.trainers()
            if olds and news:
                overlap.append((olds, news))
            return wait_training_now(new, lost)
        wait_for(new_trains, START_TIMEOUT, "the retried launcher to train", interval=0.1, alive=new.alive,
                 detail=new.log)
        assert not overlap, f"old run's workers {overlap[0][0]} alive beside the new run's {overlap[0][1]}"
        wait_for(lambda: not old.trainers(), GONE_TIMEOUT, "the old world to be gone", interval=0.2)
    finally:
        old.kill_everything()
        if new is not None:
            new.kill_everything()


def wait_training_now(job: Job, since: float) -> bool:
    return any(r.event == "progress" and r.time > since
               for r in records(job.metrics)) and bool(job.trainers())


@pytest.mark.timeout(600)
def test_the_workers_of_a_frozen_launcher_end_by_themselves(cluster, tmp_path):
    """No retry: a launcher frozen (SIGSTOP of all its processes: the connections stay open and
    silent, as when its node vanished) leaves no world training. Before: the training went on
    (the sshd keep-alive ends the sessions, not the processes)."""
    old = Job(cluster, tmp_path, "old")
    try:
        wait_training(old, 0)
        lose_launcher(old, signal.SIGSTOP)
        wait_for(lambda: not old.trainers(), GONE_TIMEOUT, "the frozen launcher's workers to end", interval=0.2,
                 detail=lambda: f"left: {old.trainers()}")
    finally:
        old.kill_everything()


@pytest.mark.timeout(900)
def test_sigterm_to_the_launcher_checkpoints_and_the_retry_resumes_from_it(cluster, tmp_path):
    """Before: elastic-run ended within the grace, printed nothing about it and wrote no
    checkpoint; the retry started the epoch again."""
    from training import checkpoint

    old = Job(cluster, tmp_path, "old")
    new = None
    try:
        first = wait_training(old, 0)
        assert first.epoch == 1
        old.proc.send_signal(signal.SIGTERM)
        assert old.proc.wait(timeout=120) == 143, old.log()
        found = checkpoint.latest(old.checkpoints)
        assert found is not None, f"no checkpoint written:\n{old.log()}"
        (epoch, processed), path = found
        assert epoch == 0 and processed > 0, f"not a mid-epoch checkpoint: {path.name}"
        assert "SIGTERM: asking the training on 2 host(s) to commit, write a checkpoint" in old.log()
        assert "the training left on every host" in old.log(), old.log()
        wait_for(lambda: not old.trainers(), GONE_TIMEOUT, "the old world to be gone")
        new = Job(cluster, tmp_path, "new")
        line = f"resuming from {path} (epoch 1, {processed} samples done)"
        wait_for(lambda: line in new.log(), START_TIMEOUT, f"the retry to say {line!r}", interval=0.2,
                 alive=new.alive, detail=new.log)
    finally:
        old.kill_everything()
        if new is not None:
            new.kill_everything()
