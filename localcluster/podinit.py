"""A pod's init without namespaces: ``python -m localcluster.podinit CMD...``.

Used by the kubelet's non-root fallback (``isolation="none"``). It makes itself a child
subreaper (``PR_SET_CHILD_SUBREAPER``), so every process the pod starts -- also one that a
``nohup ... &`` over SSH leaves behind -- stays below it, where the kubelet can find it. It runs
CMD, reaps every child, forwards SIGTERM/SIGINT to CMD, and exits with CMD's status once CMD has
exited (the kubelet stops the rest first).
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

from shared.exitcodes import EXIT_FAILURE, EXIT_USAGE, exit_for_returncode

PR_SET_CHILD_SUBREAPER = 36


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("error: usage: python -m localcluster.podinit CMD [ARGS...]", file=sys.stderr)
        return EXIT_USAGE
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print(f"error: prctl(PR_SET_CHILD_SUBREAPER) failed: errno {ctypes.get_errno()}", file=sys.stderr)
        return EXIT_FAILURE
    try:
        child = subprocess.Popen(argv)
    except OSError as exc:
        print(f"error: cannot run {argv[0]}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, _f: child.send_signal(s))
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return EXIT_FAILURE
        except InterruptedError:
            continue
        if pid == child.pid:
            child.returncode = os.waitstatus_to_exitcode(status)
            return exit_for_returncode(child.returncode)


if __name__ == "__main__":
    sys.exit(main())
