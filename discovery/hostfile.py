"""Atomic hostfile (``host slots=N`` lines) for non-elastic runs (standard library only).

Written with ``shared.atomicfile.write_atomic`` (temporary file, fsync, rename): a reader
sees the old file or the new one, never a partial one.
"""
from __future__ import annotations

from collections.abc import Iterable

from discovery.hosts import MAX_SLOTS, Host, servable
from shared.atomicfile import write_atomic


def render_hostfile(hosts: Iterable[Host]) -> str:
    """``host slots=N`` lines. A host that fails ``hosts.servable`` (or has slots out of
    range) is left out: the hostfile never trusts that the caller checked."""
    return "".join(f"{h.host} slots={h.slots}\n" for h in hosts
                   if servable(h.host) and 0 < h.slots <= MAX_SLOTS)


class HostfileWriter:
    """Writes the hostfile when its content changes; remembers what it wrote last."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._last: str | None = None

    def update(self, hosts: Iterable[Host]) -> bool:
        """Write if different from the last write; returns whether it wrote. Raises ``OSError``."""
        text = render_hostfile(hosts)
        if text == self._last:
            return False
        write_atomic(self.path, text)
        self._last = text
        return True
