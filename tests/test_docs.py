"""The docs name files of this repository only, and only files that exist."""
import ast
import os
import re
from pathlib import Path

import pytest

from tests.projectmodules import PACKAGES, project_modules

ROOT = Path(__file__).resolve().parents[1]
TOP = ("discovery/", "elastic/", "training/", "localcluster/", "images/", "deploy/", "scripts/", "tests/", "docs/",
       "horovod-fork/")
DOCS = ["README.md", "docs/architecture.md", "docs/benchmarks.md", "docs/horovod-fork.md",
        *sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("*/README.md"))]


@pytest.mark.parametrize("doc", DOCS)
def test_every_file_a_doc_names_exists(doc):
    text = (ROOT / doc).read_text()
    named = {m for m in re.findall(r"`([A-Za-z0-9_./*-]+)`", text) if m.startswith(TOP) or m.endswith(".md")}
    named |= set(re.findall(r"\]\(([^)#:]+)\)", text))  # markdown links
    base = (ROOT / doc).parent
    missing = sorted(n for n in named if not list(ROOT.glob(n.rstrip("/"))) and not (base / n).exists())
    assert missing == []


@pytest.mark.parametrize("doc", DOCS)
def test_no_doc_points_outside_the_repository(doc):
    text = (ROOT / doc).read_text()
    assert not re.findall(r"\.\./shared|\bissue \d+", text)


# The project's packages; a dotted name starting with one of them must name a module of it.
# Names in backticks that are not this project's and not used by its code, each with why.
OUTSIDE = {
    "root_squash": "an NFS export option",
    "broadcast_optimizer_state": "Horovod's API (hvd.broadcast_optimizer_state)",
    "from_rate": "a field of a tuple, named in the text only",
    "val_annotations": "Tiny ImageNet's val/val_annotations.txt",
}


def _texts(mods: dict[str, Path]) -> list[tuple[str, str]]:
    """(where, text): every docstring of the packages, and the docs."""
    texts = []
    for path in mods.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False)
                if doc:
                    texts.append((str(path.relative_to(ROOT)), doc))
    return texts + [(doc, (ROOT / doc).read_text()) for doc in DOCS]


def _known_identifiers(mods: dict[str, Path], files: set[str]) -> set[str]:
    """Every name the code uses (defined or called, ours or a library's), the files' names,
    and the words of the Horovod patches (driver event names, C functions)."""
    known = {Path(f).name for f in files} | {Path(f).stem for f in files}
    for path in mods.values():
        for node in ast.walk(ast.parse(path.read_text())):
            for attr in ("id", "attr", "name", "arg", "module", "asname"):
                value = getattr(node, attr, None)
                if isinstance(value, str):
                    known.update(value.split("."))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"\w+", node.value):
                known.add(node.value)
    for patch in (ROOT / "horovod-fork" / "patches").glob("*.patch"):
        known.update(re.findall(r"\w+", patch.read_text()))
    return known


def stale_names(texts: list[tuple[str, str]], mods: dict[str, Path], files: set[str],
                known: set[str]) -> list[str]:
    """``where: name`` for each name in backticks that names nothing that exists: a
    ``something.py`` no file of the repository is called; a dotted ``package.module[.attr]``
    of the project whose module does not exist (or whose module never mentions ``attr``); a
    snake_case name (``sync_lock``) that no code, file or patch uses."""
    basenames = {Path(f).name for f in files}
    bad = set()
    for where, text in texts:
        for quoted in re.findall(r"`+([^`\s]+)`+", text):
            name = quoted.split("(")[0].split(":")[0]
            for py in re.findall(r"[\w/.-]*\b\w+\.py\b", quoted):
                if py not in files and Path(py).name not in basenames:
                    bad.add(f"{where}: {py}")
            parts = name.split(".")
            if parts[0] in PACKAGES and len(parts) > 1 and all(re.fullmatch(r"\w+", p) for p in parts):
                k = max(i for i in range(1, len(parts) + 1) if i == 1 or ".".join(parts[:i]) in mods)
                module = mods[".".join(parts[:k])]
                if k == 1 or (k < len(parts) and not re.search(rf"\b{parts[k]}\b", module.read_text())):
                    bad.add(f"{where}: {name}")
            first = parts[0]
            if re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)+", first) and first not in known and first not in OUTSIDE:
                bad.add(f"{where}: {first}")
    return sorted(bad)


def test_no_docstring_or_doc_names_a_module_that_does_not_exist():
    mods = project_modules()
    files = set()
    for top, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in (".venv", ".git", "__pycache__", ".mypy_cache", ".ruff_cache")]
        files |= {str((Path(top) / n).relative_to(ROOT)) for n in names + dirs}
    assert stale_names(_texts(mods), mods, files, _known_identifiers(mods, files)) == []


def test_stale_names_sees_renamed_modules():
    """The check itself: names once found stale (modules since renamed) are caught, the live ones
    are not."""
    mods = project_modules()
    files = {"elastic/sync/lock.py", "elastic/sync/remote.py"}
    text = ("``sync_lock``, ``sync_remote.probe_script``, ``discovery.cli_runner.run_main``, "
            "``open_master.py``, ``elastic.sync.lock``, ``elastic.sync.remote.probe_script``, "
            "``elastic.sync.remote.no_such_script``, ``lock.py``")
    assert stale_names([("x", text)], mods, files, {"lock", "remote", "probe_script"}) == [
        "x: discovery.cli_runner.run_main", "x: elastic.sync.remote.no_such_script",
        "x: open_master", "x: open_master.py", "x: sync_lock", "x: sync_remote"]
