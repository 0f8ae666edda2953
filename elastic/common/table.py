"""Plain-text tables for the per-host reports of ``ssh-bootstrap`` and ``dataset-sync``.

``render_table(headers, rows)`` is pure: it returns the table as a string with one header line,
columns left-aligned and separated by two spaces, and no trailing spaces.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def render_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Return ``headers`` and ``rows`` as aligned text lines joined by newlines."""
    text_rows = [[str(cell) for cell in row] for row in rows]
    for row in text_rows:
        if len(row) != len(headers):
            raise ValueError(f"row has {len(row)} cells, table has {len(headers)} columns: {row!r}")
    widths = [len(h) for h in headers]
    for row in text_rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = []
    for row in [list(headers), *text_rows]:
        line = "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row))
        lines.append(line.rstrip())
    return "\n".join(lines)


def human_bytes(count: int) -> str:
    """Return a byte count as a short human string: ``0 B``, ``1.5 KiB``, ``12.0 MiB``."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
