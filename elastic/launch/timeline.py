"""The job's timeline (pure): what ``elastic-run`` prints when the training has ended.

Inputs are plain values, so a test builds them by hand:

- host snapshots ``[(unix_time, ("host:slots", ...)), ...]`` as polled from the daemon;
- training metrics records (``shared.metrics_record.MetricsRecord``, the JSON lines rank 0
  writes; ``read_metrics`` reads a file of them);
- the launch's start and end times and the exit code;
- the Horovod driver's own events (``elastic.launch.events.Record``), which exist for any
  training script. The record format, as the driver writes it (one JSON line each, to
  ``$HOROVOD_ELASTIC_EVENTS_FILE``) and as the timeline JSON keeps it (``driver_events``):

      {"time": 1700000000.123,      # unix seconds
       "kind": "reset",             # what happened: a shared.event_kinds.Kind
       "detail": {"world_size": 3, "rendezvous": 2, "hosts": ["10.0.0.5:1", ...],
                  "new_workers": 1}}

  The kinds, and what each one's detail holds, are ``shared.event_kinds`` (``Kind``,
  ``DETAILS``).

``build_timeline`` turns them into ``Event``s sorted by time: the host set changing
(``hosts``: who came, who went), the world size or reset count changing in the metrics
(``world``), epochs ending (``epoch``) and the end of the job (``exit``). ``summarize``
gives the counts the demo and the tests read; ``render`` formats the text table. World sizes
and resets come from the driver's ``reset`` events when there are any (any script), else
from the training's metrics records (older runs, tests).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from elastic.common.hostlist import split_host_slots
from elastic.launch.events import Record
from shared.event_kinds import Kind
from shared.metrics_record import MetricsRecord, read_records


@dataclass(frozen=True)
class Event:
    """One line of the timeline: seconds since the start, a kind, and its text."""

    t: float
    kind: str
    text: str


@dataclass(frozen=True)
class Summary:
    """What the timeline adds up to."""

    wall_seconds: float
    host_changes: int
    world_sizes: tuple[int, ...]  # in order of appearance, repeats collapsed
    resets: int
    epochs: int
    final_accuracy: float | None
    exit_code: int


def _slots(hosts: Iterable[str]) -> int:
    return sum(split_host_slots(line)[1] for line in hosts)


def _names(hosts: Iterable[str]) -> set[str]:
    return {split_host_slots(line)[0] for line in hosts}


def host_events(start: float, snapshots: Sequence[tuple[float, Sequence[str]]]) -> list[Event]:
    """One event per change of the served host set (the first non-empty snapshot included).

    Empty snapshots before the first host was served are not a change: the daemon answers
    an empty list while it has not synced or while every new pod is still being prepared
    (synced, not yet served). Once a host was served, an empty set is a change like any other.
    """
    events, previous = [], None
    for when, hosts in snapshots:
        current = tuple(sorted(hosts))
        if current == previous or (previous is None and not current):
            continue
        if previous is None:
            text = f"hosts: {len(current)} ({_slots(current)} slots) {' '.join(current) or '-'}"
        else:
            came = sorted(_names(current) - _names(previous))
            went = sorted(_names(previous) - _names(current))
            parts = [f"+{h}" for h in came] + [f"-{h}" for h in went] or ["slots changed"]
            text = f"hosts: {len(current)} ({_slots(current)} slots) {' '.join(parts)}"
        events.append(Event(round(when - start, 3), "hosts", text))
        previous = current
    return events


def _accuracy(rec: MetricsRecord) -> float | None:
    """An epoch's accuracy: on the validation split when there is one, else in training."""
    return rec.accuracy if rec.val_accuracy is None else rec.val_accuracy


def training_events(start: float, records: Sequence[MetricsRecord]) -> list[Event]:
    """World-size/reset changes and epoch ends from rank 0's metrics records."""
    events: list[Event] = []
    last: tuple[int, int] | None = None
    for rec in records:
        key = (rec.world_size, rec.resets)
        t = round(rec.time - start, 3)
        if key != last:
            text = f"world size {rec.world_size}"
            if last is not None and key[1] != last[1]:
                text += f" after reset {key[1]}"
            events.append(Event(t, "world", text + f" (epoch {rec.epoch})"))
            last = key
        if rec.event == "epoch":
            acc = _accuracy(rec)
            acc_text = "-" if acc is None else f"{acc:.4f}"
            events.append(Event(t, "epoch", f"epoch {rec.epoch} done, world size "
                                            f"{rec.world_size}, accuracy {acc_text}"))
    return events


