"""Checkpoint files: atomic writes, finding the newest, loading.

A checkpoint is a dict saved with ``torch.save`` as
``<dir>/ckpt-g<generation:06d>-<epoch:05d>-<processed:010d>.pt``, where ``epoch`` is the
0-based epoch the state is in and ``processed`` the samples of that epoch already trained (an
end-of-epoch checkpoint is ``(epoch + 1, 0)``). Writing goes to a temporary file in the same
directory, is flushed to disk and renamed over the final name, so a reader never sees half a
file; older checkpoints beyond ``keep`` are removed after the rename. ``latest`` orders names
by ``(generation, epoch, processed)``; files of any other name are ignored (the names of
earlier versions, ``ckpt-<epoch>-<processed>.pt``, are generation 0).

Fencing: every run (one start of the launcher's world) takes a generation at start,
``claim_generation``: one more than any generation present (checkpoint names and the
``generation-<g>`` markers), claimed by creating its marker exclusively, so two runs never
share one. A run writes only under its own generation, and ``save`` refuses
(``StaleWriter``) when a newer generation is present, before the write and again after the
rename (then the file is removed): a run that lost its launcher but still trains can never
put a checkpoint in front of the run that replaced it, whose checkpoints sort first anyway.

Every checkpoint also records the run's settings (``settings``: seed, batch size, learning
rate, world size and a hash of the sample list, ``training.fingerprint``);
``resume_action`` compares them with the new run's before it resumes:

- another ``--seed``: refused (``ConfigError``, exit 2). The seed fixes every epoch's
  shuffle, so mid-epoch the rest of the new order would skip samples of the old one and
  repeat others, and later epochs would not be the ones the run started;
- another sample list (same size, other files or order): the epoch in progress restarts
  from its first sample (its partial position means nothing in the new list); at an epoch
  boundary nothing is lost, so it resumes;
- another batch size or learning rate: resumed, with a note (the plan of the rest of the
  epoch counts samples, not steps, so no sample is skipped or repeated; the rate is what the
  new flags ask for);
- another world size: the elastic case, resumed (the rate ramps up to a larger world's,
  ``training.schedule``);
- a checkpoint written before settings were recorded: resumed, with a note.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path
from typing import Any

import torch

from shared.atomicfile import replacing
from training.errors import CheckpointError, ConfigError, StaleWriter

NAME = re.compile(r"^ckpt-(?:g(\d{6,})-)?(\d{5,})-(\d{10,})\.pt$")
MARKER = re.compile(r"^generation-(\d{6,})$")


def name_for(epoch: int, processed: int, generation: int = 0) -> str:
    """The file name of the checkpoint of ``generation`` at (0-based ``epoch``, ``processed``)."""
    return f"ckpt-g{generation:06d}-{epoch:05d}-{processed:010d}.pt"


def key(name: str) -> tuple[int, int, int] | None:
    """``(generation, epoch, processed)`` of a checkpoint file name, None for any other name."""
    m = NAME.match(name)
    return (int(m.group(1) or 0), int(m.group(2)), int(m.group(3))) if m else None


def position(name: str) -> tuple[int, int] | None:
    """``(epoch, processed)`` of a checkpoint file name, None for any other name."""
    k = key(name)
    return (k[1], k[2]) if k else None


def _names(directory: Path) -> list[str]:
    try:
        return os.listdir(directory)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise CheckpointError(f"checkpoint directory {directory}: {exc.strerror}") from exc


def listing(directory: str | Path) -> list[tuple[tuple[int, int], Path]]:
    """The checkpoints in ``directory`` as ``((epoch, processed), path)``, oldest first by
    ``(generation, epoch, processed)``; empty if it does not exist."""
    directory = Path(directory)
    found = sorted((k, n) for n in _names(directory) if (k := key(n)) is not None)
    return [((k[1], k[2]), directory / n) for k, n in found]


def newest_generation(directory: str | Path) -> int:
    """The newest generation present in ``directory`` (names and markers), 0 if none."""
    gens = [0]
    for n in _names(Path(directory)):
        k = key(n)
        if k is not None:
            gens.append(k[0])
        elif (m := MARKER.match(n)) is not None:
            gens.append(int(m.group(1)))
    return max(gens)


def claim_generation(directory: str | Path, keep_markers: int = 50) -> int:
    """``claim``'s generation."""
    return claim(directory, keep_markers)[0]


