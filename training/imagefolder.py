"""Find labelled images on disk: the tiny-imagenet layout as downloaded, or an ImageFolder.

``scan(root)`` returns an ``ImageSet`` (class names, train and validation samples as
``(path, label)`` lists) and reads no image. Layouts, tried in this order:

1. tiny-imagenet: ``root/train/<wnid>/images/*.JPEG``; validation from
   ``root/val/val_annotations.txt`` (``file <TAB> wnid <TAB> box...``) and ``root/val/images/``.
2. ImageFolder with splits: ``root/train/<class>/*.jpg``; validation from ``root/val/<class>/``
   when that directory exists.
3. ImageFolder: ``root/<class>/*.jpg``; no validation split.

Anything else, an empty class, a validation file or class that does not exist: ``DatasetError``
naming the path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from training.errors import DatasetError

IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png", ".bmp", ".ppm", ".webp")

Sample = tuple[str, int]
"""One labelled image: its path and its class index."""


@dataclass(frozen=True)
class ImageSet:
    """Classes (sorted), train and optional validation samples as ``(path, class index)``."""

    layout: str
    classes: tuple[str, ...]
    train: tuple[Sample, ...]
    val: tuple[Sample, ...] | None


def is_image(name: str) -> bool:
    """True for a file name with a known image suffix (any case)."""
    return name.lower().endswith(IMAGE_SUFFIXES)


def _images_in(directory: Path) -> list[str]:
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        raise DatasetError(f"{directory}: cannot list: {exc.strerror}") from exc
    return [str(directory / n) for n in names if is_image(n) and (directory / n).is_file()]


def _subdirs(directory: Path) -> list[str]:
    try:
        return sorted(e.name for e in os.scandir(directory) if e.is_dir())
    except OSError as exc:
        raise DatasetError(f"{directory}: cannot list: {exc.strerror}") from exc


def _folder_samples(directory: Path, classes: tuple[str, ...] | None = None
                    ) -> tuple[tuple[str, ...], tuple[Sample, ...]]:
    found = tuple(_subdirs(directory))
    if not found:
        raise DatasetError(f"{directory}: no class directories")
    if classes is None:
        classes = found
    else:
        unknown = sorted(set(found) - set(classes))
        if unknown:
            raise DatasetError(f"{directory}: class {unknown[0]} is not among the training classes")
    index = {c: i for i, c in enumerate(classes)}
    samples: list[Sample] = []
    for c in found:
        images = _images_in(directory / c)
        if not images:
            raise DatasetError(f"{directory / c}: no images")
        samples.extend((p, index[c]) for p in images)
    return classes, tuple(samples)


def _tiny_val(root: Path, classes: tuple[str, ...]) -> tuple[Sample, ...] | None:
    val = root / "val"
    annotations = val / "val_annotations.txt"
    if not val.is_dir():
        return None
    if not annotations.is_file():
        raise DatasetError(f"{annotations} not found (tiny-imagenet validation labels)")
    index = {c: i for i, c in enumerate(classes)}
    samples: list[Sample] = []
    try:
        lines = annotations.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{annotations}: cannot read: {exc}") from exc
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 2:
            raise DatasetError(f"{annotations}:{n}: expected 'file<TAB>wnid...'")
        name, wnid = fields[0].strip(), fields[1].strip()
        if wnid not in index:
            raise DatasetError(f"{annotations}:{n}: class {wnid} is not among the training classes")
        path = val / "images" / name
        if not path.is_file():
            raise DatasetError(f"{path} not found (listed in {annotations}:{n})")
        samples.append((str(path), index[wnid]))
    if not samples:
        raise DatasetError(f"{annotations}: no entries")
    return tuple(samples)


def scan(root: str | Path) -> ImageSet:
    """Scan ``root`` for one of the three layouts; ``DatasetError`` when none fits."""
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"image data directory {root} does not exist")
    train = root / "train"
    if train.is_dir():
        wnids = tuple(_subdirs(train))
        if wnids and all((train / w / "images").is_dir() for w in wnids):
            tiny: list[Sample] = []
            for i, w in enumerate(wnids):
                images = _images_in(train / w / "images")
                if not images:
                    raise DatasetError(f"{train / w / 'images'}: no images")
                tiny.extend((p, i) for p in images)
            return ImageSet("tiny-imagenet", wnids, tuple(tiny), _tiny_val(root, wnids))
        classes, samples = _folder_samples(train)
        val = None
        if (root / "val").is_dir():
            _, val = _folder_samples(root / "val", classes)
        return ImageSet("imagefolder-splits", classes, samples, val)
    classes, samples = _folder_samples(root)
    return ImageSet("imagefolder", classes, samples, None)
