"""Finding labelled images: tiny-imagenet as downloaded, ImageFolder layouts, bad trees."""

from pathlib import Path

import pytest

from tests.training.trainhelp import write_tiny_imagenet
from training.errors import DatasetError
from training.imagefolder import scan


def touch_images(directory: Path, names):
    directory.mkdir(parents=True, exist_ok=True)
    for n in names:
        (directory / n).write_bytes(b"")


def test_tiny_imagenet_layout(tmp_path):
    root = write_tiny_imagenet(tmp_path, classes=3, per_class=4, val_per_class=2)
    found = scan(root)
    assert found.layout == "tiny-imagenet"
    assert found.classes == ("n01000000", "n01000001", "n01000002")
    assert len(found.train) == 12 and len(found.val) == 6
    # labels follow the sorted wnids; the boxes file next to images/ is not a sample
    assert {label for p, label in found.train if "/n01000001/" in p} == {1}
    assert all(p.endswith(".JPEG") for p, _ in found.train)
    val_labels = [label for _, label in found.val]
    assert val_labels == [0, 0, 1, 1, 2, 2]


def test_tiny_imagenet_val_annotation_names_missing_image(tmp_path):
    root = write_tiny_imagenet(tmp_path, classes=2, per_class=1, val_per_class=1)
    (root / "val" / "images" / "val_1.JPEG").unlink()
    with pytest.raises(DatasetError, match=r"val_1.JPEG not found \(listed in .*val_annotations.txt:2\)"):
        scan(root)


def test_tiny_imagenet_without_annotations(tmp_path):
    root = write_tiny_imagenet(tmp_path, classes=2, per_class=1, val_per_class=1)
    (root / "val" / "val_annotations.txt").unlink()
    with pytest.raises(DatasetError, match="val_annotations.txt not found"):
        scan(root)


def test_tiny_imagenet_unknown_val_class(tmp_path):
    root = write_tiny_imagenet(tmp_path, classes=2, per_class=1, val_per_class=1)
    ann = root / "val" / "val_annotations.txt"
    ann.write_text(ann.read_text().replace("n01000001", "n09999999"))
    with pytest.raises(DatasetError, match="class n09999999 is not among the training classes"):
        scan(root)


def test_imagefolder_with_splits(tmp_path):
    touch_images(tmp_path / "train" / "cat", ["a.jpg", "b.PNG", "notes.txt"])
    touch_images(tmp_path / "train" / "dog", ["c.jpeg"])
    touch_images(tmp_path / "val" / "dog", ["d.jpg"])
    found = scan(tmp_path)
    assert found.layout == "imagefolder-splits"
    assert found.classes == ("cat", "dog")
    assert [label for _, label in found.train] == [0, 0, 1]
    assert [(Path(p).name, label) for p, label in found.val] == [("d.jpg", 1)]


def test_plain_imagefolder(tmp_path):
    touch_images(tmp_path / "a", ["1.jpg"])
    touch_images(tmp_path / "b", ["2.jpg"])
    found = scan(tmp_path)
    assert found.layout == "imagefolder" and found.val is None and len(found.train) == 2


@pytest.mark.parametrize("setup, fragment", [
    (lambda r: None, "does not exist"),
    (lambda r: r.mkdir(), "no class directories"),
    (lambda r: touch_images(r / "train" / "cat", []), r"train/cat: no images"),
    (lambda r: (touch_images(r / "train" / "cat", ["a.jpg"]),
                touch_images(r / "val" / "cow", ["b.jpg"])), "class cow is not among the training classes"),
])
def test_bad_trees(tmp_path, setup, fragment):
    root = tmp_path / "data"
    setup(root)
    with pytest.raises(DatasetError, match=fragment):
        scan(root)