def driver_events(start: float, driver: Sequence[Record]) -> list[Event]:
    """The driver's resets (``world``), aborts (``abort``), workers given up or hosts
    quarantined (``lost``) and announced leaves (``leave``) as timeline events."""
    events, resets = [], 0
    for rec in driver:
        t = round(rec.time - start, 3)
        if rec.kind == Kind.RESET:
            text = f"world size {rec.detail.get('world_size')}"
            if resets:
                text += f" after reset {resets}"
            text += f" ({rec.detail.get('new_workers', 0)} new workers)"
            events.append(Event(t, "world", text))
            resets += 1
        elif rec.kind == Kind.ABORT:
            events.append(Event(t, "abort", f"collectives aborted: {rec.detail.get('reason')}"))
        elif rec.kind == Kind.WORKER_LOST:
            events.append(Event(t, "lost", f"{rec.detail.get('host')}[{rec.detail.get('slot')}] lost: "
                                           f"{rec.detail.get('reason')}"))
        elif rec.kind == Kind.QUARANTINE:
            events.append(Event(t, "lost", f"{rec.detail.get('host')} quarantined: {rec.detail.get('reason')}"))
        elif rec.kind == Kind.WORKER_LEAVING:
            events.append(Event(t, "leave", f"{rec.detail.get('host')}[{rec.detail.get('slot')}] is leaving"))
    return events


def _driver_world(driver: Sequence[Record]) -> tuple[list[int], int]:
    """World sizes (repeats collapsed) and resets from the driver's reset events."""
    sizes: list[int] = []
    resets = -1
    for rec in driver:
        if rec.kind != Kind.RESET or not isinstance(rec.detail.get("world_size"), int):
            continue
        resets += 1
        if not sizes or sizes[-1] != rec.detail["world_size"]:
            sizes.append(rec.detail["world_size"])
    return sizes, max(0, resets)


def build_timeline(start: float, end: float, snapshots: Sequence[tuple[float, Sequence[str]]],
                   records: Sequence[MetricsRecord], exit_code: int, driver: Sequence[Record] = ()) -> list[Event]:
    """All events, sorted by time (stable: hosts before training at the same instant)."""
    if any(r.kind == Kind.RESET for r in driver):
        training = [e for e in training_events(start, records) if e.kind == "epoch"]
        events = host_events(start, snapshots) + driver_events(start, driver) + training
    else:
        events = host_events(start, snapshots) + training_events(start, records)
    events.append(Event(round(end - start, 3), "exit", f"training exited with {exit_code}"))
    return sorted(events, key=lambda e: e.t)


def summarize(start: float, end: float, snapshots: Sequence[tuple[float, Sequence[str]]],
              records: Sequence[MetricsRecord], exit_code: int, driver: Sequence[Record] = ()) -> Summary:
    """Counts over the timeline's inputs."""
    sizes: list[int] = []
    resets, epochs = 0, 0
    final: float | None = None
    for rec in records:
        if not sizes or sizes[-1] != rec.world_size:
            sizes.append(rec.world_size)
        resets = max(resets, rec.resets)
        if rec.event == "epoch":
            epochs += 1
            final = _accuracy(rec)
    driver_sizes, driver_resets = _driver_world(driver)
    if driver_sizes:
        sizes, resets = driver_sizes, driver_resets
    return Summary(
        wall_seconds=round(end - start, 3),
        host_changes=max(0, len(host_events(start, snapshots)) - 1),
        world_sizes=tuple(sizes),
        resets=resets,
        epochs=epochs,
        final_accuracy=final,
        exit_code=exit_code,
    )


def render(events: Sequence[Event], summary: Summary) -> str:
    """The timeline as text: one line per event, then a summary line."""
    lines = ["timeline:", f"  {'t (s)':>8}  {'what':<6}  detail"]
    for e in events:
        lines.append(f"  {e.t:8.1f}  {e.kind:<6}  {e.text}")
    sizes = " -> ".join(str(s) for s in summary.world_sizes) or "-"
    acc = "-" if summary.final_accuracy is None else f"{summary.final_accuracy:.4f}"
    lines.append(f"summary: wall {summary.wall_seconds:.1f}s, host set changes {summary.host_changes}, "
                 f"world sizes {sizes}, resets {summary.resets}, epochs {summary.epochs}, "
                 f"final accuracy {acc}, exit code {summary.exit_code}")
    return "\n".join(lines)


def read_metrics(path: str | Path | None) -> list[MetricsRecord]:
    """The records of a metrics file (``shared.metrics_record.read_records``): a missing file
    is none, a line that is not a record (a partial last line) is skipped."""
    return read_records(path)
