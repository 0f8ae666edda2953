"""A checkpoint records the run's settings; resuming with other ones is refused or restarts
the epoch as ``training.checkpoint`` documents (before: another ``--seed`` or sample list
silently changed which samples the rest of the epoch trained)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.training.trainhelp import HOROVODRUN, Job, run_env
from training import checkpoint
from training.datasets import SyntheticDataset
from training.device_augment import JpegBytesDataset
from training.errors import ConfigError
from training.fingerprint import samples_sha256

pytestmark = pytest.mark.timeout(300)
ROOT = str(Path(__file__).parents[2])


def mnist(tmp: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "training.mnist", "--synthetic",
                           "--synthetic-size", "64", "--batch-size", "16", "--workers", "0",
                           "--checkpoint-dir", str(tmp / "ckpt"), *argv],
                          capture_output=True, text=True, timeout=240, env=run_env(), cwd=ROOT)


@pytest.mark.slow
def test_resume_with_another_seed_is_refused(tmp_path):
    first = mnist(tmp_path, "--epochs", "1", "--seed", "42")
    assert first.returncode == 0, first.stderr[-3000:]
    (pos, path) = checkpoint.latest(tmp_path / "ckpt")
    saved = checkpoint.load(path)["settings"]
    assert pos == (1, 0) and saved["seed"] == 42 and saved["batch_size"] == 16
    assert saved["world_size"] == 1 and saved["lr"] == 0.01 and len(saved["samples_sha256"]) == 64

    r = mnist(tmp_path, "--epochs", "2", "--seed", "7")
    assert r.returncode == 2, r.stderr[-3000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0] == (
        f"error: {path} was trained with --seed 42, this run has --seed 7: the epochs' sample "
        "order would differ; resume with --seed 42 or start in another --checkpoint-dir")
    assert checkpoint.latest(tmp_path / "ckpt")[0] == (1, 0)  # nothing trained

    same = mnist(tmp_path, "--epochs", "2", "--seed", "42", "--lr", "0.02")
    assert same.returncode == 0, same.stderr[-3000:]
    assert "--lr 0.02 (the checkpoint was trained with 0.01)" in same.stderr
    assert checkpoint.latest(tmp_path / "ckpt")[0] == (2, 0)



@pytest.mark.horovod
def test_a_refusal_on_rank_0_ends_every_rank_of_an_elastic_job(tmp_path):
    """Only rank 0 reads the checkpoint; its refusal travels in the synced state, so every rank
    ends with the same line (before, the other ranks trained on from fresh weights)."""
    first = mnist(tmp_path, "--epochs", "1", "--seed", "42")
    assert first.returncode == 0, first.stderr[-3000:]
    (pos, path) = checkpoint.latest(tmp_path / "ckpt")
    discover = tmp_path / "discover.sh"
    discover.write_text("#!/bin/sh\necho localhost:2\n")
    discover.chmod(0o755)
    argv = [HOROVODRUN, "-np", "2", "--min-np", "1", "--max-np", "2",
            "--host-discovery-script", str(discover), "--network-interface", "lo",
            sys.executable, "-m", "training.mnist", "--synthetic", "--synthetic-size", "64",
            "--batch-size", "16", "--workers", "0", "--epochs", "2", "--seed", "7",
            "--checkpoint-dir", str(tmp_path / "ckpt")]
    job = Job(argv, tmp_path / "job.log", cwd=ROOT, env=run_env())
    try:
        code = job.finish(240)
    finally:
        job.stop()
    out = job.output()
    assert code != 0, out[-3000:]
    refusal = f"error: {path} was trained with --seed 42, this run has --seed 7"
    for rank in (0, 1):
        assert any(line.startswith(f"[{rank}]<stderr>:{refusal}") for line in out.splitlines()), \
            out[-3000:]
    assert checkpoint.latest(tmp_path / "ckpt")[0] == pos  # nothing trained

SETTINGS = checkpoint.settings(42, 32, 0.1, 2, "a" * 64)


def test_another_sample_list_restarts_the_epoch_in_progress():
    other = dict(SETTINGS, samples_sha256="b" * 64, world_size=4)
    action, notes = checkpoint.resume_action(SETTINGS, other, "ck.pt", processed=300)
    assert action == checkpoint.RESTART_EPOCH
    assert notes == ["the sample list differs from the one ck.pt was trained on: the epoch "
                     "restarts from its first sample (300 were done)"]
    # at an epoch boundary nothing is partial: resumed, with the note
    action, notes = checkpoint.resume_action(SETTINGS, other, "ck.pt", processed=0)
    assert action == checkpoint.RESUME and len(notes) == 1


def test_same_settings_resume_silently_and_old_checkpoints_are_noted():
    assert checkpoint.resume_action(SETTINGS, dict(SETTINGS, world_size=8), "ck.pt", 5) == \
        (checkpoint.RESUME, [])
    action, notes = checkpoint.resume_action(None, SETTINGS, "ck.pt", 5)
    assert action == checkpoint.RESUME and "records no run settings" in notes[0]
    with pytest.raises(ConfigError, match="--seed 1, this run has --seed 42"):
        checkpoint.resume_action(dict(SETTINGS, seed=1), SETTINGS, "ck.pt", 0)


def test_sample_hash_follows_the_list_not_where_it_is_mounted(tmp_path):
    a = JpegBytesDataset([("/mnt/a/x/1.JPEG", 0), ("/mnt/a/y/2.JPEG", 1)])
    moved = JpegBytesDataset([("/data/x/1.JPEG", 0), ("/data/y/2.JPEG", 1)])
    swapped = JpegBytesDataset([("/mnt/a/y/2.JPEG", 1), ("/mnt/a/x/1.JPEG", 0)])
    relabelled = JpegBytesDataset([("/mnt/a/x/1.JPEG", 1), ("/mnt/a/y/2.JPEG", 1)])
    assert samples_sha256(a) == samples_sha256(moved)
    assert len({samples_sha256(a), samples_sha256(swapped), samples_sha256(relabelled)}) == 3
    syn = SyntheticDataset(10, (1, 4, 4), 2, seed=1)
    assert samples_sha256(syn) != samples_sha256(SyntheticDataset(10, (1, 4, 4), 2, seed=2))
