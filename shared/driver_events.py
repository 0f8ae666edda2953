"""The Horovod driver's event records (pure parsing, plus a file follower): the project's one
reader of that format (``elastic.launch.events`` re-exports it; ``localcluster.chaos``
reads the same file with it).

The patched driver (``horovod_patches/0004``) appends one JSON line per event to
``$HOROVOD_ELASTIC_EVENTS_FILE``: ``{"time": unix seconds, "kind": str, "detail": {...}}``.
``elastic-run`` points that at a file of its own and reads it for the timeline
(``timeline.driver_events``) and the stall watchdog (``stall``). The record format is
described in ``elastic.launch.timeline``'s docstring.

``parse_line(text) -> Record | None`` (None for anything that is not a record: the file is
written by another process and may end in a partial line); ``read_records(path)`` reads a
whole file; ``Follower(path).poll()`` returns the records appended since the last call.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shared.jsonlines import parse_json_object, read_json_lines

EVENTS_ENV = "HOROVOD_ELASTIC_EVENTS_FILE"


@dataclass(frozen=True)
class Record:
    """One driver event: unix time, kind (``reset``, ``worker_start``...), its detail."""

    time: float
    kind: str
    detail: dict[str, Any] = field(default_factory=dict)


def parse_line(text: str) -> Record | None:
    """A record from one JSON line, or None when the line is not one."""
    doc = parse_json_object(text)
    return None if doc is None else _record(doc)


def _record(doc: dict) -> Record | None:
    """A record from a JSON object, or None when it does not have a record's fields."""
    when, kind, detail = doc.get("time"), doc.get("kind"), doc.get("detail", {})
    if not isinstance(when, (int, float)) or isinstance(when, bool) or not isinstance(kind, str):
        return None
    return Record(float(when), kind, detail if isinstance(detail, dict) else {})


def read_records(path: str | Path | None) -> list[Record]:
    """Every record in the file (none when it is missing); bad lines are skipped."""
    return [r for r in map(_record, read_json_lines(path)) if r is not None]


class Follower:
    """Reads the records appended to a file since the last ``poll`` (a partial last line waits)."""

    def __init__(self, path: str | Path):
        self._path = Path(path)
        self._offset = 0
        self._rest = b""

    def poll(self) -> list[Record]:
        """The new complete records; [] when the file is missing or has nothing new."""
        try:
            with open(self._path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return []
        self._offset += len(data)
        data = self._rest + data
        lines = data.split(b"\n")
        self._rest = lines.pop()
        out = []
        for line in lines:
            rec = parse_line(line.decode("utf-8", "replace"))
            if rec is not None:
                out.append(rec)
        return out
