"""The committed state as a checkpoint payload, pod-local snapshots, and the resume choice.

``Committed`` holds references to what a commit saved (``TrainingState.committed()``: the
deep copies Horovod's ``TorchState.save`` made of the model's and optimizer's state, the
sampler position and the other fields). Horovod replaces those copies at the next save and
never changes them in place, so a background thread can write them while the loop trains
on (``TrainingState.restore`` waits for such a write first: torch's
``Optimizer.load_state_dict`` keeps the saved tensors, which training then changes).
``payload(...)`` is the checkpoint dict; ``to_cpu`` moves its tensors to host memory (done
in the writing thread).

``LocalStore``: the newest committed state this host holds, on pod-local storage, as
``<dir>/snapshot-g<generation>-<token>-<epoch>-<processed>.pt`` (written like a checkpoint:
temporary file, fsync, rename; every other snapshot removed after). ``default_dir`` keys the
directory by the job (the checkpoint directory and the task); the token is the one the run's
generation marker holds in the checkpoint directory (``checkpoint.claim``), and rank 0 takes
a snapshot only when that marker still holds it, so a snapshot of a checkpoint directory that
was emptied and used again is never read.

``choose(offers)``: which rank's state a new world starts from (pure; see its docstring).
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from training.checkpoint import write_torch_atomic
from training.errors import CheckpointError

NAME = re.compile(r"^snapshot-g(\d{6,})-([0-9a-f]{8})-(\d{5,})-(\d{10,})\.pt$")
Key = tuple[int, int, int]  # (generation, epoch, processed)
NONE: Key = (-1, -1, -1)


@dataclass(frozen=True)
class Committed:
    """What one commit saved; never changed after (see the module docstring)."""

    generation: int
    epoch: int
    processed: int
    model: dict
    optimizer: dict
    fields: dict  # the state's other saved fields (batch, stats, clock, world, ...)

    @property
    def key(self) -> Key:
        return (self.generation, self.epoch, self.processed)


def payload(c: Committed, task: str, dataset_size: int, settings: dict) -> dict:
    """The checkpoint dict of the committed state ``c`` (tensors where the commit left them)."""
    f = c.fields
    ramp = f.get("lr_ramp")
    return {
        "task": task, "dataset_size": dataset_size,
        "generation": c.generation, "token": c.fields.get("token", ""),
        "epoch": c.epoch, "processed": c.processed,
        "model": c.model, "optimizer": c.optimizer,
        "batch": f["batch"], "resets": f["resets"], "stats": tuple(f["stats"]),
        "clock": tuple(f["clock"]), "world": f["world"],
        "decode_fallbacks": f["decode_fallbacks"],
        "lr_ramp": tuple(ramp) if ramp else None,
        "settings": settings, "scaler_state": f.get("scaler_state"),
    }


def to_cpu(obj: Any) -> Any:
    """``obj`` with every tensor in it on the CPU (dicts, lists and tuples rebuilt)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(v) for v in obj)
    return obj


def default_dir(base: str | None, checkpoint_dir: str, task: str) -> Path:
    """The job's snapshot directory under ``base`` (``$TMPDIR`` or /tmp when None), keyed by
    the checkpoint directory's real path and the task."""
    root = Path(base or os.environ.get("TMPDIR") or "/tmp") / "training-snapshots"
    key = hashlib.sha256(f"{os.path.realpath(checkpoint_dir)}\0{task}".encode()).hexdigest()
    return root / key[:16]


def name_for(k: Key, token: str) -> str:
    return f"snapshot-g{k[0]:06d}-{token}-{k[1]:05d}-{k[2]:010d}.pt"


class LocalStore:
    """This host's newest committed state in ``directory`` (see the module docstring)."""

    def __init__(self, directory: str | Path):
        self.dir = Path(directory)

    def listing(self) -> list[tuple[Key, Path]]:
        """The snapshots present, oldest first: ``(key, path)``; ``token(path)`` reads the token."""
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise CheckpointError(f"snapshot directory {self.dir}: {exc.strerror}") from exc
        found = []
        for n in names:
            m = NAME.match(n)
            if m:
                found.append(((int(m.group(1)), int(m.group(3)), int(m.group(4))), self.dir / n))
        return sorted(found)

    @staticmethod
    def token(path: Path) -> str:
        m = NAME.match(path.name)
        return m.group(2) if m else ""

    def best(self) -> tuple[Key, Path] | None:
        found = self.listing()
        return found[-1] if found else None

    def clean_temporary(self, older_than: float = 600.0) -> None:
        """Remove temporary files a process killed mid-write left (older than ``older_than``
        seconds: a live writer's is younger)."""
        now = time.time()
        try:
            entries = list(os.scandir(self.dir))
        except OSError:
            return
        for e in entries:
            if e.name.startswith(".snapshot-") and e.name.endswith(".tmp"):
                try:
                    if now - e.stat().st_mtime > older_than:
                        os.unlink(e.path)
                except OSError:
                    pass

    def write(self, data: dict, k: Key, token: str) -> Path:
        """Write ``data`` (tensors on the CPU) as the snapshot at ``k`` of the run whose
        generation marker holds ``token``, then remove every other; ``OSError`` when it
        cannot."""
        self.dir.mkdir(parents=True, exist_ok=True)
        final = self.dir / name_for(k, token)
        write_torch_atomic(final, data, ".snapshot-")
        for _, old in self.listing():
            if old != final:
                try:
                    old.unlink()
                except OSError:
                    pass
        return final


# what a rank offers when a world starts: (live, generation, epoch, processed, source, token)
# live = 1 when the process holds the world's committed state in memory (it trained in an
# earlier world of this run); source = "local" / "shared" / "" for what a fresh process can
# read; token: a local snapshot's (rank 0 checks it against the generation marker)
Offer = tuple[int, int, int, int, str, str]


def choose(offers: list[tuple]) -> tuple[int, str] | None:
    """Which rank a new world takes its state from, and from what: ``(rank, source)``, None
    for a fresh start. Any live rank holds the world's state (rank 0 preferred, else the
    lowest live rank; ``source`` "live"). Else the newest ``(generation, epoch, processed)``
    any rank can read, the lowest rank among equals (rank 0 first: no transfer)."""
    live = [r for r, o in enumerate(offers) if o[0]]
    if live:
        return (0 if 0 in live else live[0]), "live"
    best: tuple[Key, int] | None = None
    for r, o in enumerate(offers):
        k = (o[1], o[2], o[3])
        if k != NONE and o[4] and (best is None or k > best[0]):
            best = (k, r)
    if best is None:
        return None
    return best[1], offers[best[1]][4]
