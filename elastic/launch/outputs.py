"""Where a finished run left its files: one line for the end of ``elastic-run`` (pure but for
the existence checks)."""
from __future__ import annotations

import os
from collections.abc import Mapping


def outputs_line(paths: Mapping[str, str | None]) -> str:
    """``outputs: plot /a.svg, metrics /m.jsonl`` for each named file that exists, in order;
    ``outputs: none written (see --plot, --metrics-file, --timeline-file, --log-dir)`` when none does."""
    found = [f"{name} {os.path.abspath(path)}" for name, path in paths.items()
             if path and os.path.isfile(path)]
    if not found:
        return "outputs: none written (see --plot, --metrics-file, --timeline-file, --log-dir)"
    return "outputs: " + ", ".join(found)
