#!/usr/bin/env python3
"""series_rewrites.py CHECKOUT [-v]: the lines one patch of the series writes and a later patch
of it changes or deletes (a patch rewriting another), in a checkout of the fork
(``horovod-fork/tools/horovod-fork-checkout``: tag ``stock``, then one commit per patch in series order).

Prints one line per place, ``PATH: N line(s) of NNNN changed by MMMM``, sorted, and with
``-v`` every such line's text before them. Lines of stock Horovod that a patch changes do not
count (that is what patches are for), nor do lines a patch writes and changes itself. Exit 0
(it reports; ``horovod-fork/rewrites`` holds the places the series has on purpose, and
``tests/test_horovod_fork.py`` checks the two agree).

Each file's history is woven from ``git diff --histogram`` between consecutive commits
(``weave.py``), so a line moved by a patch counts as deleted by it.
"""
from __future__ import annotations

import collections
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the clone, for shared
import weave as W  # noqa: E402

from shared.exitcodes import EXIT_OK, EXIT_USAGE  # noqa: E402


def rewrites(checkout: Path, names: list[str]) -> tuple[collections.Counter[tuple[str, str, str]],
                                                        list[str]]:
    """(path, writing patch, changing patch) -> lines, and each such line's description.
    names: the patches' numbers, one per commit after ``stock``, in order."""
    shas = W.git(checkout, "rev-list", "--reverse", "stock..HEAD").decode().split()
    if len(shas) != len(names):
        raise SystemExit(f"series_rewrites: {checkout} has {len(shas)} commits after stock, "
                         f"the series {len(names)} patches")
    files: dict[str, list[tuple[str, str]]] = {}
    for sha, num in zip(shas, names, strict=True):
        for path in W.git(checkout, "diff-tree", "--no-commit-id", "--name-only", "-r", sha).decode().split("\n"):
            if path:
                files.setdefault(path, []).append((sha, num))
    found: collections.Counter[tuple[str, str, str]] = collections.Counter()
    lines: list[str] = []
    for path, commits in sorted(files.items()):
        for e in W.weave(checkout, commits, path):
            if e.ins is not None and e.dele is not None and e.ins != e.dele:
                found[(path, e.ins, e.dele)] += 1
                lines.append(f"{path}: {e.ins} -> {e.dele}: {e.text.decode(errors='replace').rstrip()}")
    return found, lines


def main() -> int:
    args = [a for a in sys.argv[1:] if a != "-v"]
    if len(args) != 1:
        print(__doc__.split("\n", 1)[0], file=sys.stderr)
        return EXIT_USAGE
    checkout = Path(args[0])
    # the series' one reader: the patches in order, one path a line
    series = Path(__file__).resolve().parent / "horovod-series"
    listed = subprocess.run([str(series)], capture_output=True, text=True, check=True).stdout
    names = [Path(line).name[:4] for line in listed.splitlines()]
    found, lines = rewrites(checkout, names)
    if "-v" in sys.argv[1:]:
        print("\n".join(lines))
    for (path, a, b), n in sorted(found.items()):
        print(f"{path}: {n} line(s) of {a} changed by {b}")
    print(f"series_rewrites: {sum(found.values())} line(s) in {len(found)} place(s)", file=sys.stderr)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
