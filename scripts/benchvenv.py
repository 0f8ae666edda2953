"""Run a scripts/bench-* script under this clone's venv, as the README says to run them.

``ROOT, VENV = benchvenv.use_venv(__file__)`` at the top of a bench script: when the venv
(``$ELASTIC_VENV``, else ``ROOT/.venv``) exists and this is not its Python, the script is
started again under it (``os.execv``, same arguments: the call does not return); otherwise the
clone (``ROOT``, the folder above scripts/) is put first on ``sys.path`` and both are returned.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path


def use_venv(script: str) -> tuple[Path, Path]:
    """Re-exec ``script`` under the venv's Python if needed; returns (ROOT, VENV)."""
    root = Path(script).resolve().parents[1]
    venv = Path(os.environ.get("ELASTIC_VENV", root / ".venv"))
    python = venv / "bin" / "python"
    if python.exists() and Path(sys.prefix).resolve() != venv.resolve():
        os.execv(str(python), [str(python), script, *sys.argv[1:]])
    sys.path.insert(0, str(root))
    return root, venv
