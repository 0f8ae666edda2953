#!/usr/bin/env python3
"""check_prefixes.py NEW_REPO: every prefix of the regrouped series (NEW_REPO: tag ``stock``,
one commit per patch, as regroup.py writes it) has sound Python: every .py file the series
touches compiles, and pyflakes finds in it no undefined name (nor any other complaint) that
the same file has neither in stock nor after the whole series, and every ``from horovod.X
import NAME`` in it (in a function too) names what module X defines in that prefix.
``horovod/common/basics.py`` has ``from typing import *``, which turns pyflakes' undefined
names into "may be undefined, or defined from star imports"; a name so reported that typing
does not define is counted as undefined. Needs pyflakes importable (``PYTHONPATH``). Exit 1 with the complaints if any.
"""
from __future__ import annotations

import ast
import queue
import re
import socket
import subprocess
import sys
import tempfile
import threading
import typing
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from regroup import extract  # noqa: E402

LIBRARY_CLASSES = (threading.Condition, threading.Event, threading.Thread, threading.Lock().__class__,
                   socket.socket, queue.Queue, subprocess.Popen)
STAR = re.compile(r"'([A-Za-z_][A-Za-z0-9_]*)' may be undefined, or defined from star imports")


def complaints(tree: Path, path: str) -> set[str]:
    f = tree / path
    if not f.exists():
        return set()
    r = subprocess.run([sys.executable, "-m", "py_compile", str(f)], capture_output=True, text=True)
    out = set()
    if r.returncode:
        out.add(f"does not compile: {r.stderr.strip().splitlines()[-1]}")
    r = subprocess.run([sys.executable, "-m", "pyflakes", str(f)], capture_output=True, text=True)
    for line in (r.stdout + r.stderr).splitlines():
        msg = line.split(":", 3)[-1].strip()  # without file:line:col, so versions compare
        m = STAR.search(msg)
        if m:
            if m.group(1) in typing.__all__:
                continue
            msg = f"undefined name '{m.group(1)}'"
        if "imported but unused" in msg or "redefinition of unused" in msg:
            msg = re.sub(r" from line \d+", "", msg)
        out.add(msg)
    return out


def names(tree: Path, files: list[str]) -> tuple[set[str], set[tuple[str, str]]]:
    """(every name the files define: functions, classes, assigned names and attributes,
    parameters, imports; every (file, NAME) of an attribute read obj.NAME in them)."""
    defined: set[str] = set()
    used: set[tuple[str, str]] = set()
    for path in files:
        f = tree / path
        if not f.exists():
            continue
        try:
            tree_ = ast.parse(f.read_bytes())
        except SyntaxError:
            continue  # reported as not compiling
        for node in ast.walk(tree_):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.arg):
                defined.add(node.arg)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
            elif isinstance(node, ast.Attribute):
                if isinstance(node.ctx, ast.Store):
                    defined.add(node.attr)
                else:
                    used.add((path, node.attr))
            elif isinstance(node, ast.alias):
                defined.add((node.asname or node.name).split(".")[0])
            elif isinstance(node, ast.keyword) and node.arg:
                defined.add(node.arg)  # setattr-like keyword attributes (namedtuple fields ...)
    return defined, used


def top_level(source: str) -> set[str]:
    """The names a module defines at its top level (also under if/try there)."""
    out: set[str] = set()
    for node in ast.parse(source).body:
        for n in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(n.name)
            elif isinstance(n, (ast.Assign, ast.AnnAssign)):
                for target in n.targets if isinstance(n, ast.Assign) else [n.target]:
                    out |= {x.id for x in ast.walk(target) if isinstance(x, ast.Name)}
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                out |= {(a.asname or a.name).split(".")[0] for a in n.names}
    return out


def show(repo: Path, rev: str, path: str) -> str | None:
    """``path``'s text at ``rev`` (None: not there)."""
    r = subprocess.run(["git", "-C", str(repo), "show", f"{rev}:{path}"], capture_output=True, text=True,
                       errors="replace")
    return r.stdout if r.returncode == 0 else None


def missing_imports(repo: Path, rev: str, tree: Path, files: list[str]) -> list[str]:
    """``from horovod.X import NAME`` (at any depth: the driver imports inside functions) in the
    files whose module X at rev does not define NAME (nor has a submodule NAME)."""
    def source(path: str) -> str | None:
        return show(repo, rev, path)
    out = []
    for path in files:
        f = tree / path
        if not f.exists():
            continue
        try:
            parsed = ast.parse(f.read_bytes())
        except SyntaxError:
            continue
        for node in ast.walk(parsed):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                    and node.module.startswith("horovod.")):
                continue
            base = node.module.replace(".", "/")
            text = source(base + ".py") or source(base + "/__init__.py")
            if text is None:
                continue
            names = top_level(text)
            for alias in node.names:
                if alias.name != "*" and alias.name not in names and source(f"{base}/{alias.name}.py") is None \
                        and source(f"{base}/{alias.name}/__init__.py") is None:
                    out.append(f"{path}:{node.lineno}: imports {alias.name} from {node.module}, which does not "
                               "define it")
    return out


def cxx_text(repo: Path, rev: str, files: list[str]) -> str:
    """The C++ files' text at rev (a file not there yet: nothing)."""
    return "".join(show(repo, rev, p) or "" for p in files)


def main() -> int:
    repo = Path(sys.argv[1])

    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True, text=True).stdout

    commits = git("rev-list", "--reverse", "stock..HEAD").split()
    files = sorted({p for p in git("diff", "--name-only", "stock", "HEAD").split() if p.endswith(".py")})
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        trees = {}
        for rev in ["stock", *commits]:
            d = Path(tmp) / rev
            d.mkdir()
            extract(repo, rev, d, files)
            trees[rev] = d
        for path in files:
            base = complaints(trees["stock"], path) | complaints(trees[commits[-1]], path)
            for k, rev in enumerate(commits[:-1], 1):
                for msg in sorted(complaints(trees[rev], path) - base):
                    bad += 1
                    print(f"prefix {k} ({git('log', '-1', '--format=%s', rev).strip()[:40]}): {path}: {msg}")
        # an attribute read in a prefix whose name only a later patch defines (in any file the
        # series touches), and a horovod_* C function the Python calls that the prefix's C++ lacks
        cxx = sorted({p for p in git("diff", "--name-only", "stock", "HEAD").split()
                      if p.endswith((".cc", ".h"))})
        final_def, _ = names(trees[commits[-1]], files)
        stock_def, stock_used = names(trees["stock"], files)
        known = stock_def | {n for _, n in stock_used}  # stock's own and library attributes
        # and the standard library's the driver's code uses (a Condition's notify() is not the
        # later patch's name that happens to be spelled the same)
        known |= {n for cls in LIBRARY_CLASSES for n in dir(cls)}
        for k, rev in enumerate(commits[:-1], 1):
            for msg in missing_imports(repo, rev, trees[rev], files):
                bad += 1
                print(f"prefix {k}: {msg}")
            defined, used = names(trees[rev], files)
            text = cxx_text(repo, rev, cxx)
            for path, name in sorted(used):
                if name in final_def and name not in defined and name not in known:
                    bad += 1
                    print(f"prefix {k}: {path}: .{name} is defined only by a later patch")
                elif name.startswith("horovod_") and f"{name}(" not in text:
                    bad += 1
                    print(f"prefix {k}: {path}: .{name} is a C function the prefix's C++ lacks")
        print(f"check_prefixes: {len(commits)} prefixes x {len(files)} Python files: {bad} complaint(s)",
              file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
