"""Progress of a ``dataset-sync`` run: per-host counters, their rendering, and a reporter thread.

``ProgressBoard`` is the thread-safe store the per-host workers update; ``snapshot()`` hands out
an immutable copy.  ``render_status_line`` and ``render_plain_lines`` are pure.
``ProgressReporter`` (explicit ``start()``/``stop()``) prints every ``interval`` seconds: on a
terminal one line rewritten in place (total, then each active host), otherwise plain lines
for the hosts whose counters moved since the last report, plus a total line.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import TextIO

from elastic.common.table import human_bytes

ACTIVE = ("waiting for lock", "connecting", "copying", "verifying", "committing", "retrying")


@dataclass(frozen=True)
class HostProgress:
    """One host: phase, bytes and files sent, files checked of the total."""

    phase: str = "waiting"
    bytes_sent: int = 0
    files_sent: int = 0
    checked: int = 0
    total: int = 0


class ProgressBoard:
    """Per-host progress shared between worker threads and the reporter."""

    def __init__(self, hosts: list[str], total_files: int, total_bytes: int) -> None:
        self._lock = threading.Lock()
        self._hosts = {h: HostProgress(total=total_files) for h in hosts}
        self.total_files = total_files
        self.total_bytes = total_bytes

    def update(self, host: str, **changes: object) -> None:
        """Replace some fields of ``host``'s progress."""
        with self._lock:
            self._hosts[host] = replace(self._hosts[host], **changes)

    def snapshot(self) -> dict[str, HostProgress]:
        with self._lock:
            return dict(self._hosts)


def _host_text(host: str, p: HostProgress) -> str:
    return f"{host} {p.phase} files {p.checked}/{p.total} sent {p.files_sent} files {human_bytes(p.bytes_sent)}"


def render_total(snapshot: dict[str, HostProgress]) -> str:
    """``total: D/N hosts done, F failed, X sent``."""
    done = sum(1 for p in snapshot.values() if p.phase == "done")
    failed = sum(1 for p in snapshot.values() if p.phase == "failed")
    sent = sum(p.bytes_sent for p in snapshot.values())
    files = sum(p.files_sent for p in snapshot.values())
    return f"total: {done}/{len(snapshot)} hosts done, {failed} failed, {files} files {human_bytes(sent)} sent"


def render_status_line(snapshot: dict[str, HostProgress], width: int = 160) -> str:
    """The one-line terminal status, cut to ``width`` characters."""
    parts = [render_total(snapshot)]
    parts += [_host_text(h, p) for h, p in snapshot.items() if p.phase in ACTIVE]
    line = " | ".join(parts)
    return line if len(line) <= width else line[: max(0, width - 3)] + "..."


def render_plain_lines(snapshot: dict[str, HostProgress], previous: dict[str, HostProgress]) -> list[str]:
    """Plain progress lines for hosts that changed since ``previous`` (empty if nothing did)."""
    lines = [f"progress: {_host_text(h, p)}" for h, p in snapshot.items() if previous.get(h) != p]
    if lines:
        lines.append(f"progress: {render_total(snapshot)}")
    return lines


class ProgressReporter:
    """Prints the board periodically to ``stream`` between ``start()`` and ``stop()``."""

    def __init__(self, board: ProgressBoard, stream: TextIO, interval: float = 1.0, tty: bool | None = None) -> None:
        self._board = board
        self._stream = stream
        self._interval = interval
        self._tty = stream.isatty() if tty is None else tty
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: dict[str, HostProgress] = {}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="dataset-sync-progress", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and print the final state (blocks until the thread is gone)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._emit()
        if self._tty:
            self._stream.write("\n")
            self._stream.flush()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._emit()

    def _emit(self) -> None:
        snap = self._board.snapshot()
        if self._tty:
            self._stream.write("\r\x1b[K" + render_status_line(snap))
        else:
            for line in render_plain_lines(snap, self._last):
                self._stream.write(line + "\n")
        self._last = snap
        self._stream.flush()
