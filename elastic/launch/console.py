"""What a user reads during a run: horovodrun's output, relayed by ``elastic-run``.

horovodrun prefixes every line a rank writes with ``[RANK]<stdout>:`` or ``[RANK]<stderr>:``.
Two kinds of those lines are not for a person to read as they are:

- the training's metrics records (``shared.metrics_record``: one JSON object per line with
  an ``event`` of ``progress`` or ``epoch``). Their raw form stays in the metrics file the
  training writes (``--metrics-file``); here they feed a compact view instead;
- Horovod's C++ ``E ... Horovod background loop uncaught exception: aborted[: REASON]``: the
  background loop leaving an aborted collective, which is how every surviving rank hears
  that a peer is gone (the patched driver aborts the collectives when a worker or host
  leaves), with its companions ``W ... Horovod: a Gloo collective failed; aborting ...`` and
  ``W ... Horovod: aborting collective operations ...``. It is expected and handled (the job
  resets), so it is one info line per abort (``EXPECTED_ABORT_TEXT`` and the reason), not
  three error and warning lines per rank; the companions are logged at debug level. The
  same loop leaving on a Gloo transport error (``... uncaught exception: [.../gloo/transport/
  tcp/pair.cc:630] Read error ...: Connection reset by peer``) is the same news, heard
  first from the dead peer's socket when a process is killed hard: it is the same info line,
  its reason ``BROKEN_REASON`` and Gloo's message.

Every other line passes through unchanged, stdout to stdout and stderr to stderr, but for a
rank's empty stderr lines (what ssh's CR LF leaves after a host is killed).

- ``classify(line)`` (pure): one horovodrun line -> ``Line(kind, rank, text, record, reason)``,
  ``kind`` one of ``metrics``, ``abort``, ``aborting`` (a companion), ``blank`` (a rank's
  empty stderr line), ``text``.
- ``View`` (pure): folds metrics records in; ``status()`` is the one-line live view (world
  size, epoch and step, samples/s, loss, last event: a world size change, an epoch's end, an
  abort); ``observe`` returns the events worth a line of their own (epoch ends: the training
  and the timeline already name each world size).
- ``Relay(out, err, tty)``: ``attach(stdout_pipe, stderr_pipe)`` reads both pipes in two
  ``shared.worker`` threads until EOF; ``close(timeout)`` waits for them. On a terminal
  (``tty``, default ``out.isatty()``) the view is one status line on ``out``, redrawn in
  place (plain ANSI: carriage return and erase-line) with the passing lines printed above
  it; otherwise a plain progress line on ``out`` when the world size changes or an epoch
  ends, and at most every ``plain_every`` seconds between.
"""
from __future__ import annotations

import functools
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, TextIO

from shared.metrics_record import MetricsRecord, parse_line
from shared.worker import Worker

log = logging.getLogger("elastic.run")

# horovodrun's prefix, optionally after --prefix-output-with-timestamp's asctime
_PREFIX = re.compile(r"^(?:\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4})?\[(\d+)\]<(stdout|stderr)>:(.*)$", re.S)
ABORT_TEXT = "Horovod background loop uncaught exception: aborted"
_ABORT = re.compile(re.escape(ABORT_TEXT) + r"(?::\s*(.*))?$")
# the same loop leaving on a Gloo transport error: a peer's process died (a hard kill, a pod
# deleted) and its connection reset or closed before the driver's abort reached this rank
_BROKEN = re.compile(r"Horovod background loop uncaught exception: \[[^\]]*/gloo/transport/[^\]]*\]\s*(.*)$")
BROKEN_REASON = "a peer's connection broke: "
_ABORTING = ("Horovod: a Gloo collective failed; aborting", "Horovod: aborting collective operations")
EXPECTED_ABORT_TEXT = "collectives aborted, expected after a peer left; Horovod resets the world"
_ERASE = "\r\x1b[K"
_BREAK = re.compile(r"\r\n?")


@dataclass(frozen=True)
class Line:
    """One classified line: ``kind`` is ``metrics``, ``abort``, ``aborting``, ``blank`` or ``text``;
    ``rank`` is None for a line without horovodrun's prefix; ``record`` the metrics record
    (``metrics`` only); ``reason`` what the abort names (``abort`` only, may be empty)."""

    kind: str
    rank: int | None
    text: str
    record: MetricsRecord | None = None
    reason: str = ""


def classify(line: str) -> Line:
    """See the module docstring. Pure."""
    text = line.rstrip("\r\n")
    m = _PREFIX.match(text)
    rank, body = (int(m.group(1)), m.group(3)) if m else (None, text)
    aborted = _ABORT.search(body.rstrip())
    if aborted:
        return Line("abort", rank, text, reason=(aborted.group(1) or "").strip())
    broken = _BROKEN.search(body.rstrip())
    if broken:
        return Line("abort", rank, text, reason=BROKEN_REASON + broken.group(1).strip())
    if any(marker in body for marker in _ABORTING):
        return Line("aborting", rank, text)
    if body.startswith("{") and '"event"' in body:  # cheap: most lines are not JSON
        record = parse_line(body)
        if record is not None:
            return Line("metrics", rank, text, record)
    if m and not body.strip() and m.group(2) == "stderr":
        return Line("blank", rank, text)
    return Line("text", rank, text)


def _num(value: object, fmt: str) -> str:
    return format(value, fmt) if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


