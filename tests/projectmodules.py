"""The project's own Python modules and the folders of its tools, for the tests that check the
code's layout and its text (tests/test_layout.py, tests/test_docs.py, tests/test_errors.py)."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("discovery", "elastic", "training", "localcluster", "shared")
# folder -> the kind of tool it holds (each kind in one place)
TOOL_FOLDERS = {
    "scripts": "the commands a user runs: setup, test, demo, build-images, gpu-smoke, bench (runs the "
               "benchmarks), simulate, soak, with-stages",
    "scripts/benchmarks": "the benchmarks (bench-*), their modules, and the modules the soak shares with them",
    "horovod-fork/tools": "the Horovod fork's tools: its series, build, wheel key and source, checks, checkout, "
                          "patch-to-test table, the rewrite and weave tools",
}


def python_commands() -> set[str]:
    """Every Python command of the tool folders (``TOOL_FOLDERS``): a file without a suffix whose
    first line (the ``#!``) names python, by its path from the root. ruff and mypy check a file
    without a ``.py`` suffix only when pyproject.toml names it (tests/test_layout.py)."""
    found = set()
    for folder in TOOL_FOLDERS:
        for path in (ROOT / folder).iterdir():
            if path.is_file() and not path.suffix:
                first = path.read_text(errors="replace").splitlines()[:1]
                if first and first[0].startswith("#!") and "python" in first[0]:
                    found.add(path.relative_to(ROOT).as_posix())
    return found


def project_modules() -> dict[str, Path]:
    """Every module of the five packages, by dotted name (a package by its own name)."""
    mods = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return mods
