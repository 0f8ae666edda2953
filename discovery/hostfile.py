"""Atomic hostfile (``host slots=N`` lines) for non-elastic runs (standard library only).

Written to a temporary file in the same directory, flushed and fsynced, then renamed over
the target: a reader sees the old file or the new one, never a partial one.
"""
from __future__ import annotations

import os
import tempfile
from typing import Iterable

from discovery.hosts import MAX_SLOTS, Host, servable


def render_hostfile(hosts: Iterable[Host]) -> str:
    """``host slots=N`` lines. A host that fails ``hosts.servable`` (or has slots out of
    range) is left out: the hostfile never trusts that the caller checked."""
    return "".join(f"{h.host} slots={h.slots}\n" for h in hosts
                   if servable(h.host) and 0 < h.slots <= MAX_SLOTS)


def write_atomic(path: str, text: str, mode: int = 0o644) -> None:
    """Replace ``path`` with ``text`` atomically. Raises ``OSError`` (the temp file is removed)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class HostfileWriter:
    """Writes the hostfile when its content changes; remembers what it wrote last."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._last: str | None = None
        self.writes = 0

    def update(self, hosts: Iterable[Host]) -> bool:
        """Write if different from the last write; returns whether it wrote. Raises ``OSError``."""
        text = render_hostfile(hosts)
        if text == self._last:
            return False
        write_atomic(self.path, text)
        self._last = text
        self.writes += 1
        return True
