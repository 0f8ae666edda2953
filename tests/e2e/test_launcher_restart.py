"""A retried launcher's start-up and the lease's two sides, on a local cluster of two pods running
the real elastic MNIST training (the job of ``tests/e2e/test_launcher_loss.py``):

- the driver (horovodrun) stopped for 6 s, the stalls it tolerates of itself (a GIL hold, a
  throttled pod), and continued: the 8 s lease loses nothing, the same workers train on;
- the launcher SIGKILLed mid-training and retried: the retry says where its start-up went,
  phase by phase, at its first step (the figures go to scripts/benchmarks/bench_launcher_loss.py's table).
"""
from __future__ import annotations

import os
import re
import signal
import time

import pytest

from localcluster.testing import running_cluster
from tests.e2e.test_launcher_loss import (
    GONE_TIMEOUT,
    START_TIMEOUT,
    Job,
    launcher_tree,
    lose_launcher,
    processes,
    records,
    wait_training,
    wait_training_now,
)
from tests.waiting import wait_for

STALL = 6.0  # the driver's own stalls it survives (docs/architecture.md, "A lost launcher")
PHASE_LINE = re.compile(r"training [\d.]+ s after the start: discovery daemon [\d.?]+ s, hosts prepared [\d.?]+ s "
                        r"\(ssh pinning, earlier runs stopped, dataset\), workers started [\d.?]+ s, "
                        r"imports and setup [\d.?]+ s, first step [\d.?]+ s")


@pytest.fixture
def cluster(tmp_path):
    with running_cluster(tmp_path / "cluster", workers=2) as c:
        yield c


def driver_pid(job: Job) -> int:
    procs = processes()
    found = [pid for pid in launcher_tree(job.proc.pid) if "elastic.driver.hvdrun" in procs.get(pid, (0, {}, []))[2]]
    assert len(found) == 1, f"horovodrun's process among {found}"
    return found[0]


@pytest.mark.timeout(900)
def test_a_6_s_stall_of_the_driver_loses_nothing(cluster, tmp_path):
    """Before (a 15 s lease) this held too; it is what keeps the lease from going below 8 s."""
    job = Job(cluster, tmp_path, "job")
    try:
        wait_training(job, 0)
        workers = sorted(job.trainers())
        assert len(workers) == 2
        driver = driver_pid(job)
        os.kill(driver, signal.SIGSTOP)
        stopped = time.time()
        try:
            time.sleep(STALL)  # the stall itself, not a wait for a condition
        finally:
            os.kill(driver, signal.SIGCONT)
        commits = [r for r in records(job.metrics) if r.event == "progress"]
        wait_for(lambda: len([r for r in records(job.metrics) if r.event == "progress"
                              and r.time > stopped + STALL]) >= 3,
                 START_TIMEOUT, "the world to commit again after the stall", interval=0.2, alive=job.alive,
                 detail=job.log)
        assert sorted(job.trainers()) == workers, f"the workers changed:\n{job.log()}"
        assert "elastic-run lease:" not in job.log(), job.log()
        later = [r for r in records(job.metrics) if r.event == "progress" and r not in commits]
        assert all(r.world_size == 2 for r in later), later
    finally:
        job.kill_everything()


@pytest.mark.timeout(900)
def test_a_retried_launcher_says_where_its_start_up_went(cluster, tmp_path):
    old = Job(cluster, tmp_path, "old")
    new = None
    try:
        wait_training(old, 0)
        lose_launcher(old, signal.SIGKILL)
        lost = time.time()
        new = Job(cluster, tmp_path, "new")
        wait_for(lambda: wait_training_now(new, lost), START_TIMEOUT, "the retry to train", interval=0.2,
                 alive=new.alive, detail=new.log)
        wait_for(lambda: PHASE_LINE.search(new.log_path.read_text(errors="replace")), 60, "the retry's start-up line",
                 interval=0.2, detail=new.log)
        wait_for(lambda: not old.trainers(), GONE_TIMEOUT, "the old world to be gone", interval=0.2)
    finally:
        old.kill_everything()
        if new is not None:
            new.kill_everything()
