"""The Horovod driver's event records (pure parsing, plus a file follower): the project's one
reader of that format (``elastic.launch.events`` re-exports it; ``localcluster.chaos``
reads the same file with it).

The patched driver (``horovod-fork/patches/0105``) appends one JSON line per event to
``$HOROVOD_ELASTIC_EVENTS_FILE``: ``{"time": unix seconds, "kind": str, "detail": {...}}``.
``elastic-run`` points that at a file of its own and reads it for the timeline
(``timeline.driver_events``) and its watchers (``stall``, ``badinput``, ``gang``, ``phases``).
The kinds and each one's detail are ``shared.event_kinds``.

``parse_line(text) -> Record | None`` (None for anything that is not a record: the file is
written by another process and may end in a partial line); ``read_records(path)`` reads a
whole file; ``Follower(path).poll()`` returns the records appended since the last call.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shared.environment import HOROVOD_ELASTIC_EVENTS_FILE
from shared.event_kinds import Kind, kind_of
from shared.jsonlines import parse_json_object, read_json_lines

EVENTS_ENV = HOROVOD_ELASTIC_EVENTS_FILE


@dataclass(frozen=True)
class Record:
    """One driver event: unix time, kind (``Kind.RESET``...: ``shared.event_kinds`` lists them
    and each one's detail; a kind this version does not know stays its string), its detail."""

    time: float
    kind: Kind | str
    detail: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", kind_of(self.kind))  # a known kind as its Kind


def parse_line(text: str) -> Record | None:
    """A record from one JSON line, or None when the line is not one."""
    doc = parse_json_object(text)
    return None if doc is None else _record(doc)


def _record(doc: dict) -> Record | None:
    """A record from a JSON object, or None when it does not have a record's fields."""
    when, kind, detail = doc.get("time"), doc.get("kind"), doc.get("detail", {})
    if not isinstance(when, (int, float)) or isinstance(when, bool) or not isinstance(kind, str):
        return None
    return Record(float(when), kind_of(kind), detail if isinstance(detail, dict) else {})


def read_records(path: str | Path | None) -> list[Record]:
    """Every record in the file (none when it is missing); bad lines are skipped."""
    return [r for r in map(_record, read_json_lines(path)) if r is not None]


class Follower:
    """Reads the records appended to a file since the last ``poll`` (a partial last line waits).

    The driver rotates its events file (``<path>`` becomes ``<path>.1``, a new ``<path>`` is
    started): when ``<path>`` is another file than the one read so far, the rest of the old
    one (found as ``<path>.1``) is read first, then the new one from its start."""

    def __init__(self, path: str | Path):
        self._path = Path(path)
        self._offset = 0
        self._rest = b""
        self._inode: int | None = None

    def poll(self) -> list[Record]:
        """The new complete records; [] when the file is missing or has nothing new."""
        try:
            inode = os.stat(self._path).st_ino
        except OSError:
            return []
        data = b""
        if self._inode is not None and inode != self._inode:
            rotated = self._path.with_name(self._path.name + ".1")
            try:
                if os.stat(rotated).st_ino == self._inode:
                    data = self._read(rotated)
            except OSError:
                pass
            if not data.endswith(b"\n") and (self._rest or data):
                data += b"\n"  # the old file's partial last line ends with it
            self._offset = 0
        self._inode = inode
        data += self._read(self._path)
        data = self._rest + data
        lines = data.split(b"\n")
        self._rest = lines.pop()
        out = []
        for line in lines:
            rec = parse_line(line.decode("utf-8", "replace"))
            if rec is not None:
                out.append(rec)
        return out

    def _read(self, path: Path) -> bytes:
        """What path holds past the offset read so far (which then moves to its end)."""
        try:
            with open(path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return b""
        self._offset += len(data)
        return data
