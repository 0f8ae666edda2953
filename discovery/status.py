"""``WatchStatus``: how current a host source's pods are (no Kubernetes import: the service,
the server and every source read it)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WatchStatus:
    """An immutable view of the watch. Times are from the injected monotonic clock.

    ``disconnected_since`` is None while the watch is known current; otherwise the time the
    connection was lost (the data is current as of then). ``failures``: failed sessions in a
    row since the watch last worked (delivered an event or ended cleanly); 0 while it works.
    """

    synced: bool = False
    connected: bool = False
    disconnected_since: float | None = None
    resource_version: str = ""
    last_event_at: float | None = None
    lists: int = 0
    relists: int = 0
    restarts: int = 0
    events: int = 0
    failures: int = 0
    last_error: str = ""
    fatal: str = ""
