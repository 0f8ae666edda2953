"""The training's metrics record: the one definition its writer (``training.metrics``) and
every reader (``elastic.launch.timeline``, ``elastic.launch.plot``, ``elastic.launch.console``,
``localcluster.chaos``, the benchmarks and the tests) share.

Rank 0 writes one record per JSON line, to ``--metrics-file`` and to stdout (which
``elastic-run`` relays). Fields, in the order a line carries them:

    event                       "progress" (every N batches) or "epoch" (an epoch's end)
    time                        Unix seconds
    epoch                       1-based
    batch                       steps done in the epoch
    world_size                  Horovod's size
    samples                     samples trained in the epoch so far
    samples_per_sec             since the previous record of the epoch (training steps only)
    samples_per_sec_per_worker  the same per worker (per GPU)
    loss, accuracy              training, over the epoch so far; null before any sample
    lr                          the learning rate
    resets                      elastic resets since the job started
    val_accuracy                "epoch" lines only (always there); null without a validation split
    decode_fallbacks            only with ``--augment-on-device``: images the CPU decoded

- ``MetricsRecord(...)`` checks its fields (``MetricsRecordError`` names the bad one);
  ``to_json()`` is the line without its newline; ``MetricsRecord.from_json(line)`` parses
  and checks one line, raising ``MetricsRecordError`` for anything else (keys a newer writer
  adds are ignored). ``from_dict`` does the same for a decoded object.
- ``parse_line(line)`` and ``read_records(path)`` are the tolerant readers for a file another
  process appends to: a line that is not a record (a half-written last line, noise) is
  skipped, a missing file is no records.

Standard library only (``shared``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.jsonlines import parse_json_object, read_json_lines

EVENTS = ("progress", "epoch")
_INTS = ("epoch", "batch", "world_size", "samples", "resets")
_FLOATS = ("time", "samples_per_sec", "samples_per_sec_per_worker", "lr")
_OPTIONAL_FLOATS = ("loss", "accuracy", "val_accuracy")


class MetricsRecordError(ValueError):
    """A line or value that is not a metrics record; the message names the field and value."""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class MetricsRecord:
    """One metrics record (module docstring); checked when built."""

    event: str
    time: float
    epoch: int
    batch: int
    world_size: int
    samples: int
    samples_per_sec: float
    samples_per_sec_per_worker: float
    loss: float | None
    accuracy: float | None
    lr: float
    resets: int
    val_accuracy: float | None = None
    decode_fallbacks: int | None = None

    def __post_init__(self) -> None:
        if self.event not in EVENTS:
            raise MetricsRecordError(f"metrics record: event {self.event!r} is not one of {', '.join(EVENTS)}")
        for name in _INTS:
            value = getattr(self, name)
            if not _is_int(value) or value < 0:
                raise MetricsRecordError(f"metrics record: {name} {value!r} is not a whole number >= 0")
        for name in _FLOATS:
            if not _is_number(getattr(self, name)):
                raise MetricsRecordError(f"metrics record: {name} {getattr(self, name)!r} is not a number")
        for name in _OPTIONAL_FLOATS:
            value = getattr(self, name)
            if value is not None and not _is_number(value):
                raise MetricsRecordError(f"metrics record: {name} {value!r} is not a number or null")
        if self.event != "epoch" and self.val_accuracy is not None:
            raise MetricsRecordError(f"metrics record: val_accuracy {self.val_accuracy!r} on a {self.event} record")
        if self.decode_fallbacks is not None and (not _is_int(self.decode_fallbacks) or self.decode_fallbacks < 0):
            raise MetricsRecordError(f"metrics record: decode_fallbacks {self.decode_fallbacks!r} "
                                     "is not a whole number >= 0")

    def to_dict(self) -> dict[str, Any]:
        """The JSON object, its keys in the line's order (``val_accuracy`` on epoch records,
        ``decode_fallbacks`` when set)."""
        out: dict[str, Any] = {
            "event": self.event, "time": self.time, "epoch": self.epoch, "batch": self.batch,
            "world_size": self.world_size, "samples": self.samples, "samples_per_sec": self.samples_per_sec,
            "samples_per_sec_per_worker": self.samples_per_sec_per_worker, "loss": self.loss,
            "accuracy": self.accuracy, "lr": self.lr, "resets": self.resets,
        }
        if self.event == "epoch":
            out["val_accuracy"] = self.val_accuracy
        if self.decode_fallbacks is not None:
            out["decode_fallbacks"] = self.decode_fallbacks
        return out

    def to_json(self) -> str:
        """The record as one JSON line, without the newline."""
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, doc: object) -> MetricsRecord:
        """The record a decoded JSON object holds; ``MetricsRecordError`` when it is none."""
        if not isinstance(doc, dict):
            raise MetricsRecordError(f"metrics record: not a JSON object: {type(doc).__name__}")
        required = ("event", *_INTS, *_FLOATS, "loss", "accuracy")
        missing = [name for name in required if name not in doc]
        if missing:
            raise MetricsRecordError(f"metrics record: missing {', '.join(missing)}")
        if doc["event"] == "epoch" and "val_accuracy" not in doc:
            raise MetricsRecordError("metrics record: missing val_accuracy on an epoch record")
        return cls(event=doc["event"], time=doc["time"], epoch=doc["epoch"], batch=doc["batch"],
                   world_size=doc["world_size"], samples=doc["samples"], samples_per_sec=doc["samples_per_sec"],
                   samples_per_sec_per_worker=doc["samples_per_sec_per_worker"], loss=doc["loss"],
                   accuracy=doc["accuracy"], lr=doc["lr"], resets=doc["resets"],
                   val_accuracy=doc.get("val_accuracy"), decode_fallbacks=doc.get("decode_fallbacks"))

    @classmethod
    def from_json(cls, line: str) -> MetricsRecord:
        """The record on one JSON line; ``MetricsRecordError`` when the line is not one."""
        try:
            doc = json.loads(line)
        except ValueError as exc:
            raise MetricsRecordError(f"metrics record: not JSON: {line[:80]!r}") from exc
        return cls.from_dict(doc)


def _record(doc: dict | None) -> MetricsRecord | None:
    try:
        return None if doc is None else MetricsRecord.from_dict(doc)
    except MetricsRecordError:
        return None


def parse_line(line: str) -> MetricsRecord | None:
    """The record on ``line``, or None when it is not one (tolerant: another process writes)."""
    return _record(parse_json_object(line))


def read_records(path: str | Path | None) -> list[MetricsRecord]:
    """Every record in the file, in order (``shared.jsonlines``): lines that are not records
    are skipped, a missing or unreadable file (or no ``path``) is none."""
    return [r for r in map(_record, read_json_lines(path)) if r is not None]
