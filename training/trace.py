"""Debug trace of what each worker did, for tests and post-mortems (``--trace-dir``).

Each worker process writes four files named ``<host>-<pid>.*`` in the trace directory:

- ``.worker.json``  rewritten (atomically) each time the worker (re)enters training:
  ``{"host", "pid", "time", "rank", "size", "epoch", "resets"}``;
- ``.samples``      two JSON lines per commit, ``{"phase": "trained", "epoch", "time", "size",
  "rank", "resets", "processed", "indices"}`` before the commit's collective (the sample
  indices this worker trained on since its previous commit; ``processed``: the epoch's samples
  done, over all ranks, after this commit) and ``{"phase": "committed", ...}`` without the
  indices once the state holding those steps is saved. ``training.commits.committed`` reads
  them back: the union over all workers of one epoch's committed lines is what the model
  learned from, a rank killed between its two lines included;
- ``.inputs``       one JSON line per epoch (re)entered: ``{"epoch", "rank", "indices",
  "sha256"}``, the first training batch's sample indices and a digest of its input tensor
  as the model saw it (after augmentation);
- ``.events``       one JSON line per start-up milestone, in the order they happened:
  ``{"event", "time", ...}`` with ``event`` one of ``start`` (``process_start``: when the
  process was created, unix time), ``prepared`` (the set-up that needs no rank is done),
  ``loaders-ready`` (the warm-up before ``hvd.init()``, ``training.warmup``: each loading
  process delivered a batch; ``workers``, ``batches``), ``first-batch`` (the first of them on
  the device; ``shape``), ``autotuned`` (GPU path: one forward and backward pass done;
  ``cudnn``), ``init`` (right before ``hvd.init()``; ``dynamo``: whether ``torch._dynamo`` was already
  imported), ``initialized`` (``hvd.init()`` returned; ``rank``, ``size``),
  ``checkpoint-read`` (``rank``, ``path``: this process opened a checkpoint) and
  ``first-step`` (this process's first optimizer step is done; ``rank``, ``size``);
- ``.final.json``   at a normal end: ``{"host", "pid", "rank", "size", "epochs",
  "params_sha256", "resets"}``.

``params_checksum(model)`` is the SHA-256 of the parameters in name order.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import time
from pathlib import Path

import torch

from shared.atomicfile import write_atomic
from shared.environment import HOROVOD_HOSTNAME
from training import commits


def params_checksum(model: torch.nn.Module) -> str:
    """SHA-256 over every parameter's name and bytes, in ``named_parameters`` order."""
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def process_start() -> float | None:
    """When this process was created (unix time, to the clock tick), from ``/proc``; None
    where there is no ``/proc``."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def dynamo_imported() -> bool:
    """Whether ``torch._dynamo`` (imported lazily by torch.optim, seconds of start-up) is loaded."""
    return "torch._dynamo" in sys.modules


def host_name() -> str:
    """The name Horovod gave this worker's host, else the system host name."""
    return os.environ.get(HOROVOD_HOSTNAME) or socket.gethostname()


def write_json_atomic(path: Path, payload: dict) -> None:
    """Write ``payload`` as JSON to ``path`` through a temporary file and a rename."""
    write_atomic(path, json.dumps(payload))


class Tracer:
    """Writes this process's trace files; every method is a no-op without a directory."""

    def __init__(self, directory: str | None):
        self.dir = Path(directory) if directory else None
        self.stem = f"{host_name()}-{os.getpid()}"
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)

    def worker(self, **fields) -> None:
        if self.dir is not None:
            write_json_atomic(self.dir / f"{self.stem}.worker.json",
                              {"host": host_name(), "pid": os.getpid(), "time": time.time(),
                               **fields})

    def trained(self, epoch: int, indices: list[int], **fields) -> None:
        """Before a commit's collective: the samples this rank trained on since its last commit
        (``training.commits``: written only when there are any)."""
        if self.dir is not None and indices:
            self._append("samples", {"phase": commits.TRAINED, "epoch": epoch, "time": time.time(),
                                     **fields, "indices": indices})

    def committed(self, epoch: int, **fields) -> None:
        """After the commit's state is saved: its mark (``training.commits``)."""
        if self.dir is not None:
            self._append("samples", {"phase": commits.COMMITTED, "epoch": epoch, "time": time.time(), **fields})

    def inputs(self, epoch: int, rank: int, indices, batch: torch.Tensor) -> None:
        if self.dir is not None:
            # the raw bytes: numpy has no bfloat16 (the GPU path's inputs may be in it)
            raw = batch.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
            digest = hashlib.sha256(raw.numpy().tobytes()).hexdigest()
            self._append("inputs", {"epoch": epoch, "rank": rank, "indices": list(indices),
                                    "sha256": digest})

    def event(self, name: str, **fields) -> None:
        """Append the start-up milestone ``name`` (see the module docstring) with the time."""
        if self.dir is not None:
            self._append("events", {"event": name, "time": time.time(), **fields})

    def _append(self, kind: str, rec: dict) -> None:
        """Append ``rec`` as one JSON line to this process's ``kind`` file (if tracing)."""
        if self.dir is None:
            return
        fd = os.open(self.dir / f"{self.stem}.{kind}", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, (json.dumps(rec) + "\n").encode())
        finally:
            os.close(fd)

    def final(self, **fields) -> None:
        if self.dir is not None:
            write_json_atomic(self.dir / f"{self.stem}.final.json",
                              {"host": host_name(), "pid": os.getpid(), **fields})
