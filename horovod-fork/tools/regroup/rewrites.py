#!/usr/bin/env python3
"""rewrites.py OLD_CHECKOUT OLD_SERIES [--assign 'NEW:OLD,OLD ...'] [-v] [--show NNNN PATH]: the lines one concern
of regroup.py's grouping writes and a later one rewrites (deletes), i.e. where the regrouped
series would have a patch rewriting another; what ``LINE`` must pin (or the order change) to
make each patch its own concern.

OLD_CHECKOUT and OLD_SERIES are regroup.py's. The grouping is regroup.py's (``CONCERNS``,
``DEFAULT``, ``FILE``, ``LINE``); ``--assign`` overrides ``DEFAULT`` to try another one without
editing it: ``'0106=0109 0105:0001,0002 0107:0020,0035'`` renames concern 0106 to 0109 (in
``DEFAULT``, ``FILE`` and ``LINE``; first), then puts old 0001 and 0002 in concern 0105, ...
The concerns are in the order of their numbers, as the series is. A line that old patch A
inserts and old patch B deletes is a rewrite when A's concern comes before B's (B's after:
the line is never in the series). Prints one line per (file, inserting patch and concern,
deleting patch and concern) with the count, ``-v`` every line; the total on stderr. Exit 0
(it reports, the choice is the grouping's). ``--show NNNN PATH`` prints instead PATH as the
prefix up to concern NNNN has it, each line with the old patch (and concern) that inserted it
and the one that deletes it later: where a prefix does not compile, the lines to pin.
"""
from __future__ import annotations

import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import regroup as R  # noqa: E402


def main() -> int:
    args = sys.argv[1:]
    verbose = "-v" in args
    args = [a for a in args if a != "-v"]
    default, file_, line = dict(R.DEFAULT), dict(R.FILE), dict(R.LINE)
    if "--assign" in args:
        i = args.index("--assign")
        groups = args[i + 1].split()
        for group in (g for g in groups if "=" in g):
            a, b = group.split("=")
            for d in (default, file_, line):
                d.update({k: b for k, v in d.items() if v == a})
        for group in (g for g in groups if "=" not in g):
            concern, olds = group.split(":")
            for num in olds.split(","):
                default[num] = concern
        del args[i:i + 2]
    show = None
    if "--show" in args:
        i = args.index("--show")
        show = (args[i + 1], args[i + 2])
        del args[i:i + 3]
    old, series_file = Path(args[0]), Path(args[1])
    order = sorted({*default.values(), *file_.values(), *line.values()})  # numbered in series order
    shas = R.git(old, "rev-list", "--reverse", "stock..HEAD").decode().split()
    series = [line for line in series_file.read_text().splitlines() if line and not line.startswith("#")]
    assert len(series) == len(shas), "the old series and the checkout differ"
    commits = [(sha, name[:4]) for sha, name in zip(shas, series, strict=True)]
    files: dict[str, list[tuple[str, str]]] = {}
    for sha, num in commits:
        for path in R.git(old, "diff-tree", "--no-commit-id", "--name-only", "-r", sha).decode().split("\n"):
            if path:
                files.setdefault(path, []).append((sha, num))

    R.LINE = line
    concern_of = {(num, path): file_.get((num, path), default[num]) for path, cs in files.items() for _, num in cs}

    if show is not None:
        done, path = set(order[:order.index(show[0]) + 1]), show[1]
        w = R.weave(old, files[path], path)
        ins_c, del_c = R.line_concerns(path, w, concern_of)
        n = 0
        for e, a, b in zip(w, ins_c, del_c, strict=True):
            if (a is None or a in done) and not (b is not None and b in done):
                n += 1
                ins = f"{e.ins}/{a}" if e.ins else "stock    "
                dele = f"{e.dele}/{b}" if e.dele else " " * 9
                print(f"{n:5} {ins} {dele} | {e.text.decode(errors='replace').rstrip()}")
        return 0
    found: collections.Counter[tuple[str, str, str, str, str]] = collections.Counter()
    for path, cs in files.items():
        w = R.weave(old, cs, path)
        for e, a, b in zip(w, *R.line_concerns(path, w, concern_of), strict=True):
            if a is None or b is None:
                continue
            if a != b and order.index(a) < order.index(b):
                found[(path, e.ins, a, e.dele, b)] += 1
                if verbose:
                    print(f"{path}: old {e.ins} ({a}) deleted by old {e.dele} ({b}): "
                          f"{e.text.decode(errors='replace').rstrip()}")
    for (path, ins, a, dele, b), n in sorted(found.items()):
        print(f"{path}: {n} line(s) of old {ins} ({a}) rewritten by old {dele} ({b})")
    print(f"rewrites: {sum(found.values())} line(s) in {len(found)} place(s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
