"""Every process a test starts can be found again and ended, stopped ones included.

A job the tests start (horovodrun and its ranks, which patch 0102 puts in process groups of
their own, so a ``killpg`` of horovodrun's group misses them; a rank SIGSTOPped by a test
keeps a pending SIGTERM forever) carries a tag in its environment: ``tagged_env(env)``
returns a copy of ``env`` with ``ELASTIC_TEST_TAG=<unique>`` and the tag, and every
process started with it, and every process those start, inherits it. ``kill_tagged(tag)``
SIGKILLs each of them (SIGKILL ends a stopped process too) and waits until /proc shows none.

``SESSION_TAG`` is set in this process's environment at import (tests/conftest.py imports
this module), so every process any test starts from ``os.environ`` carries it; the session's
last fixture kills whatever still does: no test leaves a process behind, whatever it forgot.
"""
from __future__ import annotations

import itertools
import os
import signal
import time
from pathlib import Path

TAG_ENV = "ELASTIC_TEST_TAG"
SESSION_ENV = "ELASTIC_TEST_SESSION"
SESSION_TAG = f"{os.getpid()}-{time.time_ns()}"
os.environ[SESSION_ENV] = SESSION_TAG
_counter = itertools.count()


def tagged_env(env: dict[str, str]) -> tuple[dict[str, str], str]:
    """A copy of ``env`` with a new job tag, and the tag."""
    tag = f"{SESSION_TAG}-{next(_counter)}"
    return {**env, TAG_ENV: tag, SESSION_ENV: SESSION_TAG}, tag


def pids_with(name: str, value: str) -> list[int]:
    """Processes (other than this one) whose environment holds ``name=value``."""
    needle = f"{name}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def kill_with(name: str, value: str, timeout: float = 10.0) -> list[int]:
    """SIGKILLs every process whose environment holds ``name=value``, scanning again until
    none is left or ``timeout`` passed (a dying parent may start one more); returns the pids
    killed."""
    killed: list[int] = []
    deadline = time.monotonic() + timeout
    while True:
        pids = [p for p in pids_with(name, value) if not _zombie(p)]
        if not pids or time.monotonic() > deadline:
            return killed
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            killed.append(pid)
        time.sleep(0.05)


def kill_tagged(tag: str, timeout: float = 10.0) -> list[int]:
    """SIGKILLs every process of the job tagged ``tag``; the pids killed."""
    return kill_with(TAG_ENV, tag, timeout)


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")
