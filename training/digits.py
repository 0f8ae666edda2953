"""Real handwritten digits in MNIST's format, from the copy scikit-learn ships (nothing downloaded).

    python -m training.digits OUT_DIR [--test-fraction 0.25] [--split-seed 0]

scikit-learn's wheel carries the UCI "Optical Recognition of Handwritten Digits" test set
(``sklearn.datasets.load_digits``: 1,797 digits written by 43 people, 8x8 pixels of 0..16).
``convert`` turns each into an MNIST-like 28x28 uint8 image (values scaled to 0..255, each
pixel repeated 3x3 to 24x24, centred with a 2-pixel border) and splits them once, by a
permutation of ``--split-seed``, into a training and a test split (``--test-fraction`` of
them, default a quarter: 1,348 + 449). The four IDX files ``training.mnist --data-dir``
reads are written into OUT_DIR, each through a temporary file and a rename; the result is
the same bytes for the same arguments. Needs scikit-learn (the
``bench`` extra, which scripts/setup installs); exit 1 with one line when it is missing or
OUT_DIR cannot be written, 2 on a bad flag.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from shared.argparser import OneLineParser
from shared.atomicfile import write_atomic
from shared.exitcodes import EXIT_OK
from shared.runner import run_main
from training.datagen import FILES, idx_bytes
from training.errors import DigitsError

SIDE, SCALE = 28, 3  # 8 px x 3 = 24, centred in 28


def to_mnist(images: np.ndarray) -> np.ndarray:
    """(N, 8, 8) values 0..16 -> (N, 28, 28) uint8 0..255, each pixel 3x3, centred."""
    if images.ndim != 3 or images.shape[1:] != (8, 8):
        raise DigitsError(f"digits images must be (N, 8, 8), got {images.shape}")
    scaled = np.clip(np.rint(images.astype(np.float64) * 255.0 / 16.0), 0, 255).astype(np.uint8)
    big = scaled.repeat(SCALE, axis=1).repeat(SCALE, axis=2)
    pad = (SIDE - 8 * SCALE) // 2
    return np.pad(big, ((0, 0), (pad, pad), (pad, pad)))


def split(count: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train indices, test indices) of ``count`` samples: a permutation of ``seed``, the
    first ``round(count * test_fraction)`` of it the test split; each part sorted."""
    if not 0 < test_fraction < 1:
        raise DigitsError(f"--test-fraction must be between 0 and 1, got {test_fraction:g}")
    order = np.random.default_rng(seed).permutation(count)
    n_test = int(round(count * test_fraction))
    if n_test < 10 or count - n_test < 10:
        raise DigitsError(f"--test-fraction {test_fraction:g} leaves fewer than 10 samples in a split")
    return np.sort(order[n_test:]), np.sort(order[:n_test])


def load() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled digits: (images (1797, 8, 8) float, labels (1797,) int)."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:
        raise DigitsError("scikit-learn is not installed (pip install -e '.[bench]'; "
                          "scripts/setup installs it)") from exc
    bunch = load_digits()
    return np.asarray(bunch.images), np.asarray(bunch.target)


def convert(out_dir: str | Path, test_fraction: float = 0.25, split_seed: int = 0) -> dict[str, int]:
    """Write the four IDX files into ``out_dir`` (made if missing); returns the split sizes."""
    if not 0 < test_fraction < 1:  # before the slow import of scikit-learn
        raise DigitsError(f"--test-fraction must be between 0 and 1, got {test_fraction:g}")
    images, labels = load()
    train, test = split(len(labels), test_fraction, split_seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pictures = to_mnist(images)
    for name, index in (("train", train), ("test", test)):
        images_name, labels_name = FILES[name]
        write_atomic(out / images_name, idx_bytes(pictures[index]))
        write_atomic(out / labels_name, idx_bytes(labels[index].astype(np.uint8)))
    return {"train": len(train), "test": len(test)}


def main(argv: list[str] | None = None) -> int:
    """Write the dataset; 0 when done, 1 with one ``error:`` line when it cannot be made
    (``shared.runner``), 2 on a bad flag."""
    prog = "python -m training.digits"
    p = OneLineParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--test-fraction", type=float, default=0.25, help="share of the test split (default 0.25)")
    p.add_argument("--split-seed", type=int, default=0, help="seed of the split's permutation (default 0)")
    args = p.parse_args(argv)

    def body() -> int:
        sizes = convert(args.out_dir, args.test_fraction, args.split_seed)
        print(f"wrote {sizes['train']}+{sizes['test']} real handwritten digits (scikit-learn's) "
              f"in MNIST format to {args.out_dir}", file=sys.stderr)
        return EXIT_OK
    return run_main(prog, body, usage=(), failure=(DigitsError, OSError))


if __name__ == "__main__":
    sys.exit(main())
