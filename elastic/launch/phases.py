"""Where a launch's start-up time went, phase by phase: the line ``elastic-run`` prints at the
first commit (a retried launcher's restart cost, measured by the launcher itself).

    elastic-run: training 31.2 s after the start: discovery daemon 1.1 s, hosts prepared 2.3 s
    (ssh pinning, earlier runs stopped, dataset), workers started 2.0 s, imports and setup 20.4 s,
    first step 5.9 s

Each phase is the time from the end of the one before to its own end (0 when it ended while
the one before still ran: they overlap). Ends (unix seconds):

- ``discovery daemon``: the daemon answers (``Marks.daemon``, the launcher's own clock);
- ``hosts prepared``: the hosts served reach the first world's slots (``Marks.served``: the
  launcher's host recorder; the prepare hook pinned each host's key, stopped the job's earlier
  runs there and synced the dataset before the daemon served it);
- ``workers started``: the first world's last worker started (the driver's ``worker_start``:
  horovodrun's ssh to the host);
- ``imports and setup``: the last of them registered its notification service
  (``worker_registered``: python, torch and horovod imported, the training's data and model
  set up, ``hvd.init``'s rendezvous done; on a loaded node mostly torch's import);
- ``first step``: the training's first progress record (``Marks.trained``: its metrics file).

``phases`` and ``render`` are pure (records and times in, values out); ``PhasePolicy`` is the
launcher monitor's policy (``elastic.launch.monitor``): one ``Note`` with the line, at the first
step.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from elastic.launch.decisions import Decision, Note, Tick
from elastic.launch.events import Record
from shared.event_kinds import Kind

PHASES = ("discovery daemon", "hosts prepared", "workers started", "imports and setup", "first step")
HOSTS_NOTE = " (ssh pinning, earlier runs stopped, dataset)"


@dataclass(frozen=True)
class Marks:
    """The launcher's own times (unix seconds; None: not yet)."""

    start: float
    daemon: float | None = None
    served: float | None = None
    trained: float | None = None


def _nth(records: Sequence[Record], kind: Kind, n: int) -> float | None:
    """When the ``n``-th worker (host, slot) first had a ``kind`` event; None before that."""
    firsts: dict[tuple, float] = {}
    for r in records:
        if r.kind == kind:
            key = (r.detail.get("host"), r.detail.get("slot"))
            firsts[key] = min(firsts.get(key, r.time), r.time)
    times = sorted(firsts.values())
    return times[n - 1] if len(times) >= n else None


def phases(marks: Marks, records: Sequence[Record], workers: int) -> list[tuple[str, float | None]]:
    """The phases of the module docstring for a first world of ``workers`` workers, in order:
    (name, seconds); None for a phase whose end is not known (and every later one counts from
    the last known end)."""
    ends = [marks.daemon, marks.served, _nth(records, Kind.WORKER_START, workers),
            _nth(records, Kind.WORKER_REGISTERED, workers), marks.trained]
    out: list[tuple[str, float | None]] = []
    previous = marks.start
    for name, end in zip(PHASES, ends, strict=True):
        if end is None:
            out.append((name, None))
            continue
        out.append((name, max(0.0, end - previous)))
        previous = max(previous, end)
    return out


def render(marks: Marks, records: Sequence[Record], workers: int) -> str | None:
    """The line of the module docstring; None before the first step."""
    if marks.trained is None:
        return None
    parts = []
    for name, seconds in phases(marks, records, workers):
        text = f"{name} {'?' if seconds is None else f'{seconds:.1f}'} s"
        parts.append(text + (HOSTS_NOTE if name == "hosts prepared" else ""))
    return f"training {marks.trained - marks.start:.1f} s after the start: {', '.join(parts)}"


class PhasePolicy:
    """Decides ``Note(line)`` once, at the first step; ``marks()`` gives the launcher's own times
    (the first step's included) when asked."""

    def __init__(self, marks: Callable[[], Marks], workers: int):
        self._marks, self._workers = marks, workers
        self._records: list[Record] = []
        self.line: str | None = None

    @property
    def done(self) -> bool:
        return self.line is not None

    def step(self, records: Sequence[Record], tick: Tick) -> list[Decision]:
        if self.line is not None:
            return []
        self._records.extend(records)
        self.line = render(self._marks(), self._records, self._workers)
        return [] if self.line is None else [Note(self.line)]


def first_served(snapshots: Sequence[tuple[float, Sequence[str]]], slots: int,
                 count: Callable[[Sequence[str]], int]) -> float | None:
    """When the hosts served first held ``slots`` slots (``count`` sums a snapshot's slots)."""
    return next((t for t, hosts in snapshots if count(hosts) >= slots), None)
