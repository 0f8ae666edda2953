"""A hash of a training set's sample list, recorded in checkpoints (``training.checkpoint``).

Resuming mid-epoch continues the epoch's fixed shuffle from the number of samples already
trained; that is right only for the same list of samples in the same order. A different
file list of the same size (files added and removed, a re-scan of another copy with other
names) would skip some samples and repeat others, silently. ``samples_sha256(dataset)`` is
the SHA-256 of what identifies each sample, in index order:

- a dataset with ``samples`` (``(path, label)`` pairs: ``ImageListDataset``,
  ``JpegBytesDataset``): each path relative to the samples' common directory, and its label
  (so the same tree mounted elsewhere hashes the same; file contents are not read);
- ``MnistDataset``: its image and label bytes;
- ``SyntheticDataset``: its size, shape, classes, seed and pool size;
- any other dataset: None (not checked).
"""

from __future__ import annotations

import hashlib
import os


def samples_sha256(dataset) -> str | None:
    """The hex SHA-256 of ``dataset``'s sample list (see the module), or None."""
    h = hashlib.sha256()
    samples = getattr(dataset, "samples", None)
    if samples is not None:
        paths = [str(p) for p, _ in samples]
        root = os.path.commonpath(paths) if paths else ""
        if len(paths) == 1:
            root = os.path.dirname(root)
        h.update(b"samples\0")
        for path, label in samples:
            h.update(f"{os.path.relpath(str(path), root) if root else path}\0{int(label)}\n".encode())
        return h.hexdigest()
    images, labels = getattr(dataset, "images", None), getattr(dataset, "labels", None)
    if images is not None and labels is not None:
        h.update(b"tensors\0")
        h.update(str(tuple(images.shape)).encode())
        h.update(images.contiguous().numpy().tobytes())
        h.update(labels.contiguous().numpy().tobytes())
        return h.hexdigest()
    if all(hasattr(dataset, k) for k in ("size", "shape", "classes", "seed", "pool_size")):
        h.update(f"synthetic\0{dataset.size}\0{tuple(dataset.shape)}\0{dataset.classes}\0"
                 f"{dataset.seed}\0{dataset.pool_size}".encode())
        return h.hexdigest()
    return None
