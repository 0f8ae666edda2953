#!/usr/bin/env python3
"""regroup.py OLD_CHECKOUT NEW_REPO OLD_SERIES: rebuild the Horovod fork's series grouped by
concern.

OLD_CHECKOUT is ``scripts/horovod-fork-checkout DIR`` of the old series (tag ``stock``, one
commit per old patch); OLD_SERIES its series file (the old patches' numbers, in order). Every
(old patch, file) pair is assigned a concern (``DEFAULT``, ``FILE``; ``LINE`` pins single
lines, unused so far). For every file the old commits touch, a weave is built: every line that
ever existed in the file between stock and the last commit, in file order, with the commit
that inserted it (``None``: stock) and the one that deleted it (``None``: still there). The
tree after concerns 1..k then holds, of each file, the weave's lines inserted by stock or a
commit of those concerns and not deleted by one of them. After the last concern that is the
old series' final tree, line for line, so the new series gives a byte-identical tree.

NEW_REPO (must not exist) gets the stock tree (tag ``stock``) and one commit per concern, its
message the concern's title and body, the list of old patches it holds, and every old
patch's own message (What/Why) in full. Write them back with ``git format-patch
--zero-commit --no-signature -1 <c> --stdout | sed '/^Date: /d'`` (README.md).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

# new number, file-name slug, title, body (the concern's summary)
CONCERNS = [
    ("0101", "version", "version 0.28.1+eh9: the patch level in the version",
     "What: horovod.__version__ is 0.28.1+eh9, so horovodrun --version, pip and the wheel's name "
     "show this fork's patch level. Why: scripts/setup and the wheel cache key read it here."),
    ("0102", "shell-exec", "safe_shell_exec, horovodrun: a launcher without middlemen that output "
     "cannot block",
     "What: every command horovodrun starts (workers' ssh clients or processes, the discovery "
     "script) is its own direct child, its output relayed by one thread that never blocks or dies, "
     "and SIGTERM/SIGINT end horovodrun within a deadline. Why: stock Horovod cost three processes "
     "and ~32 MB per worker on the launcher, and one blocked or undecodable output stream stopped "
     "exits, kills and discovery."),
    ("0103", "gloo-abort", "gloo: an abort frees every rank at once; a failed collective or a bad "
     "message fails the connections, not the process",
     "What: horovod_gloo_abort (the elastic driver's abort of a world) wakes every queued send and "
     "receive through a public gloo::Context::abort, during hvd.init and hvd.shutdown too; a failed "
     "Gloo collective aborts the session's contexts; a message that does not fit its receive, or an "
     "abort during a shutdown with process sets, fails the connection instead of ending the process. "
     "Why: a lost peer otherwise costs every survivor the Gloo timeout, or the process."),
    ("0104", "nccl", "nccl: non-blocking communicators that end on the abort; an ordered teardown",
     "What: NCCL communicators are created non-blocking and polled, ending on the Gloo abort; at "
     "teardown the finalizer threads are stopped and joined before the communicators are freed. "
     "Why: a peer lost during a communicator's init hung every survivor, and stock's teardown "
     "order let a finalizer use a freed communicator (horovod#3111). Compiled, not run on a GPU."),
    ("0105", "elastic-driver", "elastic driver: host changes kept, failures found and aborted in "
     "seconds, leaves, joins while training, respawn",
     "What: the elastic driver and its worker-side services: host changes kept until acted on, push "
     "discovery with a timeout, an events file, deadlines on every request, aborts that name their "
     "world, liveness with quarantine and probation, graceful leaves and held readiness flaps, a "
     "barrier deadline that judges progress, spawn-first joins, a new process for an ended slot, a "
     "first init told of its world's abort. Why: stock Horovod's driver waited out timeouts (Gloo's, "
     "ssh's) for every failure, dropped host changes, and reset the world for a joiner's whole "
     "start-up."),
    ("0106", "worker-state", "elastic workers: one re-sync decision, failed inits retried, "
     "restores of the last commit",
     "What: every rank of a world takes one decision on re-syncing; a reset or a first init whose "
     "hvd.init fails is retried; a restore gives back the last commit (deep copies, the optimizer's "
     "state) however many failures came between. Why: stock Horovod hung a world at --min-np "
     "(horovod#3494), ended every survivor of a failed re-init, and restored state training had "
     "changed in place."),
]

# old patch number -> concern (index into CONCERNS by new number); per-file overrides below
DEFAULT = {
    "0001": "0105", "0002": "0105", "0003": "0105", "0004": "0105", "0005": "0101",
    "0006": "0105", "0007": "0105", "0008": "0105", "0009": "0105", "0010": "0105",
    "0011": "0105", "0012": "0106", "0013": "0106", "0014": "0103", "0015": "0103",
    "0016": "0103", "0017": "0103", "0018": "0105", "0019": "0105", "0020": "0105",
    "0023": "0102", "0024": "0105", "0025": "0105", "0026": "0105", "0027": "0103",
    "0028": "0102", "0029": "0105", "0030": "0105", "0031": "0105", "0032": "0105",
    "0033": "0105", "0034": "0105", "0035": "0105", "0036": "0105", "0037": "0102",
    "0038": "0102", "0039": "0102", "0040": "0106", "0041": "0105", "0042": "0106",
    "0043": "0104", "0044": "0104", "0045": "0106", "0046": "0105", "0047": "0105",
    "0048": "0106", "0049": "0105",
}
# (old patch, file) -> concern, where a patch spans concerns
FILE = {
    ("0003", "horovod/common/basics.py"): "0103",
    ("0003", "horovod/common/operations.cc"): "0103",
    ("0003", "horovod/common/operations.h"): "0103",
    ("0028", "horovod/runner/elastic/discovery.py"): "0105",
    ("0033", "horovod/common/gloo/gloo_context.cc"): "0103",
    ("0033", "horovod/common/gloo/gloo_context.h"): "0103",
    ("0033", "horovod/common/operations.h"): "0103",
    ("0049", "horovod/common/basics.py"): "0106",
    # its begin_reset() call sits in the retry loop old 0013 (0106) wrote around reset()
    ("0033", "horovod/common/elastic.py"): "0106",
}
# (old patch, file, a line of it, exactly) -> concern: single lines pinned elsewhere
LINE: dict[tuple[str, str, str], str] = {}


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
        self.text, self.ins, self.dele = text, ins, None


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


def main() -> int:
    old, new = Path(sys.argv[1]), Path(sys.argv[2])
    shas = git(old, "rev-list", "--reverse", "stock..HEAD").decode().split()
    # the old patches' numbers: the old series file, in order, one commit each
    series = [line for line in Path(sys.argv[3]).read_text().splitlines() if line and not line.startswith("#")]
    assert len(series) == len(shas), "the old series and the checkout differ"
    commits = [(sha, name[:4]) for sha, name in zip(shas, series, strict=True)]  # (sha, old number)
    files: dict[str, list[tuple[str, str]]] = {}
    for sha, num in commits:
        for path in git(old, "diff-tree", "--no-commit-id", "--name-only", "-r", sha).decode().split("\n"):
            if path:
                files.setdefault(path, []).append((sha, num))
    concern_of = {}
    for path, cs in files.items():
        for _sha, num in cs:
            concern_of[(num, path)] = FILE.get((num, path), DEFAULT[num])
    weaves = {path: weave(old, cs, path) for path, cs in files.items()}

    new.mkdir(parents=True)
    subprocess.run(f"git -C {old} archive stock | tar -x -C {new}", shell=True, check=True)
    git(new, "init", "-q")
    git(new, "add", "-A")
    git(new, "commit", "-q", "-m", "stock Horovod 0.28.1")
    git(new, "tag", "stock")
    order = [c[0] for c in CONCERNS]
    for k, (number, slug, title, body) in enumerate(CONCERNS):
        done = set(order[:k + 1])
        for path, w in weaves.items():
            def has(num: str | None, text: bytes, path: str = path, done: set[str] = done) -> bool:
                """Whether the change of old patch num to this line of path is in the tree."""
                if num is None:
                    return True
                c = LINE.get((num, path, text.decode(errors="replace").rstrip("\n")), concern_of[(num, path)])
                return c in done
            lines = [e.text for e in w if has(e.ins, e.text) and not (e.dele is not None and has(e.dele, e.text))]
            target = new / path
            existed = show(old, "stock", path) is not None
            if not lines and not existed and not any(has(e.ins, e.text) for e in w):
                if target.exists():
                    target.unlink()
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(b"".join(lines))
        held = []  # (sha, old number, its files here, its files in other patches)
        for sha, num in commits:
            parts = sorted(p for p in files if concern_of.get((num, p)) == number)
            if parts:
                others = sorted(p for p in files if (num, p) in concern_of and concern_of[(num, p)] != number)
                held.append((sha, num, parts, others))
        wrap = textwrap.TextWrapper(width=72, break_long_words=False, break_on_hyphens=False)
        olds = ", ".join(n for _, n, _, _ in held)
        lines_msg = [title, ""]
        if body:
            lines_msg += [*wrap.wrap(body), ""]
        lines_msg += wrap.wrap(f"Replaces the old patches {olds} of the eh9 series, regrouped by concern "
                               "(the tree the whole series gives is byte for byte the old one's). The fixes, "
                               "each by its old number:")
        lines_msg.append("")
        for sha, num, _, others in held:
            subject = git(old, "log", "-1", "--format=%s", sha).decode().strip()
            part = " (its changes to " + ", ".join(p for p in files if concern_of.get((num, p)) == number) \
                + " only)" if others else ""
            lines_msg += textwrap.wrap(f"- old {num}: {subject}{part}", width=72, subsequent_indent="  ",
                                       break_long_words=False, break_on_hyphens=False)
        lines_msg += ["", *wrap.wrap("Each old patch's own message (What, Why, how it was tested) follows, whole.")]
        for sha, num, parts, others in held:  # noqa: B007 (parts: the note below)
            msg = git(old, "log", "-1", "--format=%B", sha).decode().rstrip("\n")
            lines_msg += ["", "-" * 72, f"Old {num}: {msg}"]
            if others:
                lines_msg += ["", *wrap.wrap(f"(Old {num}'s changes to {', '.join(others)} are in another "
                                             f"patch of this series; here: {', '.join(parts)}.)")]
        git(new, "add", "-A")
        git(new, "commit", "-q", "--allow-empty", "-F", "-", input_="\n".join(lines_msg).encode() + b"\n")
        print(number, slug, olds, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