def generation_token(directory: str | Path, generation: int) -> str | None:
    """The token the run of ``generation`` wrote into its marker, None without the marker."""
    try:
        return (Path(directory) / f"generation-{generation:06d}").read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def claim(directory: str | Path, keep_markers: int = 50) -> tuple[int, str]:
    """Take this run's generation: one more than any present, claimed by creating its
    ``generation-<g>`` marker exclusively (a run that loses the race takes the next one),
    which holds a random token: ``(generation, token)``. The token ties a host's local
    snapshots to this directory (a directory emptied and used again has other tokens).
    Markers beyond the newest ``keep_markers`` are removed. ``CheckpointError`` when the
    directory cannot be written."""
    directory = Path(directory)
    token = os.urandom(4).hex()
    _names(directory)  # "checkpoint directory X: Not a directory" for a file
    try:
        directory.mkdir(parents=True, exist_ok=True)
        generation = newest_generation(directory) + 1
        while True:
            try:
                fd = os.open(directory / f"generation-{generation:06d}",
                             os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                generation += 1
                continue
            try:
                os.write(fd, token.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            break
        _fsync_dir(directory)
    except OSError as exc:
        raise CheckpointError(f"cannot claim a generation in {directory}: "
                              f"{exc.strerror or exc}") from exc
    markers = sorted(int(m.group(1)) for n in _names(directory) if (m := MARKER.match(n)))
    for old in markers[:-keep_markers]:
        try:
            (directory / f"generation-{old:06d}").unlink()
        except OSError:
            pass
    return generation, token


def _fsync_dir(directory: Path) -> None:
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _fence(directory: Path, generation: int, final: Path) -> None:
    newer = newest_generation(directory)
    if newer > generation:
        raise StaleWriter(f"not writing {final.name}: generation {newer} in {directory} is newer "
                          f"than this run's ({generation}); this run is stale")


def latest(directory: str | Path) -> tuple[tuple[int, int], Path] | None:
    """The newest checkpoint as ``((epoch, processed), path)``, or None."""
    found = listing(directory)
    return found[-1] if found else None


def latest_key(directory: str | Path) -> tuple[tuple[int, int, int], Path] | None:
    """The newest checkpoint as ``((generation, epoch, processed), path)``, or None."""
    found = latest(directory)
    if found is None:
        return None
    k = key(found[1].name)
    assert k is not None
    return k, found[1]


def write_torch_atomic(final: Path, payload: Any, prefix: str) -> None:
    """``torch.save(payload)`` into ``final``, atomically (``shared.atomicfile.replacing``: a
    reader sees the old file or the new one); the temporary file beside it starts with
    ``prefix`` (so a cleaner can find one a killed writer left) and is removed on any failure,
    which is raised as it is."""
    with replacing(final, prefix=prefix) as f:
        torch.save(payload, f)


def save(directory: str | Path, payload: dict, epoch: int, processed: int, keep: int = 3,
         generation: int = 0) -> Path:
    """Write ``payload`` atomically as the checkpoint of ``generation`` at (epoch, processed);
    prune to ``keep``. ``StaleWriter`` (nothing left behind) when a newer generation is
    present before the write or after the rename; ``CheckpointError`` when it cannot write."""
    directory = Path(directory)
    final = directory / name_for(epoch, processed, generation)
    _fence(directory, generation, final)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        write_torch_atomic(final, payload, ".ckpt-")
        try:
            _fence(directory, generation, final)
        except StaleWriter:
            final.unlink()
            raise
        _fsync_dir(directory)
    except OSError as exc:
        raise CheckpointError(f"cannot write checkpoint {final}: {exc.strerror or exc}") from exc
    if keep > 0:
        for _, old in listing(directory)[:-keep]:
            try:
                old.unlink()
            except OSError:
                pass
    return final


def load(path: str | Path) -> dict:
    """Load a checkpoint written by ``save``; ``CheckpointError`` naming the file otherwise."""
    return _load(path, path)


def load_bytes(data: bytes, where: str) -> dict:
    """``load`` of a checkpoint's bytes (read by another rank) that came from ``where``."""
    return _load(io.BytesIO(data), where)


def _load(source, where) -> dict:
    try:
        payload = torch.load(source, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for a corrupt file
        raise CheckpointError(f"cannot read checkpoint {where}: {exc}".splitlines()[0]) from exc
    if not isinstance(payload, dict) or "model" not in payload:
        raise CheckpointError(f"{where} is not a training checkpoint")
    return payload


RESUME = "resume"
RESTART_EPOCH = "restart-epoch"


def settings(seed: int, batch_size: int, lr: float, world_size: int,
             samples_sha256: str | None) -> dict:
    """The run's settings as a checkpoint records them."""
    return {"seed": int(seed), "batch_size": int(batch_size), "lr": float(lr),
            "world_size": int(world_size), "samples_sha256": samples_sha256}


def resume_action(saved: dict | None, current: dict, path: str | Path, processed: int
                  ) -> tuple[str, list[str]]:
    """What to do with the checkpoint at ``path`` (``processed`` samples into its epoch) whose
    recorded ``settings`` are ``saved`` (None: not recorded), for a run with ``current``
    settings: ``(RESUME or RESTART_EPOCH, notes to log)``. Pure.

    Raises ``ConfigError`` (one line naming both seeds and the way out) for another seed.
    """
    if not saved:
        return RESUME, [f"{path} records no run settings: seed and sample list not checked"]
    if saved.get("seed") != current["seed"]:
        raise ConfigError(
            f"{path} was trained with --seed {saved.get('seed')}, this run has --seed "
            f"{current['seed']}: the epochs' sample order would differ; resume with --seed "
            f"{saved.get('seed')} or start in another --checkpoint-dir")
    notes = []
    action = RESUME
    old_hash, new_hash = saved.get("samples_sha256"), current["samples_sha256"]
    if old_hash and new_hash and old_hash != new_hash:
        if processed:
            action = RESTART_EPOCH
            notes.append(f"the sample list differs from the one {path} was trained on: "
                         f"the epoch restarts from its first sample ({processed} were done)")
        else:
            notes.append(f"the sample list differs from the one {path} was trained on")
    for key, flag in (("batch_size", "--batch-size"), ("lr", "--lr")):
        if saved.get(key) is not None and saved.get(key) != current[key]:
            notes.append(f"{flag} {current[key]} (the checkpoint was trained with {saved[key]})")
    return action, notes
