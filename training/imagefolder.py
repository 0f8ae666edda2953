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

The scan cache (a manifest of the file list): listing a class directory is cheap, but telling
images from other entries costs one ``stat`` per file (1.28 M for ImageNet), which a worker
joining a running job would pay before it can join. ``scan`` therefore writes what it found to
``root/.training-scan.json`` (atomically; when the data is read-only, to
``$XDG_CACHE_HOME/elastic-horovod/training-scan/``) and later scans of the same tree read it
instead. It is never trusted blindly: it holds the modification time of every directory the
scan listed and the size and time of the validation annotations, and the names of the
subdirectories of ``root`` (whose own time the cache file changes); any difference, a missing
entry, a malformed or edited file (its ``digest``) and the cache is dropped with one line on
stderr and the tree scanned again. A directory changed less than ``RACY_NS`` before the scan
is not cached (a change within the file system's time granularity could go unseen).
``dataset-sync`` leaves the cache out of what it verifies and copies.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from training.errors import DatasetError

CACHE_NAME = ".training-scan.json"
CACHE_FORMAT = "elastic-horovod/training-scan/v1"
RACY_NS = 2_000_000_000
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


Stamps = dict[str, list[int]]
"""Path (absolute while scanning) -> ``[mtime_ns]`` of a listed directory, ``[size, mtime_ns]``
of a file read."""


def _stamp(stamps: Stamps, path: Path, file: bool = False) -> None:
    """Record ``path``'s time (and size for a file) before it is read: a change after the
    stat makes it newer than recorded, so the cache is rejected, never wrongly trusted."""
    try:
        st = os.stat(path)
    except OSError:
        return  # the read that follows reports it
    stamps[str(path)] = [st.st_size, st.st_mtime_ns] if file else [st.st_mtime_ns]


def _images_in(directory: Path, stamps: Stamps) -> list[str]:
    _stamp(stamps, directory)
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        raise DatasetError(f"{directory}: cannot list: {exc.strerror}") from exc
    return [str(directory / n) for n in names if is_image(n) and (directory / n).is_file()]


def _subdirs(directory: Path, stamps: Stamps) -> list[str]:
    _stamp(stamps, directory)
    try:
        return sorted(e.name for e in os.scandir(directory) if e.is_dir())
    except OSError as exc:
        raise DatasetError(f"{directory}: cannot list: {exc.strerror}") from exc


def _folder_samples(directory: Path, stamps: Stamps, classes: tuple[str, ...] | None = None
                    ) -> tuple[tuple[str, ...], tuple[Sample, ...]]:
    found = tuple(_subdirs(directory, stamps))
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
        images = _images_in(directory / c, stamps)
        if not images:
            raise DatasetError(f"{directory / c}: no images")
        samples.extend((p, index[c]) for p in images)
    return classes, tuple(samples)


def _tiny_val(root: Path, classes: tuple[str, ...], stamps: Stamps) -> tuple[Sample, ...] | None:
    val = root / "val"
    annotations = val / "val_annotations.txt"
    if not val.is_dir():
        return None
    _stamp(stamps, val)
    _stamp(stamps, val / "images")
    _stamp(stamps, annotations, file=True)
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


def _scan(root: Path, stamps: Stamps) -> ImageSet:
    train = root / "train"
    if train.is_dir():
        wnids = tuple(_subdirs(train, stamps))
        for w in wnids:
            _stamp(stamps, train / w)  # whether it holds images/
        if wnids and all((train / w / "images").is_dir() for w in wnids):
            tiny: list[Sample] = []
            for i, w in enumerate(wnids):
                images = _images_in(train / w / "images", stamps)
                if not images:
                    raise DatasetError(f"{train / w / 'images'}: no images")
                tiny.extend((p, i) for p in images)
            return ImageSet("tiny-imagenet", wnids, tuple(tiny), _tiny_val(root, wnids, stamps))
        classes, samples = _folder_samples(train, stamps)
        val = None
        if (root / "val").is_dir():
            _, val = _folder_samples(root / "val", stamps, classes)
        return ImageSet("imagefolder-splits", classes, samples, val)
    classes, samples = _folder_samples(root, stamps)
    return ImageSet("imagefolder", classes, samples, None)


def scan(root: str | Path, cache: bool = True) -> ImageSet:
    """Scan ``root`` for one of the three layouts; ``DatasetError`` when none fits. With
    ``cache``, a valid scan cache of the same tree is used instead, and a fresh scan is
    written as the cache (see the module docstring)."""
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"image data directory {root} does not exist")
    if cache:
        found = load_cache(root)
        if found is not None:
            return found
    started = time.time_ns()
    root_dirs = _root_dirs(root) if cache else []
    stamps: Stamps = {}
    found = _scan(root, stamps)
    if cache and stamps and max(v[-1] for v in stamps.values()) < started - RACY_NS:
        save_cache(root, found, stamps, root_dirs)
    return found


