"""Finding labelled images: tiny-imagenet as downloaded, ImageFolder layouts, bad trees, and
the scan cache a joining worker reads instead of a stat per image."""

import json
import os
import time
from pathlib import Path

import pytest

from tests.training.trainhelp import write_tiny_imagenet
from training.errors import DatasetError
from training.imagefolder import CACHE_NAME, ImageSet, scan


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


# -- the scan cache (.training-scan.json) ----------------------------------------------------
def age(root: Path, seconds: float = 3600) -> None:
    """Set every directory's and file's times ``seconds`` back (a tree written a while ago, as
    dataset-sync leaves it: rsync keeps the source's times), so the scan may cache it."""
    then = time.time() - seconds
    for path in [root, *root.rglob("*")]:
        os.utime(path, (then, then), follow_symlinks=False)


def cached_tree(tmp_path: Path) -> tuple[Path, ImageSet]:
    root = write_tiny_imagenet(tmp_path / "tiny", classes=3, per_class=4, val_per_class=2)
    age(root)
    found = scan(root)
    assert (root / CACHE_NAME).is_file()
    return root, found


def test_a_valid_cache_is_used_instead_of_listing_the_images(tmp_path, capsys):
    root, found = cached_tree(tmp_path)
    # an image goes, behind the cache's back: its directory's time is put back as it was, so
    # only a scan that listed the directory again could notice
    images = root / "train" / "n01000001" / "images"
    st = images.stat()
    (images / "n01000001_2.JPEG").unlink()
    os.utime(images, ns=(st.st_atime_ns, st.st_mtime_ns))
    again = scan(root)
    assert again == found  # the cached list, the removed image included: the cache was used
    assert capsys.readouterr().err == ""
    assert len(scan(root, cache=False).train) == len(found.train) - 1


@pytest.mark.parametrize("change", ["add-image", "remove-class", "annotations", "new-root-dir"])
def test_a_stale_cache_is_rejected_with_one_line_and_the_tree_scanned_again(tmp_path, capsys, change):
    root, found = cached_tree(tmp_path)
    if change == "add-image":
        (root / "train" / "n01000000" / "images" / "extra.JPEG").write_bytes(b"")
    elif change == "remove-class":
        for p in sorted((root / "train" / "n01000002").rglob("*"), reverse=True):
            p.rmdir() if p.is_dir() else p.unlink()
        (root / "train" / "n01000002").rmdir()
        ann = root / "val" / "val_annotations.txt"
        ann.write_text("".join(line + "\n" for line in ann.read_text().splitlines() if "n01000002" not in line))
    elif change == "annotations":
        ann = root / "val" / "val_annotations.txt"
        ann.write_text(ann.read_text().replace("n01000001", "n01000000"))
    else:  # not part of the layout, but the cache cannot tell (it keeps root's subdirectories)
        (root / "test").mkdir()
    fresh = scan(root, cache=False)
    assert (fresh == found) == (change == "new-root-dir")
    assert scan(root) == fresh
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "stale scan cache" in err[0] and str(root) in err[0], err


@pytest.mark.parametrize("damage", ["garbage", "edited", "truncated"])
def test_a_bad_cache_is_one_line_and_a_rescan(tmp_path, capsys, damage):
    root, found = cached_tree(tmp_path)
    cache = root / CACHE_NAME
    text = cache.read_text()
    if damage == "garbage":
        cache.write_bytes(b"\xff\x00 not json")
    elif damage == "edited":  # a sample moved to another class, stamps untouched
        header, body = text.split("\n", 1)
        doc = json.loads(body)
        doc["train"][0][1] = 2
        cache.write_text(header + "\n" + json.dumps(doc, separators=(",", ":")))
    else:
        cache.write_text(text[: len(text) // 2])
    assert scan(root) == found
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ("not a valid scan cache" in err[0] or "cannot read" in err[0]), err
    assert "Traceback" not in "".join(err)
    # rewritten: the next scan uses it without a word
    assert scan(root) == found and capsys.readouterr().err == ""


def test_a_tree_changed_just_now_is_not_cached(tmp_path):
    """A change within the file system's time granularity of the scan could go unseen."""
    root = write_tiny_imagenet(tmp_path / "tiny", classes=2, per_class=1, val_per_class=1)
    scan(root)
    assert not (root / CACHE_NAME).exists()


def test_the_cache_holds_relative_paths_so_the_tree_can_move(tmp_path):
    root, found = cached_tree(tmp_path)
    moved = tmp_path / "moved"
    root.rename(moved)
    again = scan(moved)
    assert again.train == tuple((p.replace(str(root), str(moved)), label) for p, label in found.train)


def test_imagefolder_layouts_are_cached_too(tmp_path, capsys):
    touch_images(tmp_path / "d" / "train" / "cat", ["a.jpg", "b.PNG", "notes.txt"])
    touch_images(tmp_path / "d" / "val" / "cat", ["d.jpg"])
    touch_images(tmp_path / "e" / "a", ["1.jpg"])
    for root in (tmp_path / "d", tmp_path / "e"):
        age(root)
        found = scan(root)
        assert (root / CACHE_NAME).is_file() and scan(root) == found
        assert capsys.readouterr().err == ""  # used, not found stale
        touch_images(root / ("train" if root.name == "d" else "") / "new", ["x.jpg"])
        assert scan(root) == scan(root, cache=False) != found
        assert "stale scan cache" in capsys.readouterr().err


# -- dataset-sync's manifest as the file list ------------------------------------------------
def synced_tree(tmp_path: Path) -> tuple[Path, ImageSet]:
    """A tree as dataset-sync leaves it on a host: the source's times, then its manifest."""
    from elastic.sync.manifest import MANIFEST_NAME, build_manifest

    root = write_tiny_imagenet(tmp_path / "tiny", classes=3, per_class=4, val_per_class=2)
    age(root)
    on_disk = scan(root, cache=False)
    manifest = root / MANIFEST_NAME
    manifest.write_text(build_manifest(str(root)).to_json())
    then = time.time() - 60
    os.utime(manifest, (then, then))
    return root, on_disk


def test_dataset_sync_manifest_is_the_file_list_while_the_copy_is_unchanged(tmp_path, capsys):
    root, on_disk = synced_tree(tmp_path)
    # an image goes behind the manifest's back (its directory's time put back): only a scan
    # that listed the directory could notice, and the manifest's list still has it
    images = root / "train" / "n01000002" / "images"
    st = images.stat()
    (images / "n01000002_0.JPEG").unlink()
    os.utime(images, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert scan(root) == on_disk
    assert capsys.readouterr().err == ""
    assert (root / CACHE_NAME).is_file()  # the first scan on the host also wrote the cache


@pytest.mark.parametrize("change", ["add-image", "annotations", "damaged"])
def test_a_stale_or_damaged_dataset_sync_manifest_is_one_line_and_a_scan(tmp_path, capsys, change):
    from elastic.sync.manifest import MANIFEST_NAME

    root, on_disk = synced_tree(tmp_path)
    if change == "add-image":
        (root / "train" / "n01000000" / "images" / "extra.JPEG").write_bytes(b"")
        what = "stale"
    elif change == "annotations":
        ann = root / "val" / "val_annotations.txt"
        ann.write_text(ann.read_text() + "\n")
        what = "stale"
    else:
        manifest = root / MANIFEST_NAME
        manifest.write_text(manifest.read_text().replace('"size": ', '"size": 1', 1))
        what = "not a dataset-sync manifest"
    assert scan(root) == scan(root, cache=False)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and what in err[0] and str(root) in err[0], err
