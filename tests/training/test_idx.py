"""MNIST IDX parsing and finding: the files as distributed, gzipped or not, and bad ones."""

import gzip

import pytest
import torch

from tests.training.trainhelp import make_idx, write_mnist
from training.errors import DatasetError
from training.idx import load_mnist, parse_idx, split_from_idx


def test_round_trip_dims_and_payload():
    data = make_idx(bytes(range(24)), (2, 3, 4))
    dims, payload = parse_idx(data, "x")
    assert dims == (2, 3, 4)
    assert payload == bytes(range(24))


@pytest.mark.parametrize("data, fragment", [
    (b"\x00\x00", "only 2 bytes"),
    (b"\x01\x00\x08\x01" + b"\x00\x00\x00\x01" + b"\x00", "bad magic"),
    (b"\x00\x00\x0d\x01" + b"\x00\x00\x00\x01" + b"\x00", "not unsigned byte"),
    (b"\x00\x00\x08\x03" + b"\x00\x00\x00\x01", "truncated IDX header"),
    (make_idx(bytes(6), (2, 3))[:-1], "need 6 bytes of data, file has 5"),
])
def test_malformed_files_name_the_problem(data, fragment):
    with pytest.raises(DatasetError, match=fragment) as info:
        parse_idx(data, "train-images-idx3-ubyte")
    assert str(info.value).startswith("train-images-idx3-ubyte: ")


def test_image_and_label_counts_must_agree():
    images = make_idx(bytes(2 * 4 * 4), (2, 4, 4))
    labels = make_idx(bytes([1, 2, 3]), (3,))
    with pytest.raises(DatasetError, match="has 2 images but lbl has 3 labels"):
        split_from_idx(images, labels, "img", "lbl")


def test_labels_must_be_digits():
    with pytest.raises(DatasetError, match="label 12 is not a digit"):
        split_from_idx(make_idx(bytes(16), (1, 4, 4)), make_idx(bytes([12]), (1,)), "i", "l")


@pytest.mark.parametrize("gz", [False, True])
def test_load_directory(tmp_path, gz):
    write_mnist(tmp_path, train=30, test=10, gz=gz)
    splits = load_mnist(tmp_path)
    assert len(splits["train"]) == 30 and len(splits["test"]) == 10
    assert splits["train"].images.shape == (30, 28, 28)
    assert splits["train"].images.dtype == torch.uint8
    assert splits["train"].labels.tolist()[:12] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]


def test_torchvision_raw_layout(tmp_path):
    write_mnist(tmp_path / "MNIST" / "raw", train=10, test=10)
    assert len(load_mnist(tmp_path)["test"]) == 10


def test_missing_file_is_named(tmp_path):
    write_mnist(tmp_path, train=10, test=10)
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(DatasetError, match=r"t10k-labels-idx1-ubyte\[\.gz\] not found in"):
        load_mnist(tmp_path)


def test_missing_directory(tmp_path):
    with pytest.raises(DatasetError, match="does not exist"):
        load_mnist(tmp_path / "nope")


def test_corrupt_gzip_is_named(tmp_path):
    write_mnist(tmp_path, train=10, test=10, gz=True)
    (tmp_path / "train-labels-idx1-ubyte.gz").write_bytes(gzip.compress(b"x" * 50)[:20])
    with pytest.raises(DatasetError, match="train-labels-idx1-ubyte.gz: cannot read"):
        load_mnist(tmp_path)
