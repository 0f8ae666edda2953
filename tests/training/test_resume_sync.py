"""Resuming where a rank cannot see rank 0's checkpoint (each rank reads its own
``--checkpoint-dir``): that rank starts with a fresh model and optimizer, and Horovod's
``broadcast_optimizer_state`` steps its fresh optimizer with zero gradients after the model
was synced; with weight decay that moved its weights away from rank 0's for good, unless the
model is broadcast again afterwards (``training.state.TrainingState.sync``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.training.trainhelp import HOROVODRUN, Job, committed_samples, finals, metrics_lines
from training import checkpoint

pytestmark = [pytest.mark.timeout(600), pytest.mark.horovod]
ROOT = str(Path(__file__).parents[2])
N = 64


def run_job(tmp: Path, base: Path, epochs: int, log: str) -> Job:
    argv = [HOROVODRUN, "-np", "2", "-H", "localhost:2", "--network-interface", "lo",
            sys.executable, "-m", "tests.training.rank_dir_job", str(base),
            "--synthetic", "--synthetic-size", str(N), "--epochs", str(epochs),
            "--batch-size", "8", "--commit-every", "2", "--log-every", "0",
            "--weight-decay", "0.01", "--momentum", "0.9", "--workers", "0",
            "--trace-dir", str(tmp / "trace"), "--metrics-file", str(tmp / "metrics.jsonl")]
    return Job(argv, tmp / log, cwd=ROOT)


def test_rank_without_the_checkpoint_ends_with_rank_zeros_parameters(tmp_path):
    base = tmp_path / "ckpt"
    first = tmp_path / "first"
    first.mkdir()
    job = run_job(first, base, 1, "first.log")
    try:
        assert job.finish(300) == 0, job.output()[-4000:]
    finally:
        job.stop()
    # rank 0 wrote its checkpoint where only rank 0 looks
    assert checkpoint.latest(base / "rank0") is not None
    assert checkpoint.latest(base / "rank1") is None

    second = tmp_path / "second"
    second.mkdir()
    job = run_job(second, base, 2, "second.log")
    try:
        assert job.finish(300) == 0, job.output()[-4000:]
    finally:
        job.stop()
    assert "resuming from" in job.output() and str(base / "rank0") in job.output()
    # the resumed job trained epoch 2 only, on every sample once, and both ranks end with the
    # same parameters
    done = finals(second / "trace")
    assert sorted(f["rank"] for f in done) == [0, 1] and {f["epochs"] for f in done} == {2}
    assert done[0]["params_sha256"] == done[1]["params_sha256"], done
    seen = committed_samples(second / "trace")
    assert sorted(seen) == [1] and sorted(seen[1]) == list(range(N))
    epochs = [r.epoch for r in metrics_lines(second / "metrics.jsonl") if r.event == "epoch"]
    assert epochs == [2]
