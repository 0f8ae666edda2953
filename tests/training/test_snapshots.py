"""Pod-local snapshots, the choice of the state a new world starts from, the background
writer and ``--checkpoint-every``."""

from __future__ import annotations

import os
import threading

import pytest
import torch

from training import options, snapshots
from training.background import BackgroundWriter
from training.errors import ConfigError
from training.mnist import DEFAULTS


def test_local_store_keeps_the_newest_only(tmp_path):
    store = snapshots.LocalStore(tmp_path / "snap")
    assert store.best() is None
    store.write({"model": {"w": torch.ones(2)}}, (1, 0, 40), "0badc0de")
    # a newer one of another run's directory (another token) is left from before
    (tmp_path / "snap" / snapshots.name_for((9, 9, 0), "deadbeef")).write_bytes(b"")
    store.write({"model": {"w": torch.ones(2) * 2}}, (1, 0, 80), "0badc0de")
    key, path = store.best()
    assert key == (1, 0, 80) and store.token(path) == "0badc0de"
    assert torch.load(path)["model"]["w"].tolist() == [2.0, 2.0]
    assert os.listdir(tmp_path / "snap") == [snapshots.name_for((1, 0, 80), "0badc0de")]


def test_default_dir_is_per_job(tmp_path):
    a = snapshots.default_dir(str(tmp_path), "/ckpt/a", "mnist")
    assert a == snapshots.default_dir(str(tmp_path), "/ckpt/a/", "mnist")
    assert a != snapshots.default_dir(str(tmp_path), "/ckpt/b", "mnist")
    assert a != snapshots.default_dir(str(tmp_path), "/ckpt/a", "resnet50")
    assert a.parent == tmp_path / "training-snapshots"


def test_a_live_rank_wins_over_any_file():
    offers = [(0, -1, -1, -1, ""), (1, -1, -1, -1, "live"), (0, 9, 9, 9, "local")]
    assert snapshots.choose(offers) == (1, "live")
    offers[0] = (1, -1, -1, -1, "live")
    assert snapshots.choose(offers) == (0, "live")


def test_a_fresh_world_takes_the_newest_committed_state_any_rank_holds():
    assert snapshots.choose([(0, -1, -1, -1, "")] * 3) is None
    offers = [(0, 3, 1, 0, "shared"), (0, 3, 1, 600, "local"), (0, 3, 1, 600, "local"),
              (0, 2, 9, 0, "local")]
    assert snapshots.choose(offers) == (1, "local")  # the lowest of the equal holders
    # generation first: a newer run's earlier position beats an older run's later one
    offers = [(0, 4, 0, 60, "shared"), (0, 3, 7, 0, "local")]
    assert snapshots.choose(offers) == (0, "shared")


def test_background_writer_has_one_write_in_flight_and_reports_failures():
    reported: list[str] = []
    writer = BackgroundWriter("t", report=reported.append)
    gate, done = threading.Event(), []
    assert writer.submit(lambda: (gate.wait(60), done.append(1)), "first")
    assert writer.busy()
    assert not writer.submit(lambda: done.append(2), "second")  # skipped, not queued
    gate.set()
    assert writer.wait(60)
    assert done == [1]

    def fail():
        raise OSError(28, "No space left on device")

    assert writer.submit(fail, "checkpoint /ckpt")
    assert writer.wait(60)
    assert writer.failures == 1 and writer.writes == 1
    assert reported == ["checkpoint /ckpt: [Errno 28] No space left on device"]


@pytest.mark.parametrize("text,every", [("200", options.Every(steps=200)),
                                        ("90s", options.Every(seconds=90.0)),
                                        ("5m", options.Every(seconds=300.0)),
                                        ("1.5h", options.Every(seconds=5400.0))])
def test_checkpoint_every_takes_steps_or_a_duration(text, every):
    cfg = options.parse(["--synthetic", "--checkpoint-every", text], DEFAULTS)
    assert cfg.checkpoint_every == every


def test_checkpoint_every_defaults_to_minutes_and_rejects_nonsense():
    assert options.parse(["--synthetic"], DEFAULTS).checkpoint_every == options.Every(seconds=300.0)
    for bad in ("0", "-5", "5x", "m", "0s"):
        with pytest.raises(ConfigError, match="--checkpoint-every.*want a number of steps"):
            options.parse(["--synthetic", "--checkpoint-every", bad], DEFAULTS)
