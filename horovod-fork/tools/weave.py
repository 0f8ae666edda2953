"""A file's history in a checkout of the fork (``horovod-fork/tools/horovod-fork-checkout``: tag ``stock``,
then one commit per patch in series order), as a weave: every line the file ever has from stock
through the commits, in file order, each with the commit that inserted it (``None``: stock) and
the one that deleted it (``None``: still there), from ``git diff --histogram`` between
consecutive commits. The file at a commit is the weave's lines inserted at or before it and not
deleted by then. ``series_rewrites.py`` and ``weave_edit.py`` read the series through it.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path


def git(repo: Path, *args: str, input_: bytes | None = None) -> bytes:
    env = dict(os.environ, GIT_AUTHOR_NAME="elastic-horovod", GIT_AUTHOR_EMAIL="elastic-horovod@localhost",
               GIT_COMMITTER_NAME="elastic-horovod", GIT_COMMITTER_EMAIL="elastic-horovod@localhost",
               GIT_AUTHOR_DATE="2000-01-01T00:00:00Z", GIT_COMMITTER_DATE="2000-01-01T00:00:00Z")
    return subprocess.run(["git", "-C", str(repo), *args], input=input_, env=env, check=True,
                          capture_output=True).stdout


def show(repo: Path, rev: str, path: str) -> list[bytes] | None:
    r = subprocess.run(["git", "-C", str(repo), "cat-file", "blob", f"{rev}:{path}"], capture_output=True)
    return r.stdout.splitlines(keepends=True) if r.returncode == 0 else None


HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", re.M)


def hunks(repo: Path, a: str, b: str, path: str) -> list[tuple[int, int, int, int]]:
    """(old start, old count, new start, new count) of git's diff of path between two commits."""
    out = git(repo, "diff", "--histogram", "-U0", "--no-color", "--no-ext-diff", a, b, "--", path)
    res = []
    for m in HUNK.finditer(out):
        os_, oc, ns, nc = int(m[1]), int(m[2] or 1), int(m[3]), int(m[4] or 1)
        res.append((os_, oc, ns, nc))
    return res


class Entry:
    __slots__ = ("text", "ins", "dele")

    def __init__(self, text: bytes, ins: str | None) -> None:
        self.text, self.ins = text, ins
        self.dele: str | None = None


def weave(repo: Path, commits: list[tuple[str, str]], path: str) -> list[Entry]:
    """Every line path ever had from stock through the commits, in order (see the module doc)."""
    w = [Entry(t, None) for t in (show(repo, "stock", path) or [])]
    prev = "stock"
    for sha, num in commits:
        new = show(repo, sha, path) or []
        old_alive = [i for i, e in enumerate(w) if e.dele is None]
        inserts: list[tuple[int, list[Entry]]] = []
        for os_, oc, ns, nc in hunks(repo, prev, sha, path):
            for j in range(os_ - 1, os_ - 1 + oc) if oc else []:
                w[old_alive[j]].dele = num
            # position in the weave: after the last deleted line, else after alive line os_
            if oc:
                pos = old_alive[os_ - 1 + oc - 1] + 1
            else:
                pos = old_alive[os_ - 1] + 1 if os_ > 0 else 0
            if nc:
                inserts.append((pos, [Entry(t, num) for t in new[ns - 1:ns - 1 + nc]]))
        for pos, entries in sorted(inserts, key=lambda x: -x[0]):
            w[pos:pos] = entries
        alive = [e.text for e in w if e.dele is None]
        assert alive == new, f"weave of {path} after {num} is not the file"
        prev = sha
    return w
