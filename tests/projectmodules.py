"""The project's own Python modules, for the tests that check the code's layout and its text
(tests/test_layout.py, tests/test_docs.py)."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("discovery", "elastic", "training", "localcluster", "shared")


def project_modules() -> dict[str, Path]:
    """Every module of the five packages, by dotted name (a package by its own name)."""
    mods = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return mods
