"""Test helpers: small generated datasets on disk and reading what the workers traced."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

from training.idx import make_idx


def write_mnist(directory: Path, train: int = 120, test: int = 40, gz: bool = False,
                seed: int = 0) -> Path:
    """Write the four MNIST IDX files with ``train``/``test`` random 28x28 digits."""
    directory.mkdir(parents=True, exist_ok=True)
    rnd = random.Random(seed)
    for prefix, n in (("train", train), ("t10k", test)):
        labels = bytes(i % 10 for i in range(n))
        # each digit class gets a bright column at its own position, plus noise: learnable
        pixels = bytearray()
        for i in range(n):
            img = bytearray(rnd.randrange(0, 60) for _ in range(28 * 28))
            col = 2 + 2 * labels[i]
            for r in range(28):
                img[r * 28 + col] = 255
            pixels += img
        files = {f"{prefix}-images-idx3-ubyte": make_idx(bytes(pixels), (n, 28, 28)),
                 f"{prefix}-labels-idx1-ubyte": make_idx(labels, (n,))}
        for name, data in files.items():
            if gz:
                (directory / f"{name}.gz").write_bytes(gzip.compress(data))
            else:
                (directory / name).write_bytes(data)
    return directory


def write_tiny_imagenet(root: Path, classes: int = 3, per_class: int = 4, val_per_class: int = 2,
                        size: int = 64) -> Path:
    """Write a tiny-imagenet-shaped tree (as downloaded) of small JPEGs."""
    from PIL import Image

    wnids = [f"n{1000000 + i:08d}" for i in range(classes)]
    (root / "train").mkdir(parents=True, exist_ok=True)
    (root / "wnids.txt").write_text("".join(w + "\n" for w in wnids))
    (root / "words.txt").write_text("".join(f"{w}\tthing {i}\n" for i, w in enumerate(wnids)))
    for i, w in enumerate(wnids):
        images = root / "train" / w / "images"
        images.mkdir(parents=True)
        boxes = []
        for k in range(per_class):
            name = f"{w}_{k}.JPEG"
            Image.new("RGB", (size, size), (40 * i % 256, 90, 200 - 10 * k)).save(images / name, "JPEG")
            boxes.append(f"{name}\t0\t0\t{size - 1}\t{size - 1}\n")
        (root / "train" / w / f"{w}_boxes.txt").write_text("".join(boxes))
    (root / "val" / "images").mkdir(parents=True)
    lines, n = [], 0
    for i, w in enumerate(wnids):
        for _ in range(val_per_class):
            name = f"val_{n}.JPEG"
            Image.new("RGB", (size, size), (40 * i % 256, 90, 150)).save(root / "val" / "images" / name, "JPEG")
            lines.append(f"{name}\t{w}\t0\t0\t{size - 1}\t{size - 1}\n")
            n += 1
    (root / "val" / "val_annotations.txt").write_text("".join(lines))
    return root


def committed_samples(trace_dir: Path) -> dict[int, list[int]]:
    """Every committed sample index per epoch, over all workers' ``.samples`` files."""
    per_epoch: dict[int, list[int]] = {}
    for path in sorted(trace_dir.glob("*.samples")):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            per_epoch.setdefault(rec["epoch"], []).extend(rec["indices"])
    return per_epoch


def finals(trace_dir: Path) -> list[dict]:
    """The ``.final.json`` records of the workers that finished normally."""
    return [json.loads(p.read_text()) for p in sorted(trace_dir.glob("*.final.json"))]


def workers(trace_dir: Path) -> list[dict]:
    """The latest ``.worker.json`` record of every worker process."""
    out = []
    for p in sorted(trace_dir.glob("*.worker.json")):
        try:
            out.append(json.loads(p.read_text()))
        except (OSError, ValueError):
            pass
    return out


def metrics_lines(path: Path) -> list[dict]:
    """The JSON-lines metrics file as dicts (every line must parse)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]
