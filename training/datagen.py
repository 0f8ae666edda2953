"""Generate a small MNIST-format dataset (the four raw IDX files), nothing downloaded.

    python -m training.datagen OUT_DIR [--train N] [--test M] [--seed S]

Digits are drawn as seven-segment glyphs with random stroke width, position, intensity
and noise on a 28x28 canvas, so a small network learns them to high accuracy in an epoch or
two: enough to see an elastic job train for real. Writes ``train-images-idx3-ubyte``,
``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte`` into
OUT_DIR, each through a temporary file and a rename. Deterministic for a given seed.
"""
from __future__ import annotations

import struct
import sys
from pathlib import Path

import numpy as np

from shared.argparser import OneLineParser
from shared.atomicfile import write_atomic
from shared.exitcodes import EXIT_OK
from shared.runner import run_main

# segments: a top, b top-right, c bottom-right, d bottom, e bottom-left, f top-left, g middle
DIGIT_SEGMENTS = {
    0: "abcdef", 1: "bc", 2: "abged", 3: "abgcd", 4: "fgbc",
    5: "afgcd", 6: "afgedc", 7: "abc", 8: "abcdefg", 9: "abcdfg",
}
FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def _segment_boxes(top: int, left: int, h: int, w: int, t: int) -> dict:
    mid = top + h // 2
    return {
        "a": (top, top + t, left, left + w),
        "d": (top + h - t, top + h, left, left + w),
        "g": (mid - t // 2, mid - t // 2 + t, left, left + w),
        "f": (top, mid, left, left + t),
        "e": (mid, top + h, left, left + t),
        "b": (top, mid, left + w - t, left + w),
        "c": (mid, top + h, left + w - t, left + w),
    }


def draw(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Images (N, 28, 28) uint8 for ``labels``."""
    n = len(labels)
    images = np.zeros((n, 28, 28), dtype=np.float32)
    for i, label in enumerate(labels):
        h, w = int(rng.integers(16, 21)), int(rng.integers(9, 14))
        t = int(rng.integers(2, 4))
        top, left = int(rng.integers(2, 28 - h - 1)), int(rng.integers(3, 28 - w - 2))
        boxes = _segment_boxes(top, left, h, w, t)
        level = rng.uniform(0.6, 1.0)
        for seg in DIGIT_SEGMENTS[int(label)]:
            r0, r1, c0, c1 = boxes[seg]
            images[i, r0:r1, c0:c1] = level
    images += rng.normal(0.0, 0.08, images.shape).astype(np.float32)
    return (np.clip(images, 0.0, 1.0) * 255).astype(np.uint8)


def idx_bytes(array: np.ndarray) -> bytes:
    """An unsigned-byte IDX file of ``array``."""
    return struct.pack(f">HBB{array.ndim}I", 0, 0x08, array.ndim, *array.shape) + array.tobytes()


def generate(out_dir: str | Path, train: int = 6000, test: int = 1000, seed: int = 0) -> Path:
    """Write the four IDX files into ``out_dir`` (made if missing); returns it."""
    if train < 10 or test < 10:
        raise ValueError(f"need at least 10 train and 10 test images, got {train} and {test}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for split, count in (("train", train), ("test", test)):
        labels = np.arange(count, dtype=np.uint8) % 10
        rng.shuffle(labels)
        images_name, labels_name = FILES[split]
        write_atomic(out / images_name, idx_bytes(draw(labels, rng)))
        write_atomic(out / labels_name, idx_bytes(labels))
    return out


def main(argv: list[str] | None = None) -> int:
    """Write the dataset; 0 when done, 1 with one ``error:`` line when it cannot be written
    (``shared.runner``), 2 on a bad flag."""
    prog = "python -m training.datagen"
    p = OneLineParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--train", type=int, default=6000, help="training images (default 6000)")
    p.add_argument("--test", type=int, default=1000, help="test images (default 1000)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    def body() -> int:
        out = generate(args.out_dir, args.train, args.test, args.seed)
        print(f"wrote {args.train}+{args.test} MNIST-format images to {out}", file=sys.stderr)
        return EXIT_OK
    return run_main(prog, body, usage=(), failure=(ValueError, OSError))


if __name__ == "__main__":
    sys.exit(main())
