"""The fence of a leading launcher: the moment its leadership ends, it stops acting on the job.

A leader leads until ``elector.valid_until`` (the renew deadline after the start of its last
successful write to the Lease, by the monotonic clock: ``elastic.leader.rules``). A leader that
was paused past that moment (SIGSTOP, a VM pause, a frozen node) and woke up, or that could
not renew in time, or that read the Lease held by another launcher, must not touch the
workers, the rendezvous or the checkpoint: another launcher may lead the job by now. So
``Fence.trip`` does, in this order and nothing else:

1. SIGKILL to every process group it was told of (``watch(pgid)``: horovodrun's session, so
   hvdrun never runs its own stop-and-reap, which would reach the hosts);
2. SIGKILL to every remaining descendant of this process (the discovery daemon and its
   prepare hooks, which reap and sync hosts; ssh clients; steps);
3. one line on stderr, ``elastic-run: fenced: no longer the leader of job <id>: <why>; ended
   its processes without touching the workers, the rendezvous or the checkpoint``;
4. ``os._exit(EXIT_FENCED)``: no clean-up (the clean-up reaps hosts), no report.

With ``valid_until_file``, the fence also writes ``valid_until`` there (by ``time.monotonic()``,
temp + rename) before ``start`` returns and whenever the watchdog sees it renewed: horovodrun
reads it through ``ELASTIC_LEADER_VALID_UNTIL`` and does not act on the workers past it
(``elastic.driver.leading``), since on a wake from a pause its threads run in the same
moments as this fence.

``Fence(elector, job_id)``; ``start()`` starts two threads: the renewer (``elector.renew``: a
round every retry period) and the watchdog, which trips once the clock passes ``valid_until``
-- it needs no I/O, so a leader that wakes from a pause is fenced before a request of its
could be answered. ``stop()`` ends both without tripping (the job is over). ``check()``
trips at once if leadership is already gone (a caller about to act calls it first).
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from elastic.leader.elector import LeaseElector
from shared.exitcodes import EXIT_FENCED
from shared.worker import Worker

log = logging.getLogger("elastic.run")
WATCH_INTERVAL = 0.25  # the watchdog's longest sleep: it also wakes at valid_until


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` (from /proc; the parent before its children)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _kill(pid: int, group: bool = False) -> None:
    try:
        (os.killpg if group else os.kill)(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class Fence:
    """Ends this launcher's part in the job once its leadership is gone (module docstring)."""

    def __init__(self, elector: LeaseElector, job_id: str, *,
                 clock: Callable[[], float] = time.monotonic, exit: Callable[[int], None] = os._exit,
                 valid_until_file: Path | None = None) -> None:
        self.elector = elector
        self.job_id = job_id
        self.valid_until_file = valid_until_file
        self._published: float | None = None
        self.clock = clock
        self._exit = exit
        self._groups: list[int] = []
        self._lock = threading.Lock()
        self._tripped = False
        self._renewer = Worker(self._renew, "lease-renewer")
        self._watchdog = Worker(self._watch, "lease-watchdog")

    def start(self) -> None:
        self._publish()
        self._renewer.start()
        self._watchdog.start()

    def stop(self) -> None:
        """End both threads without tripping; waits for them (a renewal takes one request)."""
        self._watchdog.stop(timeout=5.0)
        self._renewer.stop(timeout=5.0)

    def watch(self, pgid: int) -> None:
        """Also SIGKILL the process group ``pgid`` when tripped (horovodrun's session)."""
        with self._lock:
            self._groups.append(pgid)
        self.check()

    def check(self) -> None:
        """Trip now if this launcher no longer leads."""
        if not self.elector.leading():
            self.trip()

    def _renew(self) -> None:
        self.elector.renew(self._renewer.stopping)
        if not self._renewer.stopping.is_set():
            self.trip()

    def _publish(self) -> None:
        """Write ``valid_until`` to ``valid_until_file`` when it changed (module docstring)."""
        until = self.elector.valid_until
        if self.valid_until_file is None or until is None or until == self._published:
            return
        tmp = self.valid_until_file.with_name(f".{self.valid_until_file.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(f"{until!r}\n", encoding="ascii")
            os.replace(tmp, self.valid_until_file)
        except OSError as exc:  # horovodrun then reads an earlier end: it stops acting sooner
            log.warning("cannot write the leadership's end to %s: %s", self.valid_until_file, exc)
            return
        self._published = until

    def _watch(self) -> None:
        stopping = self._watchdog.stopping
        while not stopping.is_set():
            self._publish()
            until = self.elector.valid_until
            now = self.clock()
            if until is None or now >= until:
                if not stopping.is_set():
                    self.trip()
                return
            stopping.wait(min(WATCH_INTERVAL, until - now))

    def trip(self) -> None:
        """Kill, say why, exit ``EXIT_FENCED`` (module docstring). Once; never returns."""
        with self._lock:
            if self._tripped:
                return
            self._tripped = True
            for pgid in self._groups:
                _kill(pgid, group=True)
            for _ in range(3):  # a process forked while we killed its parent
                left = descendants(os.getpid())
                if not left:
                    break
                for pid in left:
                    _kill(pid)
            reason = self.elector.lost_reason()
            try:
                sys.stderr.write(f"elastic-run: fenced: no longer the leader of job {self.job_id}: {reason}; "
                                 "ended its processes without touching the workers, the rendezvous or the "
                                 "checkpoint\n")
                sys.stderr.flush()
            finally:
                self._exit(EXIT_FENCED)
