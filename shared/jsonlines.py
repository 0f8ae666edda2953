"""JSON-lines files written by other processes while we read them (training metrics, the
Horovod driver's events): ``read_json_lines(path) -> list[dict]``. The project's one reader
(``elastic.launch`` and ``localcluster.chaos`` read the same files with it).

Never raises: a missing or unreadable file is no records, a line that is not a JSON object
(a partial last line, garbage) is skipped. Pure apart from reading the one file.
"""
from __future__ import annotations

import json
from pathlib import Path


def parse_json_object(line: str) -> dict | None:
    """One line -> the JSON object on it, or None."""
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def read_json_lines(path: str | Path | None) -> list[dict]:
    """Every JSON object in the file, in order (none when ``path`` is empty or unreadable)."""
    if not path:
        return []
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return []
    return [doc for doc in map(parse_json_object, text.splitlines()) if doc is not None]
