"""Checkpoints: atomic write, newest wins, pruning, unreadable files."""

import os

import pytest
import torch

from training import checkpoint
from training.errors import CheckpointError


def payload(v):
    return {"model": {"w": torch.full((3,), float(v))}, "epoch": v}


def test_latest_orders_by_epoch_then_processed(tmp_path):
    checkpoint.save(tmp_path, payload(1), 1, 0, keep=10)
    checkpoint.save(tmp_path, payload(2), 1, 500, keep=10)
    checkpoint.save(tmp_path, payload(3), 2, 0, keep=10)
    (tmp_path / "ckpt-99999-notanumber.pt").write_bytes(b"")
    (tmp_path / "other.pt").write_bytes(b"")
    pos, path = checkpoint.latest(tmp_path)
    assert pos == (2, 0)
    assert checkpoint.load(path)["epoch"] == 3


def test_prunes_to_keep_and_leaves_no_temp_files(tmp_path):
    for e in range(5):
        checkpoint.save(tmp_path, payload(e), e, 0, keep=2)
    assert sorted(os.listdir(tmp_path)) == ["ckpt-00003-0000000000.pt", "ckpt-00004-0000000000.pt"]


def test_failed_write_leaves_previous_checkpoint_and_no_temp(tmp_path):
    checkpoint.save(tmp_path, payload(1), 1, 0)

    class Unpicklable:
        def __reduce__(self):
            raise OSError(5, "disk on fire")

    with pytest.raises(CheckpointError, match="cannot write checkpoint .*ckpt-00002"):
        checkpoint.save(tmp_path, {"model": Unpicklable()}, 2, 0)
    assert os.listdir(tmp_path) == ["ckpt-00001-0000000000.pt"]


def test_empty_or_missing_directory(tmp_path):
    assert checkpoint.latest(tmp_path / "missing") is None
    assert checkpoint.latest(tmp_path) is None


def test_corrupt_checkpoint_is_named(tmp_path):
    bad = tmp_path / checkpoint.name_for(1, 0)
    bad.write_bytes(b"not a zip")
    with pytest.raises(CheckpointError, match=f"cannot read checkpoint {bad}"):
        checkpoint.load(bad)


def test_not_a_training_checkpoint(tmp_path):
    p = tmp_path / checkpoint.name_for(1, 0)
    torch.save({"weights": 1}, p)
    with pytest.raises(CheckpointError, match="is not a training checkpoint"):
        checkpoint.load(p)