# -- the scan cache ---------------------------------------------------------------------
def _root_dirs(root: Path) -> list[str]:
    """The names of ``root``'s subdirectories (one readdir; no stat where d_type is known)."""
    try:
        return sorted(e.name for e in os.scandir(root) if e.is_dir())
    except OSError as exc:
        raise DatasetError(f"{root}: cannot list: {exc.strerror}") from exc


def cache_paths(root: Path) -> list[Path]:
    """Where the scan cache of ``root`` is looked for, in order: next to the data, then in the
    user's cache directory (for read-only data)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    key = hashlib.sha256(os.path.realpath(root).encode()).hexdigest()[:32]
    return [root / CACHE_NAME, Path(base) / "elastic-horovod" / "training-scan" / f"{key}.json"]


def _rel(root: Path, path: str) -> str:
    if path == str(root):
        return ""
    prefix = "" if str(root) == "." else str(root).rstrip("/") + "/"
    if not path.startswith(prefix):
        raise ValueError(f"{path} is not under {root}")
    return path[len(prefix):]


def _digest(doc: dict) -> str:
    body = {k: v for k, v in doc.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def cache_document(root: Path, found: ImageSet, stamps: Stamps, root_dirs: list[str]) -> dict:
    """The cache of ``found`` (paths relative to ``root``, so the tree may move)."""
    doc = {
        "format": CACHE_FORMAT, "layout": found.layout, "classes": list(found.classes),
        "train": [[_rel(root, p), label] for p, label in found.train],
        "val": None if found.val is None else [[_rel(root, p), label] for p, label in found.val],
        "root_dirs": root_dirs,
        "stamps": {_rel(root, p): v for p, v in sorted(stamps.items())},
    }
    doc["digest"] = _digest(doc)
    return doc


def save_cache(root: Path, found: ImageSet, stamps: Stamps, root_dirs: list[str]) -> Path | None:
    """Write the scan cache atomically where it can be written (``cache_paths``); the path,
    or None when nowhere (the cache is an optimisation: no error)."""
    try:
        text = json.dumps(cache_document(root, found, stamps, root_dirs), separators=(",", ":"))
    except (OSError, ValueError):
        return None
    for path in cache_paths(root):
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            with os.fdopen(fd, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            return path
        except OSError:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
    return None


def _stale(root: Path, doc: dict) -> str | None:
    """Why the cache no longer describes the tree at ``root``, or None."""
    if _root_dirs(root) != doc["root_dirs"]:
        return f"the subdirectories of {root} changed"
    for rel, want in doc["stamps"].items():
        path = root / rel
        try:
            st = os.stat(path)
        except OSError:
            return f"{path} is gone"
        got = [st.st_size, st.st_mtime_ns] if len(want) == 2 else [st.st_mtime_ns]
        if got != want:
            return f"{path} changed since the scan"
    return None


def _from_document(root: Path, doc: dict) -> ImageSet:
    if doc.get("format") != CACHE_FORMAT:
        raise ValueError(f"format is {doc.get('format')!r}")
    if doc.get("digest") != _digest(doc):
        raise ValueError("its digest does not match its content")
    classes = tuple(str(c) for c in doc["classes"])
    train = tuple((str(root / p), int(label)) for p, label in doc["train"])
    val = None if doc["val"] is None else tuple((str(root / p), int(label)) for p, label in doc["val"])
    if not classes or not train or not isinstance(doc["stamps"], dict) or not doc["stamps"]:
        raise ValueError("it is empty")
    return ImageSet(str(doc["layout"]), classes, train, val)


def load_cache(root: Path) -> ImageSet | None:
    """The ``ImageSet`` of a valid scan cache of ``root``; None when there is none, and when
    the one found is malformed or stale (with one line on stderr saying why)."""
    for path in cache_paths(root):
        try:
            text = path.read_text()
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as exc:
            _note(f"{path}: cannot read the scan cache ({exc}); scanning {root}")
            return None
        try:
            doc = json.loads(text)
            found = _from_document(root, doc)
            why = _stale(root, doc)
        except (ValueError, KeyError, TypeError, AttributeError, OSError) as exc:
            _note(f"{path}: not a valid scan cache ({exc}); scanning {root}")
            return None
        if why is not None:
            _note(f"{path}: stale scan cache ({why}); scanning {root}")
            return None
        return found
    return None


def _note(msg: str) -> None:
    sys.stderr.write(f"training: {msg}\n")
    sys.stderr.flush()
