"""Run a benchmark (scripts/benchmarks/bench-*) or scripts/soak under this clone's venv, as the
README says to run them.

``ROOT, VENV = benchvenv.use_venv(__file__)`` at the top of such a script: when the venv
(``$ELASTIC_VENV``, else ``ROOT/.venv``) exists and this is not its Python, the script is
started again under it (``os.execv``, same arguments: the call does not return); otherwise the
clone (``ROOT``, two folders above this file's) is put first on ``sys.path`` and both are
returned. ROOT comes from this file's place, not the script's, so a script anywhere in the
clone may call it.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path


def use_venv(script: str) -> tuple[Path, Path]:
    """Re-exec ``script`` under the venv's Python if needed; returns (ROOT, VENV)."""
    root = Path(__file__).resolve().parents[2]
    venv = Path(os.environ.get("ELASTIC_VENV", root / ".venv"))
    python = venv / "bin" / "python"
    if python.exists() and Path(sys.prefix).resolve() != venv.resolve():
        os.execv(str(python), [str(python), script, *sys.argv[1:]])
    sys.path.insert(0, str(root))
    return root, venv
