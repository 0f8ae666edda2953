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
from collections.abc import Sequence
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
    ("0105", "driver-events", "elastic driver: host changes kept until acted on, discovery that "
     "wakes the driver and has a timeout, an events file",
     "What: a host change is kept until the coordinator has acted on it; a HostDiscovery can wake the "
     "driver; the discovery script runs with a timeout; the driver appends its events to a file and "
     "the workers report their commits; the rendezvous server closes its socket on stop. Why: stock "
     "Horovod dropped host changes a busy coordinator missed, polled discovery only, let a hung "
     "discovery script stop it, and left no record of what the driver did."),
    ("0106", "aborts-leaves", "elastic driver: a lost worker's world aborted at once, every request "
     "with a deadline, graceful leaves",
     "What: when a worker is gone the driver aborts its world's collectives (an abort that names its "
     "world and lands nowhere else); every request between the driver and a worker has a deadline; "
     "the workers of a host that left discovery are given up after the leave grace, unless they said "
     "they are leaving (SIGTERM); a worker tells the driver when its run ended. Why: stock Horovod's "
     "survivors waited out the Gloo timeout for a lost peer, and one frozen worker could hang the "
     "driver's requests."),
    ("0107", "joins", "elastic driver: spawn first, notify later: joiners start while the world "
     "trains; a new process for an ended slot",
     "What: a joining slot's worker starts at once and the coordinator is told only when it waits at "
     "the rendezvous; a joiner taken in at --min-np keeps its deadline and its world waits for it "
     "outside Gloo; a slot whose process ended gets a new one when its host comes back. Why: stock "
     "Horovod reset the world for a joiner's whole start-up (seconds to minutes of no training)."),
    ("0108", "failure-detection", "elastic driver: failures found in seconds: liveness without a "
     "cascade, quarantine, a barrier deadline that judges progress",
     "What: a worker that stops answering is lost at its liveness deadline (pings on their own lane, "
     "one loss decision per check, a stalled driver or a silent majority loses nobody); a lost host "
     "is quarantined with probation; a readiness flap within the leave grace reaches no worker; the "
     "registration barrier's deadline judges progress; a ready joiner waits for starting siblings at "
     "most a bound; the events file and progress reports are bounded; a worker in its first init is "
     "told of its world's abort. Why: stock Horovod found a frozen or vanished worker only by a "
     "Gloo or ssh timeout, and one slow node could cascade into losing healthy ones."),
    ("0109", "worker-state", "elastic workers: one re-sync decision, failed inits retried, "
     "restores of the last commit",
     "What: every rank of a world takes one decision on re-syncing; a reset or a first init whose "
     "hvd.init fails is retried; a restore gives back the last commit (deep copies, the optimizer's "
     "state) however many failures came between. Why: stock Horovod hung a world at --min-np "
     "(horovod#3494), ended every survivor of a failed re-init, and restored state training had "
     "changed in place."),
]

