#!/usr/bin/env python3
"""same_code.py REPO REV_A REV_B: whether two trees of a git repository hold the same Python
code: every ``.py`` file of one is in the other, with the same syntax tree once docstrings
are blanked and every ``from X import a, b`` is read as one import a name (consecutive ones
in name order). Comments, layout, docstrings and how imports are grouped may differ; any
other change is code. Prints each file that differs and how; exit 0 when the code is the
same, 1 when not, 2 (one line on stderr) when git cannot read a revision or a file does not
parse.

For a change to the fork's patches meant to move code between them, not to change it: the
checkout before and after (``horovod-fork/tools/horovod-fork-checkout``) must give the same code.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the clone, for shared
from shared.exitcodes import EXIT_USAGE  # noqa: E402


def git(repo: str, *args: str) -> bytes:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, check=True).stdout


def python_files(repo: str, rev: str) -> set[str]:
    return {f for f in git(repo, "ls-tree", "-r", "--name-only", rev).decode().split("\n") if f.endswith(".py")}


def canonical(source: bytes, name: str = "<source>") -> tuple[str, list[str]]:
    """The tree's dump with docstrings blanked and imports one a name, and the docstrings."""
    tree = ast.parse(source, name)
    docs = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body \
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant) \
                and isinstance(node.body[0].value.value, str):
            docs.append(node.body[0].value.value)
            node.body[0].value.value = ""
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list):
                setattr(node, field, _imports_one_a_name(body))
    return ast.dump(tree), docs


def _imports_one_a_name(body: list[ast.stmt]) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    run: list[ast.ImportFrom] = []
    for stmt in [*body, None]:
        if isinstance(stmt, ast.ImportFrom):
            run += [ast.ImportFrom(module=stmt.module, names=[name], level=stmt.level) for name in stmt.names]
            continue
        ordered = sorted(run, key=lambda s: (s.module or "", s.level, s.names[0].name, s.names[0].asname or ""))
        out += ordered
        run = []
        if stmt is not None:
            out.append(stmt)
    return out


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__.split("\n", 1)[0], file=sys.stderr)
        return EXIT_USAGE
    repo, a, b = sys.argv[1:]
    try:
        return compare(repo, a, b)
    except subprocess.CalledProcessError as e:
        message = e.stderr.decode(errors="replace").strip().splitlines()
        print(f"same_code: git {' '.join(e.cmd[3:])}: {message[0] if message else 'failed'}", file=sys.stderr)
        return EXIT_USAGE
    except SyntaxError as e:
        print(f"same_code: {e.filename or 'a file'} does not parse: {e.msg} (line {e.lineno})", file=sys.stderr)
        return EXIT_USAGE


def compare(repo: str, a: str, b: str) -> int:
    """Prints each Python file that differs between revisions a and b; 1 if any does."""
    files_a, files_b = python_files(repo, a), python_files(repo, b)
    differ = 0
    for path in sorted(files_a ^ files_b):
        print(f"{path}: only in {a if path in files_a else b}")
        differ += 1
    for path in sorted(files_a & files_b):
        src_a, src_b = git(repo, "show", f"{a}:{path}"), git(repo, "show", f"{b}:{path}")
        if src_a == src_b:
            continue
        (code_a, docs_a), (code_b, docs_b) = canonical(src_a, f"{a}:{path}"), canonical(src_b, f"{b}:{path}")
        if code_a != code_b:
            print(f"{path}: the code differs")
            differ += 1
        else:
            print(f"{path}: the same code ({'docstrings, ' if docs_a != docs_b else ''}comments or layout differ)")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
