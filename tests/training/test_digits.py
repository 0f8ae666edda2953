"""training.digits: scikit-learn's real handwritten digits as MNIST-format IDX files that
training.mnist reads (nothing downloaded)."""
import subprocess
import sys

import numpy as np
import pytest

from training import digits
from training.idx import load_mnist


def test_to_mnist_scales_repeats_and_centres_each_pixel():
    img = np.zeros((1, 8, 8))
    img[0, 0, 0], img[0, 7, 7] = 16, 8
    out = digits.to_mnist(img)
    assert out.shape == (1, 28, 28) and out.dtype == np.uint8
    assert (out[0, 2:5, 2:5] == 255).all() and (out[0, 23:26, 23:26] == 128).all()
    assert out[0, :2].sum() == 0 and out[0, :, :2].sum() == 0 and out[0, 26:].sum() == 0
    assert int(out.sum()) == 9 * (255 + 128)
    with pytest.raises(digits.DigitsError, match="must be"):
        digits.to_mnist(np.zeros((1, 7, 8)))


def test_split_is_a_fixed_partition_of_every_sample():
    train, test = digits.split(1797, 0.25, 0)
    assert len(test) == 449 and len(train) == 1348
    assert sorted(np.concatenate([train, test]).tolist()) == list(range(1797))
    again = digits.split(1797, 0.25, 0)
    assert (again[0] == train).all() and (again[1] == test).all()
    assert not (digits.split(1797, 0.25, 1)[1] == test).all()
    for bad in (0.0, 1.0, 0.001):
        with pytest.raises(digits.DigitsError):
            digits.split(1797, bad, 0)


def test_the_command_writes_files_training_mnist_reads(tmp_path):
    cmd = [sys.executable, "-m", "training.digits"]
    first = subprocess.run([*cmd, str(tmp_path / "a")], capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    splits = load_mnist(tmp_path / "a")
    assert (len(splits["train"]), len(splits["test"])) == (1348, 449)
    assert tuple(splits["train"].images.shape[1:]) == (28, 28)
    assert set(splits["test"].labels.tolist()) == set(range(10))
    assert int(splits["train"].images.max()) == 255 and int(splits["train"].images[:, :2].max()) == 0


def test_a_bad_fraction_is_one_line_and_exit_1(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "training.digits", str(tmp_path), "--test-fraction", "2"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and "--test-fraction" in proc.stderr