# old patch number -> concern (index into CONCERNS by new number); per-file overrides below
DEFAULT = {
    "0001": "0105", "0002": "0105", "0003": "0106", "0004": "0105", "0005": "0101",
    "0006": "0106", "0007": "0106", "0008": "0108", "0009": "0108", "0010": "0106",
    "0011": "0106", "0012": "0109", "0013": "0109", "0014": "0103", "0015": "0103",
    "0016": "0103", "0017": "0103", "0018": "0108", "0019": "0105", "0020": "0107",
    "0023": "0102", "0024": "0105", "0025": "0108", "0026": "0108", "0027": "0103",
    "0028": "0102", "0029": "0108", "0030": "0108", "0031": "0108", "0032": "0108",
    "0033": "0108", "0034": "0108", "0035": "0107", "0036": "0108", "0037": "0102",
    "0038": "0102", "0039": "0102", "0040": "0109", "0041": "0108", "0042": "0109",
    "0043": "0104", "0044": "0104", "0045": "0109", "0046": "0108", "0047": "0107",
    "0048": "0109", "0049": "0108",
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
    ("0049", "horovod/common/basics.py"): "0109",
    # its begin_reset() call sits in the retry loop old 0013 (0109) wrote around reset()
    ("0033", "horovod/common/elastic.py"): "0109",
    # horovodrun's check of the driver's timeouts from the environment (old 0011's, extended by
    # 0020, 0024, 0031, 0032 and 0036) is one statement list: it comes whole with 0108
    ("0020", "horovod/runner/launch.py"): "0108",
    ("0024", "horovod/runner/launch.py"): "0108",
    ("0036", "horovod/runner/launch.py"): "0108",
}
# (old patch, file, a line of it, exactly) -> concern: single lines pinned elsewhere; a text
# with newlines pins a run of lines (consecutive among those the old patch changes in the file)
LINE: dict[tuple[str, str, str], str] = {
    # old 0008's "done" report (a worker whose run ended is left alone) is what old 0010/0011
    # (0106) build on: it comes with 0106, the rest of old 0008 with 0108; its seconds_from_env
    # (the driver's timeouts from the environment) with 0105, whose discovery timeout uses it
    ("0008", "horovod/runner/elastic/worker.py",
     "        if not self._listeners and self._rendezvous is not None:\n"
     "            # hvd.elastic.run has ended (returned or raised): the process exits next, and\n"
     "            # while Python shuts down the service may not answer the driver's pings\n"
     "            addr, port, key = self._rendezvous\n"
     "            try:\n"
     "                put_data_into_kvstore(addr, port, PUT_WORKER_DONE, key, True, timeout=NOTIFY_TIMEOUT_SECS)\n"
     "            except Exception:\n"
     "                pass"): "0106",
    ("0008", "horovod/runner/elastic/worker.py",
     "from horovod.runner.elastic.rendezvous import PUT_WORKER_ADDRESSES, PUT_WORKER_PROGRESS"): "0106",
    ("0008", "horovod/runner/elastic/rendezvous.py",
     "PUT_WORKER_DONE = 'worker_done'"): "0106",
    ("0008", "horovod/runner/elastic/rendezvous.py",
     "            if scope == PUT_WORKER_DONE:\n"
     "                host, local_rank = key.split(':')\n"
     "                driver.record_done(host, int(local_rank))"): "0106",
    ("0008", "horovod/runner/elastic/driver.py",
     "\n"
     "    def record_done(self, host, slot):\n"
     "        \"\"\"The worker at (host, slot) has ended its hvd.elastic.run function and exits next:\n"
     "        the liveness check leaves it alone (a process shutting down may not answer).\"\"\"\n"
     "        with self._workers_lock:\n"
     "            worker = self._workers.get((host, slot))\n"
     "            if worker is not None:\n"
     "                worker.done = True"): "0106",
    ("0008", "horovod/runner/elastic/driver.py",
     "\n"
     "\n"
     "def seconds_from_env(name, default, minimum=0.0):\n"
     "    \"\"\"The number of seconds in the environment variable name (default when unset or empty);\n"
     "    raises ValueError with a one-line message when it is not a number >= minimum.\"\"\"\n"
     "    value = os.environ.get(name, '').strip()\n"
     "    if not value:\n"
     "        return default\n"
     "    try:\n"
     "        seconds = float(value)\n"
     "    except ValueError:\n"
     "        seconds = float('nan')\n"
     "    if not seconds >= minimum or seconds == float('inf'):\n"
     "        raise ValueError('{}={!r}: expected a number of seconds >= {:g}'.format(name, value, minimum))\n"
     "    return seconds"): "0105",
    # old 0011's check of the timeouts from the environment names old 0008's and 0009's (0108)
    ("0011", "horovod/runner/launch.py",
     "    if _is_elastic(args):\n"
     "        # the elastic driver's timeouts from the environment: a bad one is a usage error\n"
     "        from horovod.runner.elastic.driver import HOROVOD_ELASTIC_LEAVE_GRACE_SECONDS, \\\n"
     "            HOROVOD_ELASTIC_LIVENESS_TIMEOUT_SECONDS, seconds_from_env\n"
     "        from horovod.runner.elastic.registration import HOROVOD_ELASTIC_BARRIER_DEADLINE_SECONDS\n"
     "        names = [HOROVOD_ELASTIC_LIVENESS_TIMEOUT_SECONDS, HOROVOD_ELASTIC_BARRIER_DEADLINE_SECONDS]\n"
     "        if args.elastic_leave_grace is None:\n"
     "            names.append(HOROVOD_ELASTIC_LEAVE_GRACE_SECONDS)\n"
     "        for name in names:\n"
     "            try:\n"
     "                seconds_from_env(name, 0.0)\n"
     "            except ValueError as e:\n"
     "                parser.error(str(e))\n"
     ""): "0108",
    # the event of old 0003's abort (0106)
    ("0004", "horovod/runner/elastic/driver.py",
     "        self._events.emit('abort', reason=reason, workers=len(targets))"): "0106",
}


def git(repo: Path, *args: str, input_: bytes | None = None) -> bytes:
    env = dict(os.environ, GIT_AUTHOR_NAME="elastic-horovod", GIT_AUTHOR_EMAIL="elastic-horovod@localhost",
               GIT_COMMITTER_NAME="elastic-horovod", GIT_COMMITTER_EMAIL="elastic-horovod@localhost",
               GIT_AUTHOR_DATE="2000-01-01T00:00:00Z", GIT_COMMITTER_DATE="2000-01-01T00:00:00Z")
    return subprocess.run(["git", "-C", str(repo), *args], input=input_, env=env, check=True,
                          capture_output=True).stdout


