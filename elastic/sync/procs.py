"""Child processes of ``dataset-sync`` that cannot outlive it.

``tied_popen(argv, **kw)`` starts ``argv`` (no shell) in a process group of its own (a
terminal's Ctrl-C reaches ``dataset-sync``, which cancels; ``kill_group`` ends the child and
whatever it started, e.g. rsync's ssh) and, on Linux, with ``PR_SET_PDEATHSIG`` = SIGKILL:
when the thread that started it dies -- ``dataset-sync`` killed with ``kill -9`` included --
the kernel kills the child, so no local rsync keeps copying for a run that is gone. The
remote side is ended by the next run (``remote.probe_script`` ends every stale writer).
Returns the ``subprocess.Popen``; raises ``OSError`` as ``Popen`` does.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1

try:
    _libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
    _prctl = _libc.prctl if _libc is not None else None
except (OSError, AttributeError):  # pragma: no cover - not Linux
    _prctl = None


def _die_with_parent(parent: int) -> None:
    """Runs in the child between fork and exec: no locks, no allocation-heavy work."""
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def tied_popen(argv: list[str], **kwargs) -> subprocess.Popen:
    """``subprocess.Popen(argv, **kwargs)`` in its own process group, killed with its parent."""
    parent = os.getpid()
    return subprocess.Popen(argv, start_new_session=True, preexec_fn=lambda: _die_with_parent(parent),
                            **kwargs)


def kill_group(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    """Send ``sig`` to ``proc``'s process group (``proc`` alone if it leads none); never raises."""
    try:
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
    except (ProcessLookupError, PermissionError):
        pass
