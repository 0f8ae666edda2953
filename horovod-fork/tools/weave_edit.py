#!/usr/bin/env python3
"""weave_edit.py export|apply CHECKOUT PATH [WEAVE]: edit one file of the fork in every patch
at once, as a weave: every line PATH ever has from stock Horovod through the series, each
tagged with the commit that adds it and the one that deletes it.

In a checkout of the fork (``horovod-fork/tools/horovod-fork-checkout``: tag ``stock``, then one commit
per patch in series order), commits are numbered by position: ``00`` is stock, ``01`` the
first patch, and so on (the export's header names each). A weave line is ``AA-DD|text``:
added by commit AA (``00``: stock's line), deleted by commit DD (``..``: still there at the
end). The file at commit k is every line with AA <= k < DD, in order.

- ``export CHECKOUT PATH``: prints the weave (``weave.py``'s, from ``git diff --histogram``).
- ``apply CHECKOUT PATH WEAVE``: rewrites the commits after ``stock`` so that PATH at each is
  the WEAVE's version; every other file and every message stays. The checkout's branch moves
  to the new commits (its work tree must be clean).

To take a rewrite away, edit the weave: re-tag a line to the patch that should add it, delete
a later patch's rewrite of it, or give the earlier patch a place the later one adds lines to
(``docs/horovod-fork.md``, "Changing a patch"). A line with 01 <= AA and DD != ``..`` is a
patch's line a later patch deletes: ``series_rewrites.py`` counts them. Exit 2 with one line on
stderr for a bad weave or a checkout that cannot be rewritten.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the clone, for shared
import weave as W  # noqa: E402

from shared.exitcodes import EXIT_OK, EXIT_USAGE  # noqa: E402

LINE = re.compile(r"^(\d\d)-(\d\d|\.\.)\|")


class WeaveError(Exception):
    """A weave or a checkout this tool cannot use (its message is the one line to print)."""


def commits(checkout: Path) -> list[str]:
    """stock, then each commit after it, in order."""
    after = W.git(checkout, "rev-list", "--reverse", "stock..HEAD").decode().split()
    return [W.git(checkout, "rev-parse", "stock^{commit}").decode().strip(), *after]


def export(checkout: Path, path: str) -> str:
    shas = commits(checkout)
    numbered = [(sha, f"{k:02d}") for k, sha in enumerate(shas) if k > 0]
    out = [f"# {k:02d} {W.git(checkout, 'log', '-1', '--format=%s', sha).decode().strip()}\n"
           for k, sha in enumerate(shas)]
    for e in W.weave(checkout, numbered, path):
        text = e.text.decode()
        if not text.endswith("\n"):
            raise WeaveError(f"{path} does not end with a newline: a weave cannot hold its last line")
        out.append(f"{e.ins or '00'}-{e.dele or '..'}|{text}")
    return "".join(out)


def parse(weave: str, last: int) -> list[tuple[int, int | None, str]]:
    """(added by, deleted by or None, text) per line; WeaveError naming the first bad line."""
    lines = []
    for n, line in enumerate(weave.splitlines(keepends=True), 1):
        if line.startswith("#"):
            continue
        m = LINE.match(line)
        if not m:
            raise WeaveError(f"weave line {n}: not AA-DD|text")
        added, deleted = int(m[1]), None if m[2] == ".." else int(m[2])
        if added > last or (deleted is not None and not added < deleted <= last):
            raise WeaveError(f"weave line {n}: {m[1]}-{m[2]} names no commit pair of 00-{last:02d} "
                             f"(added before deleted)")
        lines.append((added, deleted, line[m.end():]))
    return lines


def version(lines: list[tuple[int, int | None, str]], k: int) -> bytes:
    """The file at commit k."""
    return "".join(t for a, d, t in lines if a <= k and (d is None or k < d)).encode()


def apply(checkout: Path, path: str, weave: str) -> str:
    """Rewrites the commits after stock with PATH woven in; returns the new tip."""
    if W.git(checkout, "status", "--porcelain").strip():
        raise WeaveError(f"{checkout}: the work tree has changes: commit or stash them first")
    shas = commits(checkout)
    lines = parse(weave, len(shas) - 1)
    if version(lines, 0) != b"".join(W.show(checkout, shas[0], path) or []):
        raise WeaveError(f"the weave's stock version of {path} (its 00-.. and 00-DD lines) is not stock's")
    index = checkout / ".git" / "weave_edit.index"
    env = dict(os.environ, GIT_INDEX_FILE=str(index))
    parent = shas[0]
    try:
        for k, sha in enumerate(shas[1:], 1):
            meta = W.git(checkout, "log", "-1", "--format=%an%x00%ae%x00%aD%x00%cn%x00%ce%x00%cD", sha)
            an, ae, ad, cn, ce, cd = meta.decode().split("\0")
            subprocess.run(["git", "-C", str(checkout), "read-tree", sha], env=env, check=True, capture_output=True)
            listed = W.git(checkout, "ls-tree", sha, "--", path).decode().split()
            text = version(lines, k)
            if text or listed:
                blob = W.git(checkout, "hash-object", "-w", "--stdin", input_=text).decode().strip()
                update = ["--add", "--cacheinfo", f"{listed[0] if listed else '100644'},{blob},{path}"]
            else:
                update = ["--force-remove", "--", path]  # not there yet at this commit
            subprocess.run(["git", "-C", str(checkout), "update-index", *update], env=env, check=True,
                           capture_output=True)
            tree = subprocess.run(["git", "-C", str(checkout), "write-tree"], env=env, check=True,
                                  capture_output=True).stdout.decode().strip()
            message = W.git(checkout, "cat-file", "commit", sha).split(b"\n\n", 1)[1]  # byte for byte
            commit_env = dict(os.environ, GIT_AUTHOR_NAME=an, GIT_AUTHOR_EMAIL=ae, GIT_AUTHOR_DATE=ad,
                              GIT_COMMITTER_NAME=cn, GIT_COMMITTER_EMAIL=ce, GIT_COMMITTER_DATE=cd.strip())
            parent = subprocess.run(["git", "-C", str(checkout), "commit-tree", tree, "-p", parent],
                                    input=message, env=commit_env, check=True,
                                    capture_output=True).stdout.decode().strip()
    finally:
        index.unlink(missing_ok=True)
    W.git(checkout, "reset", "-q", "--hard", parent)
    return parent


def main() -> int:
    args = sys.argv[1:]
    if len(args) not in (3, 4) or args[0] not in ("export", "apply") or (args[0] == "apply") != (len(args) == 4):
        print(__doc__.split("\n", 1)[0], file=sys.stderr)
        return EXIT_USAGE
    checkout, path = Path(args[1]), args[2]
    try:
        if args[0] == "export":
            sys.stdout.write(export(checkout, path))
        else:
            tip = apply(checkout, path, Path(args[3]).read_text())
            print(f"weave_edit: {path} woven into the commits after stock; HEAD is {tip[:12]}", file=sys.stderr)
    except (WeaveError, OSError, UnicodeDecodeError) as e:
        print(f"weave_edit: {e}", file=sys.stderr)
        return EXIT_USAGE
    except subprocess.CalledProcessError as e:
        lines = (e.stderr or b"").decode(errors="replace").strip().splitlines()
        print(f"weave_edit: git {' '.join(map(str, e.cmd[3:]))}: {lines[0] if lines else 'failed'}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