def extract(repo: Path, rev: str, dest: Path, paths: Sequence[str] = ()) -> None:
    """``rev``'s tree (only ``paths`` if given) written under ``dest``: ``git archive`` into
    ``tar``, as argv lists (no shell)."""
    archive = git(repo, "archive", rev, "--", *paths)
    subprocess.run(["tar", "--no-same-owner", "-x", "-C", str(dest)], input=archive, check=True)


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


def line_concerns(path: str, w: list[Entry], concern_of: dict[tuple[str, str], str]
                  ) -> tuple[list[str | None], list[str | None]]:
    """For every line of a file's weave the concern that inserts it and the one that deletes it
    (None: stock; not deleted): the old patch's (FILE, DEFAULT), unless LINE pins it. A LINE key
    with newlines pins a run of lines: consecutive among the lines that old patch inserts or
    deletes in the file (so blank lines and repeated ones can be pinned by their block)."""
    def text(e: Entry) -> str:
        return e.text.decode(errors="replace").rstrip("\n")
    ins_c = [None if e.ins is None else LINE.get((e.ins, path, text(e)), concern_of[(e.ins, path)]) for e in w]
    del_c = [None if e.dele is None else LINE.get((e.dele, path, text(e)), concern_of[(e.dele, path)]) for e in w]
    for (num, p, block), c in LINE.items():
        if p != path or "\n" not in block:
            continue
        want = block.split("\n")
        touched = [k for k, e in enumerate(w) if num in (e.ins, e.dele)]
        runs = [touched[j:j + len(want)] for j in range(len(touched) - len(want) + 1)
                if [text(w[k]) for k in touched[j:j + len(want)]] == want]
        assert len(runs) == 1, f"LINE block of old {num} in {path} found {len(runs)} times: {want[0]!r}"
        for k in runs[0]:
            if w[k].ins == num:
                ins_c[k] = c
            if w[k].dele == num:
                del_c[k] = c
    return ins_c, del_c


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
    extract(old, "stock", new)
    git(new, "init", "-q")
    git(new, "add", "-A")
    git(new, "commit", "-q", "-m", "stock Horovod 0.28.1")
    git(new, "tag", "stock")
    order = [c[0] for c in CONCERNS]
    # (old patch, file) -> the concerns LINE pins some of its lines to
    pinned = {(n, p): {c for (n2, p2, _), c in LINE.items() if (n2, p2) == (n, p)} for n, p in concern_of}
    for k, (number, slug, title, body) in enumerate(CONCERNS):
        done = set(order[:k + 1])
        for path, w in weaves.items():
            ins_c, del_c = line_concerns(path, w, concern_of)

            def alive(i: int, done: set[str] = done, ins_c: list = ins_c, del_c: list = del_c) -> bool:
                """Whether weave line k is in the tree: inserted by stock or a concern done, and
                not deleted by one."""
                return (ins_c[i] is None or ins_c[i] in done) and not (del_c[i] is not None and del_c[i] in done)
            lines = [e.text for i, e in enumerate(w) if alive(i)]
            inserted = any(c is None or c in done for c in ins_c)
            target = new / path
            existed = show(old, "stock", path) is not None
            if not lines and not existed and not inserted:
                if target.exists():
                    target.unlink()
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(b"".join(lines))
        held = []  # (sha, old number, its files here, its files in other patches)

        def label(num: str, p: str) -> str:
            """p, with "(some lines)" when old num's lines in p are split between patches by LINE."""
            return p + " (some lines)" if pinned[(num, p)] - {concern_of[(num, p)]} else p
        for sha, num in commits:
            parts = sorted(label(num, p) for p in files if (num, p) in concern_of
                           and number in {concern_of[(num, p)], *pinned[(num, p)]})
            if parts:
                others = sorted(label(num, p) for p in files if (num, p) in concern_of
                                and {concern_of[(num, p)], *pinned[(num, p)]} - {number})
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
            mine = [label(num, p) for p in files if (num, p) in concern_of
                    and number in {concern_of[(num, p)], *pinned[(num, p)]}]  # in the files' order
            part = " (its changes to " + ", ".join(mine) + " only)" if others else ""
            lines_msg += textwrap.wrap(f"- old {num}: {subject}{part}", width=72, subsequent_indent="  ",
                                       break_long_words=False, break_on_hyphens=False)
        lines_msg += ["", *wrap.wrap("Each old patch's own message (What, Why, how it was tested) follows, whole.")]
        for sha, num, parts, others in held:
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
