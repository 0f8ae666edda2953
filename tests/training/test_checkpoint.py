"""Checkpoints: atomic write, newest wins, pruning, unreadable files, fencing by generation."""

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
    assert sorted(os.listdir(tmp_path)) == ["ckpt-g000000-00003-0000000000.pt",
                                           "ckpt-g000000-00004-0000000000.pt"]


def test_failed_write_leaves_previous_checkpoint_and_no_temp(tmp_path):
    checkpoint.save(tmp_path, payload(1), 1, 0)

    class Unpicklable:
        def __reduce__(self):
            raise OSError(5, "disk on fire")

    with pytest.raises(CheckpointError, match="cannot write checkpoint .*ckpt-g000000-00002"):
        checkpoint.save(tmp_path, {"model": Unpicklable()}, 2, 0)
    assert os.listdir(tmp_path) == ["ckpt-g000000-00001-0000000000.pt"]


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


# -- fencing -------------------------------------------------------------------------------


def test_generations_are_claimed_once_each_and_above_any_present(tmp_path):
    assert checkpoint.claim_generation(tmp_path) == 1
    assert checkpoint.claim_generation(tmp_path) == 2
    checkpoint.save(tmp_path, payload(1), 0, 10, generation=7)
    assert checkpoint.claim_generation(tmp_path) == 8
    # a marker someone else created first is skipped, not shared
    (tmp_path / "generation-000009").write_text("")
    assert checkpoint.claim_generation(tmp_path) == 10
    gen, token = checkpoint.claim(tmp_path)
    assert gen == 11 and checkpoint.generation_token(tmp_path, 11) == token
    assert checkpoint.generation_token(tmp_path, 12) is None
    checkpoint.claim(tmp_path, keep_markers=2)
    markers = sorted(n for n in os.listdir(tmp_path) if n.startswith("generation-"))
    assert markers == ["generation-000011", "generation-000012"]


def test_latest_orders_by_generation_first_and_old_names_are_generation_0(tmp_path):
    torch.save(payload(1), tmp_path / "ckpt-00005-0000000000.pt")  # an earlier version's name
    assert checkpoint.latest_key(tmp_path)[0] == (0, 5, 0)
    checkpoint.save(tmp_path, payload(3), 3, 0, keep=10, generation=1)
    checkpoint.save(tmp_path, payload(2), 1, 40, keep=10, generation=2)
    key, path = checkpoint.latest_key(tmp_path)
    assert key == (2, 1, 40) and checkpoint.load(path)["epoch"] == 2


def test_a_stale_run_cannot_write_after_a_newer_one(tmp_path):
    old = checkpoint.claim_generation(tmp_path)
    checkpoint.save(tmp_path, payload(1), 2, 0, generation=old)
    new = checkpoint.claim_generation(tmp_path)  # a retried launcher's run
    checkpoint.save(tmp_path, payload(2), 1, 30, generation=new)
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(checkpoint.StaleWriter,
                       match=f"generation {new} in .* is newer than this run's \\({old}\\)"):
        checkpoint.save(tmp_path, payload(3), 2, 500, generation=old)
    assert sorted(os.listdir(tmp_path)) == before
    assert checkpoint.latest_key(tmp_path)[0] == (new, 1, 30)


def test_a_newer_run_claimed_during_the_write_removes_the_stale_file(tmp_path, monkeypatch):
    old = checkpoint.claim_generation(tmp_path)
    real_save = torch.save

    def save_then_newer_run_starts(obj, f):
        real_save(obj, f)
        checkpoint.claim_generation(tmp_path)  # between the first check and the rename

    monkeypatch.setattr(checkpoint.torch, "save", save_then_newer_run_starts)
    with pytest.raises(checkpoint.StaleWriter):
        checkpoint.save(tmp_path, payload(1), 2, 0, generation=old)
    assert checkpoint.latest(tmp_path) is None
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
