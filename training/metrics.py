"""Metrics records (pure) and their line-atomic JSON-lines writer.

``record(...)`` builds one ``shared.metrics_record.MetricsRecord`` (the format, its fields and
its readers are described there) from the loop's counters, rounded for the line;
``MetricsWriter`` appends it as one line to a file (one ``os.write`` on an ``O_APPEND``
descriptor, so concurrent writers and a crash never leave half a line) and prints the same
line to stdout.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

from shared.metrics_record import MetricsRecord
from training.errors import ConfigError


def record(event: str, *, time: float, epoch: int, batch: int, world_size: int, samples: int,
           samples_per_sec: float, samples_per_sec_per_worker: float, loss_sum: float, correct: int,
           lr: float, resets: int, val_accuracy: float | None = None,
           decode_fallbacks: int | None = None) -> MetricsRecord:
    """One metrics record; ``loss`` and ``accuracy`` are means over ``samples`` (null if none).
    ``MetricsRecordError`` (a ``ValueError``) for a bad value, e.g. an unknown ``event``."""
    return MetricsRecord(
        event=event, time=round(time, 3), epoch=epoch, batch=batch, world_size=world_size,
        samples=samples, samples_per_sec=round(samples_per_sec, 2),
        samples_per_sec_per_worker=round(samples_per_sec_per_worker, 2),
        loss=round(loss_sum / samples, 6) if samples else None,
        accuracy=round(correct / samples, 6) if samples else None, lr=lr, resets=resets,
        val_accuracy=None if val_accuracy is None or event != "epoch" else round(val_accuracy, 6),
        decode_fallbacks=decode_fallbacks)


def rate(samples: int, seconds: float) -> float:
    """Samples per second, 0.0 when no time has passed."""
    return samples / seconds if seconds > 0 else 0.0


class MetricsWriter:
    """Appends records to ``path`` (if given) and prints them to ``stream`` (stdout)."""

    def __init__(self, path: str | None, stream: TextIO | None = None):
        self.path = path
        self.stream = stream if stream is not None else sys.stdout
        self._fd: int | None = None

    def open(self) -> MetricsWriter:
        """Open the file for appending; ``ConfigError`` naming it when that fails."""
        if self.path and self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            except OSError as exc:
                raise ConfigError(f"metrics file {self.path}: {exc.strerror}") from exc
        return self

    def write(self, rec: MetricsRecord) -> None:
        """Write one record as one line to the file and to the stream."""
        line = rec.to_json() + "\n"
        if self._fd is not None:
            os.write(self._fd, line.encode())
        self.stream.write(line)
        self.stream.flush()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
