"""Find the project's commands (``ssh-bootstrap``, ``dataset-sync``, ``discover-hosts``, ...).

``tool(name)`` -> absolute path: the console script beside the running Python (the venv's
bin/), else the first on PATH; ``ToolNotFound`` (a LaunchError) naming it otherwise.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from elastic.errors import ToolNotFound


def tool(name: str) -> str:
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if found:
        return os.path.abspath(found)
    raise ToolNotFound(f"{name} not found beside {sys.executable} or on PATH (run scripts/setup)")
