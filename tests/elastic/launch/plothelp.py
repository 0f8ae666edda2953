"""Test-only readers of the plot files ``elastic.launch.plot.write_plot`` writes (the product
reads only their description: ``plot.read_description``)."""
from __future__ import annotations

import os
import struct
import xml.etree.ElementTree as ET
from pathlib import Path

from elastic.errors import PlotError


def png_size(path: str | os.PathLike) -> tuple[int, int]:
    """(width, height) in pixels from a PNG's header."""
    head = Path(path).read_bytes()[:24]
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        raise PlotError(f"{path}: not a PNG file")
    return struct.unpack(">II", head[16:24])


def svg_ids(path: str | os.PathLike) -> set[str]:
    """Every element id of an SVG file (the gids ``write_plot`` gives its artists among them)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise PlotError(f"{path}: cannot read the SVG: {exc}") from exc
    return {gid for el in root.iter() if (gid := el.get("id"))}
