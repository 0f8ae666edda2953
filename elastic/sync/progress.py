"""Progress of a ``dataset-sync`` run: per-host counters, their rendering, and a reporter thread.

``ProgressBoard`` is the thread-safe store the per-host workers update; ``snapshot()`` hands out
an immutable copy.  ``render_status_line``, ``render_plain_lines`` and ``bar_rows`` are pure.
``ProgressReporter`` (explicit ``start()``/``stop()``) reports every ``interval`` seconds: on a
terminal as progress bars drawn by ``rich`` (one for the total -- hosts done of all -- and one
per host: files checked of the dataset's files, with its phase, e.g. ``waiting for lock``, and
bytes sent), otherwise as plain lines for the hosts whose counters moved since the last
report, plus a total line.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TextIO

from elastic.common.table import human_bytes
from shared.worker import Worker

if TYPE_CHECKING:  # rich is imported only when bars are drawn
    from rich.progress import TaskID

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

    def update(self, host: str, *, phase: str | None = None, bytes_sent: int | None = None,
               files_sent: int | None = None, checked: int | None = None, total: int | None = None) -> None:
        """Replace the given fields of ``host``'s progress; a field left None keeps its value."""
        with self._lock:
            old = self._hosts[host]
            self._hosts[host] = replace(
                old,
                phase=old.phase if phase is None else phase,
                bytes_sent=old.bytes_sent if bytes_sent is None else bytes_sent,
                files_sent=old.files_sent if files_sent is None else files_sent,
                checked=old.checked if checked is None else checked,
                total=old.total if total is None else total)

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


@dataclass(frozen=True)
class BarRow:
    """One progress bar: its label, how far it is of how much, and the text beside it."""

    label: str
    completed: int
    total: int
    detail: str


TOTAL_LABEL = "total"


def bar_rows(snapshot: dict[str, HostProgress]) -> list[BarRow]:
    """The bars for a snapshot (pure): the total (hosts finished of all), then one per host
    (files checked of the dataset's; complete when done, whatever was sent)."""
    finished = sum(1 for p in snapshot.values() if p.phase in ("done", "failed"))
    failed = sum(1 for p in snapshot.values() if p.phase == "failed")
    sent = sum(p.bytes_sent for p in snapshot.values())
    rows = [BarRow(TOTAL_LABEL, finished, max(1, len(snapshot)),
                   f"{finished}/{len(snapshot)} hosts, {failed} failed, {human_bytes(sent)} sent")]
    for host, p in snapshot.items():
        total = max(1, p.total)
        completed = total if p.phase == "done" else min(p.checked, total)
        rows.append(BarRow(host, completed, total,
                           f"{p.phase}, {p.checked}/{p.total} files, {human_bytes(p.bytes_sent)} sent"))
    return rows


class _Bars:
    """rich progress bars on a terminal (``update(rows)``, ``close()``)."""

    def __init__(self, stream: TextIO) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        console = Console(file=stream, force_terminal=True, stderr=False)
        self._progress = Progress(TextColumn("[bold]{task.description:>15}"), BarColumn(), MofNCompleteColumn(),
                                  TextColumn("{task.fields[detail]}"), TimeElapsedColumn(),
                                  console=console, auto_refresh=False, redirect_stdout=False,
                                  redirect_stderr=False)
        self._tasks: dict[str, TaskID] = {}
        self._progress.start()

    def update(self, rows: list[BarRow]) -> None:
        for row in rows:
            if row.label not in self._tasks:
                self._tasks[row.label] = self._progress.add_task(row.label, total=row.total, detail=row.detail)
            self._progress.update(self._tasks[row.label], completed=row.completed, total=row.total,
                                  detail=row.detail)
        self._progress.refresh()

    def close(self) -> None:
        self._progress.stop()


class ProgressReporter:
    """Reports the board periodically to ``stream`` between ``start()`` and ``stop()``: bars
    on a terminal, plain lines otherwise (``tty`` overrides ``stream.isatty()``)."""

    def __init__(self, board: ProgressBoard, stream: TextIO, interval: float = 1.0, tty: bool | None = None) -> None:
        self._board = board
        self._stream = stream
        self._interval = interval
        self._tty = stream.isatty() if tty is None else tty
        self._worker = Worker(self._run, "dataset-sync-progress")
        self._stop = self._worker.stopping
        self._last: dict[str, HostProgress] = {}
        self._bars: _Bars | None = None

    def start(self) -> None:
        """Start reporting (a background thread; on a terminal the bars appear at once)."""
        if self._tty:
            self._bars = _Bars(self._stream)
            self._emit()
        self._worker.start()

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop the thread (waits up to ``timeout``: ``shared.worker``) and print the final
        state; raises what ended the thread, if anything did."""
        self._worker.stop(timeout)
        self._emit()
        if self._bars is not None:
            self._bars.close()
            self._bars = None

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._emit()

    def _emit(self) -> None:
        snap = self._board.snapshot()
        if self._bars is not None:
            self._bars.update(bar_rows(snap))
        elif not self._tty:
            for line in render_plain_lines(snap, self._last):
                self._stream.write(line + "\n")
            self._stream.flush()
        self._last = snap
