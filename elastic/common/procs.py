"""Child processes that cannot outlive the process that started them.

- ``tied_popen(argv, death_signal=SIGKILL, new_session=True, **kw)`` starts ``argv`` (no shell)
  and, on Linux, with ``PR_SET_PDEATHSIG`` = ``death_signal``: when the thread that started
  it dies -- its process killed with ``kill -9`` included -- the kernel sends the child that
  signal, so no helper keeps running for a run that is gone. With ``new_session`` (the
  default) the child leads a process group of its own (a terminal's Ctrl-C reaches only the
  parent, which decides; ``kill_group`` ends the child and whatever it started). Returns the
  ``subprocess.Popen``; raises ``OSError`` as ``Popen`` does. Start children from a thread
  that lives as long as they should (the main thread, or the thread that waits for them).
- ``tied_run(argv, timeout=None, **kw)``: ``subprocess.run`` on a ``tied_popen`` child in the
  caller's process group (``new_session=False``); on a timeout or any exception (a signal
  handler's) the child is killed before the exception propagates.
- ``tie_to_parent(death_signal, parent=None)``: the calling process itself gets
  ``death_signal`` when its parent dies (for a command started by a program that does not
  tie its children, e.g. the discovery daemon's prepare hook). False when not on Linux, or
  when ``parent`` (a pid) is given and is no longer the parent (it died before the call: the
  caller should exit). Without ``parent`` a parent that died just before the call goes
  unnoticed.
- ``kill_group(proc, sig)``: ``sig`` to ``proc``'s process group (``proc`` alone if it leads
  none); never raises.

Users: ``dataset-sync``'s rsync (``elastic.sync.rsync``), and everything ``elastic-run``
starts (``elastic.launch``: the discovery daemon, horovodrun, ssh-bootstrap, dataset-sync,
the reaping ssh; ``elastic.prepare.hook``'s steps; ``elastic.ssh.exec``'s ssh clients).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

from shared.exitcodes import EXIT_FAILURE

PR_SET_PDEATHSIG = 1

try:
    _libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
    _prctl = _libc.prctl if _libc is not None else None
except (OSError, AttributeError):  # pragma: no cover - not Linux
    _prctl = None


def _die_with_parent(parent: int, death_signal: int) -> None:
    """Runs in the child between fork and exec: no locks, no allocation-heavy work."""
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, int(death_signal), 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(EXIT_FAILURE)


def tied_popen(argv: list[str], *, death_signal: int = signal.SIGKILL, new_session: bool = True,
               **kwargs) -> subprocess.Popen:
    """``subprocess.Popen(argv, **kwargs)`` that gets ``death_signal`` when its parent dies,
    in its own process group unless ``new_session`` is False (see the module docstring)."""
    parent = os.getpid()
    return subprocess.Popen(argv, start_new_session=new_session,
                            preexec_fn=lambda: _die_with_parent(parent, death_signal), **kwargs)


def tied_run(argv: list[str], *, timeout: float | None = None, input: bytes | str | None = None,
             death_signal: int = signal.SIGKILL, **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run(argv, ...)`` on a tied child (see the module docstring); raises
    ``subprocess.TimeoutExpired`` and ``OSError`` as ``subprocess.run`` does."""
    if kwargs.pop("capture_output", False):
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    with tied_popen(argv, death_signal=death_signal, new_session=False, **kwargs) as proc:
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def tie_to_parent(death_signal: int = signal.SIGKILL, parent: int | None = None) -> bool:
    """The calling process gets ``death_signal`` when its parent dies (see the module docstring)."""
    if _prctl is None or _prctl(PR_SET_PDEATHSIG, int(death_signal), 0, 0, 0) != 0:
        return False
    return parent is None or os.getppid() == parent


def kill_group(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    """Send ``sig`` to ``proc``'s process group (``proc`` alone if it leads none); never raises."""
    try:
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
    except (ProcessLookupError, PermissionError):
        pass