class View:
    """The live view's state (see the module docstring). Pure; ``clock`` only stamps events."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self.record: MetricsRecord | None = None
        self.world_size: int | None = None
        self.last_event: str | None = None
        self.last_event_at = 0.0
        self.changed = False  # the last record changed the world size

    def event(self, text: str) -> None:
        self.last_event, self.last_event_at = text, self._clock()

    def observe(self, record: MetricsRecord) -> list[str]:
        """Fold one metrics record in; the events worth a line of their own (epoch ends). A
        world size change is the last event, not a line."""
        said: list[str] = []
        size = record.world_size
        changed = size != self.world_size
        if changed and self.world_size is not None:
            self.event(f"world size {self.world_size} -> {size}")
        self.world_size = size
        self.changed = changed
        if record.event == "epoch":
            said.append(f"epoch {record.epoch:d} done: loss {_num(record.loss, '.4f')}, "
                        f"accuracy {_num(record.accuracy, '.4f')}, "
                        f"validation accuracy {_num(record.val_accuracy, '.4f')}")
        self.record = record
        for text in said:
            self.event(text)
        return said

    def progress(self) -> str:
        """World size, epoch and step, samples/s and loss of the last record."""
        r = self.record
        epoch, batch, rate, loss = (r.epoch, r.batch, r.samples_per_sec, r.loss) if r else (None,) * 4
        return (f"world {_num(self.world_size, 'd')} | epoch {_num(epoch, 'd')} "
                f"step {_num(batch, 'd')} | {_num(rate, '.1f')} samples/s | "
                f"loss {_num(loss, '.4f')}")

    def status(self, width: int = 0) -> str:
        """The one-line live view; cut to ``width`` characters when given."""
        line = self.progress()
        if self.last_event:
            line += f" | {self.last_event} ({self._clock() - self.last_event_at:.0f}s ago)"
        return line[:width - 1] if width > 1 and len(line) >= width else line


class Relay:
    """Relays horovodrun's output (see the module docstring)."""

    def __init__(self, out: TextIO, err: TextIO, tty: bool | None = None, plain_every: float = 10.0,
                 clock: Callable[[], float] = time.monotonic, width: Callable[[], int] | None = None):
        self._out, self._err = out, err
        self._tty = out.isatty() if tty is None else tty
        self._plain_every, self._clock = plain_every, clock
        self._width = width or (lambda: 0)
        self.view = View(clock)
        self._lock = threading.Lock()
        self._drawn = False
        self._last_plain = -float("inf")
        self._aborted = False  # an abort was said since the last metrics record
        self._workers: list[Worker] = []
        self.first_progress: float | None = None  # when the first progress record came (unix time)

    # -- input -------------------------------------------------------------------------------
    def feed(self, line: str, stderr: bool = False) -> None:
        """One line of horovodrun's stdout (or stderr): shown, folded into the view, or both. A
        carriage return inside it ends a line too, as on a terminal: ssh's CR LF, which
        horovodrun's prefixing leaves as ``...host.<CR>[0]<stderr>:``, is two lines."""
        parts = _BREAK.split(line.rstrip("\r\n"))
        for part in parts:
            self._feed_one(part, stderr)

    def _feed_one(self, line: str, stderr: bool) -> None:
        item = classify(line)
        with self._lock:
            if item.kind == "metrics":
                assert item.record is not None
                self._aborted = False
                if self.first_progress is None and item.record.event == "progress":
                    self.first_progress = time.time()
                said = self.view.observe(item.record)
                for text in said:
                    self._say(text)
                if self._tty:
                    self._draw()
                elif said or self.view.changed or self._clock() - self._last_plain >= self._plain_every:
                    self._last_plain = self._clock()
                    self._print(self._out, self.view.progress())
            elif item.kind == "abort":
                if not self._aborted:
                    self._aborted = True
                    who = f"rank {item.rank}: " if item.rank is not None else ""
                    why = f" ({item.reason})" if item.reason else ""
                    self.view.event("collectives aborted")
                    self._say(f"{who}{EXPECTED_ABORT_TEXT}{why}")
                    if self._tty and self.view.record is not None:
                        self._draw()
                else:
                    log.debug("%s", item.text)
            elif item.kind in ("aborting", "blank"):
                log.debug("%s", item.text)
            else:
                self._print(self._err if stderr else self._out, item.text)

    def attach(self, stdout: IO[bytes] | None, stderr: IO[bytes] | None) -> None:
        """Read horovodrun's pipes in two threads until EOF (``shared.worker``)."""
        for pipe, is_err, name in ((stdout, False, "relay-stdout"), (stderr, True, "relay-stderr")):
            if pipe is not None:
                worker = Worker(functools.partial(self._pump, pipe, is_err), name)
                self._workers.append(worker)
                worker.start()

    def close(self, timeout: float = 10.0) -> None:
        """Wait up to ``timeout`` for both pipes' EOF, then end the status line."""
        deadline = self._clock() + timeout
        for worker in self._workers:
            worker.stop(max(0.0, deadline - self._clock()))
        with self._lock:
            if self._drawn:
                self._out.write("\n")
                self._out.flush()
                self._drawn = False

    def _pump(self, pipe: IO[bytes], stderr: bool) -> None:
        for raw in iter(pipe.readline, b""):
            self.feed(raw.decode("utf-8", "replace"), stderr)

    # -- output (under the lock) -------------------------------------------------------------
    def _say(self, text: str) -> None:
        self._clear()
        log.info("%s", text)

    def _print(self, stream: TextIO, text: str) -> None:
        self._clear()
        stream.write(text + "\n")
        stream.flush()
        if self._tty and self.view.record is not None:
            self._draw()

    def _clear(self) -> None:
        if self._drawn:
            self._out.write(_ERASE)
            self._out.flush()
            self._drawn = False

    def _draw(self) -> None:
        self._out.write(_ERASE + self.view.status(self._width()))
        self._out.flush()
        self._drawn = True
