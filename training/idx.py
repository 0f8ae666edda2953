"""MNIST's raw IDX files: parsing (pure) and finding them in a directory.

The IDX format: two zero bytes, a type byte (0x08 = unsigned byte), the number of
dimensions, then each dimension as a big-endian uint32, then the data in C order.
``parse_idx`` checks every part of that and raises ``DatasetError`` naming the file.
``load_mnist(directory)`` finds the four files (each optionally ``.gz``) directly in the
directory or in ``MNIST/raw/`` below it, as torchvision leaves them, and returns the
train and test splits as uint8 image tensors (N, 28, 28) and int64 label tensors.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.errors import DatasetError

UBYTE = 0x08

FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


@dataclass(frozen=True)
class Split:
    """One MNIST split: ``images`` uint8 (N, H, W), ``labels`` int64 (N,)."""

    images: Any  # torch.Tensor (torch is imported only once the files have been checked)
    labels: Any

    def __len__(self) -> int:
        return int(self.labels.shape[0])


def parse_idx(data: bytes, name: str) -> tuple[tuple[int, ...], bytes]:
    """Return ``(dims, payload)`` of an unsigned-byte IDX file; ``DatasetError`` if malformed.

    ``name`` only labels the error message.
    """
    if len(data) < 4:
        raise DatasetError(f"{name}: not an IDX file (only {len(data)} bytes)")
    zero, kind, ndims = struct.unpack(">HBB", data[:4])
    if zero != 0:
        raise DatasetError(f"{name}: not an IDX file (bad magic {data[:4].hex()})")
    if kind != UBYTE:
        raise DatasetError(f"{name}: IDX data type 0x{kind:02x} is not unsigned byte (0x08)")
    if ndims == 0:
        raise DatasetError(f"{name}: IDX file has no dimensions")
    header = 4 + 4 * ndims
    if len(data) < header:
        raise DatasetError(f"{name}: truncated IDX header")
    dims = struct.unpack(f">{ndims}I", data[4:header])
    expected = 1
    for d in dims:
        expected *= d
    payload = data[header:]
    if len(payload) != expected:
        raise DatasetError(
            f"{name}: IDX dimensions {'x'.join(map(str, dims))} need {expected} bytes of data, "
            f"file has {len(payload)}")
    return dims, payload


def split_from_idx(images_idx: bytes, labels_idx: bytes, images_name: str,
                   labels_name: str) -> Split:
    """Build a ``Split`` from the bytes of an images file (N,H,W) and a labels file (N)."""
    idims, ipayload = parse_idx(images_idx, images_name)
    ldims, lpayload = parse_idx(labels_idx, labels_name)
    if len(idims) != 3:
        raise DatasetError(f"{images_name}: expected 3 dimensions (N, rows, cols), got {len(idims)}")
    if len(ldims) != 1:
        raise DatasetError(f"{labels_name}: expected 1 dimension (N), got {len(ldims)}")
    if idims[0] != ldims[0]:
        raise DatasetError(
            f"{images_name} has {idims[0]} images but {labels_name} has {ldims[0]} labels")
    if idims[0] == 0:
        raise DatasetError(f"{images_name}: no images")
    if max(lpayload) > 9:
        raise DatasetError(f"{labels_name}: label {max(lpayload)} is not a digit 0-9")
    import torch

    images = torch.frombuffer(bytearray(ipayload), dtype=torch.uint8).reshape(idims)
    labels = torch.frombuffer(bytearray(lpayload), dtype=torch.uint8).to(torch.int64)
    return Split(images=images, labels=labels)


def find_file(directory: Path, stem: str) -> Path:
    """The path of IDX file ``stem`` (or ``stem.gz``) in ``directory`` or ``directory/MNIST/raw``."""
    for base in (directory, directory / "MNIST" / "raw"):
        for candidate in (base / stem, base / f"{stem}.gz"):
            if candidate.is_file():
                return candidate
    raise DatasetError(f"MNIST file {stem}[.gz] not found in {directory}")


def read_file(path: Path) -> bytes:
    """The bytes of ``path``, gunzipped when it ends in ``.gz``."""
    try:
        raw = path.read_bytes()
        return gzip.decompress(raw) if path.suffix == ".gz" else raw
    except (OSError, EOFError, zlib.error) as exc:
        raise DatasetError(f"{path}: cannot read: {exc}") from exc


def load_mnist(directory: str | Path) -> dict[str, Split]:
    """Load ``{"train": Split, "test": Split}`` from the raw IDX files under ``directory``."""
    directory = Path(directory)
    if not directory.is_dir():
        raise DatasetError(f"MNIST data directory {directory} does not exist")
    paths = {split: tuple(find_file(directory, stem) for stem in stems)
             for split, stems in FILES.items()}
    return {split: split_from_idx(read_file(ip), read_file(lp), ip.name, lp.name)
            for split, (ip, lp) in paths.items()}
