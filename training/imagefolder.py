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
scan listed (``root`` aside) and the size and time of the validation annotations, and the
names of the subdirectories of ``root`` (whose own time the cache file changes); any difference, a missing
entry, a malformed or edited file (its ``digest``) and the cache is dropped with one line on
stderr and the tree scanned again. A directory changed less than ``RACY_NS`` before the scan
is not cached (a change within the file system's time granularity could go unseen).

On a copy made by ``dataset-sync`` there is a list already: its manifest
(``root/.dataset-manifest.json``, written atomically once the copy is complete and verified,
every file and directory in it). With no valid cache, the scan runs over that list instead of
the disk (no ``stat`` per image), when the manifest's digest holds, it lists no symlink, the
subdirectories of ``root`` are its, and no directory the scan lists (nor the annotations) is
newer than the manifest -- a change to the copy after the sync makes its directory newer; then
it writes the cache as above. Otherwise: one line on stderr when the manifest is damaged or
stale, and the disk is scanned. ``dataset-sync`` leaves the cache out of what it verifies and
copies, so a host's cache never makes its copy look changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from shared.atomicfile import write_atomic
from shared.environment import XDG_CACHE_HOME
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


class _Disk:
    """The tree as the file system shows it; records the stamps of what it lists."""

    def __init__(self) -> None:
        self.stamps: Stamps = {}

    def stamp(self, path: Path, file: bool = False) -> None:
        """Record ``path``'s time (and size for a file) before it is read: a change after the
        stat makes it newer than recorded, so the cache is rejected, never wrongly trusted."""
        try:
            st = os.stat(path)
        except OSError:
            return  # the read that follows reports it
        self.stamps[str(path)] = [st.st_size, st.st_mtime_ns] if file else [st.st_mtime_ns]

    def is_dir(self, path: Path) -> bool:
        return path.is_dir()

    def is_file(self, path: Path) -> bool:
        return path.is_file()

    def images_in(self, directory: Path) -> list[str]:
        self.stamp(directory)
        try:
            names = sorted(os.listdir(directory))
        except OSError as exc:
            raise DatasetError(f"{directory}: cannot list: {exc.strerror}") from exc
        return [str(directory / n) for n in names if is_image(n) and (directory / n).is_file()]

    def subdirs(self, directory: Path) -> list[str]:
        self.stamp(directory)
        try:
            return sorted(e.name for e in os.scandir(directory) if e.is_dir())
        except OSError as exc:
            raise DatasetError(f"{directory}: cannot list: {exc.strerror}") from exc


class _Listed(_Disk):
    """The tree as dataset-sync's manifest lists it (files and directories relative to
    ``root``): listing costs no system call; only the stamps stat what was listed."""

    def __init__(self, root: Path, files: set[str], dirs: set[str]) -> None:
        super().__init__()
        self.root, self.files, self.dirs = root, files, dirs | {""}
        self.listed: list[Path] = []  # every directory listed and file looked at
        self.children: dict[str, tuple[list[str], list[str]]] = {}  # dir -> (subdirs, files)
        for d in sorted(self.dirs - {""}):
            self.children.setdefault(os.path.dirname(d), ([], []))[0].append(os.path.basename(d))
        for f in sorted(files):
            self.children.setdefault(os.path.dirname(f), ([], []))[1].append(os.path.basename(f))

    def rel(self, path: Path) -> str:
        return "" if path == self.root else _rel(self.root, str(path))

    def is_dir(self, path: Path) -> bool:
        return self.rel(path) in self.dirs

    def is_file(self, path: Path) -> bool:
        self.listed.append(path)
        return self.rel(path) in self.files

    def images_in(self, directory: Path) -> list[str]:
        self.stamp(directory)
        self.listed.append(directory)
        names = self.children.get(self.rel(directory), ([], []))[1]
        return [str(directory / n) for n in names if is_image(n)]

    def subdirs(self, directory: Path) -> list[str]:
        self.stamp(directory)
        self.listed.append(directory)
        return list(self.children.get(self.rel(directory), ([], []))[0])


def _folder_samples(directory: Path, tree: _Disk, classes: tuple[str, ...] | None = None
                    ) -> tuple[tuple[str, ...], tuple[Sample, ...]]:
    found = tuple(tree.subdirs(directory))
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
        images = tree.images_in(directory / c)
        if not images:
            raise DatasetError(f"{directory / c}: no images")
        samples.extend((p, index[c]) for p in images)
    return classes, tuple(samples)


def _tiny_val(root: Path, classes: tuple[str, ...], tree: _Disk) -> tuple[Sample, ...] | None:
    val = root / "val"
    annotations = val / "val_annotations.txt"
    if not tree.is_dir(val):
        return None
    tree.stamp(val)
    tree.stamp(val / "images")
    tree.stamp(annotations, file=True)
    if not tree.is_file(annotations):
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
        if not tree.is_file(path):
            raise DatasetError(f"{path} not found (listed in {annotations}:{n})")
        samples.append((str(path), index[wnid]))
    if not samples:
        raise DatasetError(f"{annotations}: no entries")
    return tuple(samples)


def _scan(root: Path, tree: _Disk) -> ImageSet:
    train = root / "train"
    if tree.is_dir(train):
        wnids = tuple(tree.subdirs(train))
        for w in wnids:
            tree.stamp(train / w)  # whether it holds images/
        if wnids and all(tree.is_dir(train / w / "images") for w in wnids):
            tiny: list[Sample] = []
            for i, w in enumerate(wnids):
                images = tree.images_in(train / w / "images")
                if not images:
                    raise DatasetError(f"{train / w / 'images'}: no images")
                tiny.extend((p, i) for p in images)
            return ImageSet("tiny-imagenet", wnids, tuple(tiny), _tiny_val(root, wnids, tree))
        classes, samples = _folder_samples(train, tree)
        val = None
        if tree.is_dir(root / "val"):
            _, val = _folder_samples(root / "val", tree, classes)
        return ImageSet("imagefolder-splits", classes, samples, val)
    classes, samples = _folder_samples(root, tree)
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
    listed = _from_sync_manifest(root, root_dirs) if cache else None
    if listed is not None:
        found, stamps = listed
    else:
        disk = _Disk()
        found, stamps = _scan(root, disk), disk.stamps
    # root's own time changes with the cache file (and dataset-sync's manifest) written in it:
    # its subdirectories' names (root_dirs, read before the scan) stand for it
    stamps.pop(str(root), None)
    if cache and stamps and max(v[-1] for v in stamps.values()) < started - RACY_NS:
        save_cache(root, found, stamps, root_dirs)
    return found


# -- dataset-sync's manifest as the file list --------------------------------------------
SYNC_MANIFEST_NAME = ".dataset-manifest.json"  # elastic/sync/manifest.py (no import: layering)
SYNC_MANIFEST_FORMAT = "elastic-horovod/dataset-manifest/v1"


def _sync_digest(doc: dict) -> str:
    """``elastic.sync.manifest.Manifest.digest`` of a manifest document."""
    canonical = json.dumps({
        "files": [[p, int(e["size"]), str(e["sha256"])] for p, e in sorted(doc["files"].items())],
        "links": sorted((str(k), str(v)) for k, v in doc["links"].items()),
        "dirs": sorted(doc["dirs"]),
    }, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _from_sync_manifest(root: Path, root_dirs: list[str]) -> tuple[ImageSet, Stamps] | None:
    """The scan of ``root`` from the manifest ``dataset-sync`` wrote with the copy (its list of
    files and directories: no ``stat`` per image), when the copy is still what it lists:
    every directory the scan lists is no newer than the manifest (written after the copy was
    complete: a later change to a directory makes it newer) and the subdirectories of
    ``root`` are the manifest's. None when there is no usable manifest (one line on stderr
    when there is one that is damaged or stale): the caller scans the disk."""
    path = root / SYNC_MANIFEST_NAME
    try:
        st = os.stat(path)
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        _note(f"{path}: cannot read dataset-sync's manifest ({exc}); scanning {root}")
        return None
    try:
        if doc.get("format") != SYNC_MANIFEST_FORMAT:
            raise ValueError(f"format is {doc.get('format')!r}")
        if doc.get("digest") != _sync_digest(doc):
            raise ValueError("its digest does not match its content")
        if doc["links"]:
            return None  # symlinks: which are images or directories is the disk's to say
        tree = _Listed(root, {str(p) for p in doc["files"]}, {str(d) for d in doc["dirs"]})
        sizes = {str(p): int(e["size"]) for p, e in doc["files"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        _note(f"{path}: not a dataset-sync manifest ({exc}); scanning {root}")
        return None
    try:
        found = _scan(root, tree)
    except DatasetError:
        return None  # the disk's scan says what is wrong, naming the real path
    why = None
    if sorted(d for d in tree.dirs if d and "/" not in d) != root_dirs:
        why = f"the subdirectories of {root} are not the manifest's"
    val_images = root / "val" / "images"
    for listed in tree.listed:
        if listed.parent == val_images:
            continue  # a validation image looked up by name: its directory's stamp covers it
        if why is None and str(listed) not in tree.stamps:
            why = f"{listed} is gone"
    for name, (*size, mtime) in tree.stamps.items():
        if why is not None:
            break
        if name == str(root):
            continue  # written into by the commit after the manifest; root_dirs stand for it
        if mtime > st.st_mtime_ns:
            why = f"{name} changed after the copy"
        elif size and size[0] != sizes.get(tree.rel(Path(name))):
            why = f"{name} is not the size the manifest lists"
    if why is not None:
        _note(f"{path}: dataset-sync's manifest is stale ({why}); scanning {root}")
        return None
    return found, tree.stamps


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
    base = os.environ.get(XDG_CACHE_HOME) or os.path.expanduser("~/.cache")
    key = hashlib.sha256(os.path.realpath(root).encode()).hexdigest()[:32]
    return [root / CACHE_NAME, Path(base) / "elastic-horovod" / "training-scan" / f"{key}.json"]


def _rel(root: Path, path: str) -> str:
    if path == str(root):
        return ""
    prefix = "" if str(root) == "." else str(root).rstrip("/") + "/"
    if not path.startswith(prefix):
        raise ValueError(f"{path} is not under {root}")
    return path[len(prefix):]


def cache_text(root: Path, found: ImageSet, stamps: Stamps, root_dirs: list[str]) -> str:
    """The cache of ``found`` (paths relative to ``root``, so the tree may move): a header
    line ``{"format", "digest"}`` (the SHA-256 of the rest) and the JSON document."""
    body = json.dumps({
        "layout": found.layout, "classes": list(found.classes),
        "train": [[_rel(root, p), label] for p, label in found.train],
        "val": None if found.val is None else [[_rel(root, p), label] for p, label in found.val],
        "root_dirs": root_dirs,
        "stamps": {_rel(root, p): v for p, v in sorted(stamps.items())},
    }, separators=(",", ":"))
    header = json.dumps({"format": CACHE_FORMAT, "digest": hashlib.sha256(body.encode()).hexdigest()})
    return header + "\n" + body


def save_cache(root: Path, found: ImageSet, stamps: Stamps, root_dirs: list[str]) -> Path | None:
    """Write the scan cache atomically where it can be written (``cache_paths``); the path,
    or None when nowhere (the cache is an optimisation: no error)."""
    try:
        text = cache_text(root, found, stamps, root_dirs)
    except (OSError, ValueError):
        return None
    for path in cache_paths(root):
        try:
            write_atomic(path, text, parents=True)
            return path
        except OSError:
            continue
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


def _parse(text: str) -> dict:
    """The document of a cache file's text; ``ValueError`` unless its header and digest hold."""
    head, sep, body = text.partition("\n")
    header = json.loads(head)
    if not sep or not isinstance(header, dict) or header.get("format") != CACHE_FORMAT:
        raise ValueError(f"format is {header.get('format') if isinstance(header, dict) else None!r}")
    if header.get("digest") != hashlib.sha256(body.encode()).hexdigest():
        raise ValueError("its digest does not match its content")
    return json.loads(body)


def _from_document(root: Path, doc: dict) -> ImageSet:
    prefix = "" if str(root) == "." else str(root).rstrip("/") + "/"
    classes = tuple(str(c) for c in doc["classes"])
    train = tuple((prefix + p, int(label)) for p, label in doc["train"])
    val = None if doc["val"] is None else tuple((prefix + p, int(label)) for p, label in doc["val"])
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
            doc = _parse(text)
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
