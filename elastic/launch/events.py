"""The Horovod driver's event records, as ``elastic.launch`` names them: the format and its
reader live once, in ``shared.driver_events`` (see its docstring)."""
from __future__ import annotations

from shared.driver_events import EVENTS_ENV, Follower, Record, parse_line, read_records

__all__ = ["EVENTS_ENV", "Follower", "Record", "parse_line", "read_records"]
