#!/usr/bin/env python3
"""renumber_tests.py: the tests' docstrings name the regrouped patches (run once, from the
clone's root, after the regroup). A docstring that starts with old patch numbers
(``0031: ...``, ``Patch 0031: ...``, ``0016/0017: ...``; scripts/horovod-patch-tests' CLAIM)
then starts with the new patches that hold them and the old numbers:
``0105 (was 0031): ...``, ``0103/0105 (was 0003): ...``. A docstring that already names
regrouped patches that way gets the new patches of its old numbers again (a later regroup:
``0105 (was 0031)`` becomes ``0108 (was 0031)`` when 0031's concern is renumbered or split).
"""
from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path.cwd()
WAS = re.compile(r"(\d{4}(?:/\d{4})*) \(was (?:patch )?(\d{4}(?:/\d{4})*)")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from regroup import DEFAULT, FILE  # noqa: E402


def new_of(old: str) -> list[str]:
    """The new patches holding an old one (a patch split by file is in more than one)."""
    return sorted({DEFAULT[old], *(c for (n, _), c in FILE.items() if n == old)})


def main() -> int:
    loader = importlib.machinery.SourceFileLoader("hpt", str(ROOT / "scripts" / "horovod-patch-tests"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    hpt = importlib.util.module_from_spec(spec)
    loader.exec_module(hpt)
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        text = path.read_text()
        lines = text.splitlines(keepends=True)
        edits = []  # (offset, old text, new text)
        for node in ast.walk(ast.parse(text)):
            if not (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test")):
                continue
            doc = ast.get_docstring(node)
            m = WAS.match((doc or "").strip())
            if m:  # regrouped before: the new patches of its old numbers
                expr = node.body[0]
                start = sum(len(line) for line in lines[:expr.lineno - 1]) + expr.col_offset
                news = "/".join(sorted({c for n in m.group(2).split("/") for c in new_of(n)}))
                if news != m.group(1):
                    edits.append((text.index(m.group(0), start), m.group(1), news))
                continue
            olds = hpt.claimed(doc or "")
            if not olds or all(n >= "0100" for n in olds):
                continue
            claim = hpt.CLAIM.match(doc.strip()).group(0)
            expr = node.body[0]
            start = sum(len(line) for line in lines[:expr.lineno - 1]) + expr.col_offset
            at = text.index(claim, start)
            news = sorted({c for n in olds for c in new_of(n)})
            was = claim[0].lower() + claim[1:] if claim.startswith("Patch") else claim
            edits.append((at, claim, f"{'/'.join(news)} (was {was})"))
        for at, old, new in sorted(edits, reverse=True):
            text = text[:at] + new + text[at + len(old):]
        if edits:
            path.write_text(text)
            print(f"{path.relative_to(ROOT)}: {len(edits)} docstring(s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
