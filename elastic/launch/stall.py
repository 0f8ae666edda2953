"""The stall watchdog: stop a job in which no rank made progress for a while.

Progress comes from the driver's events (``elastic.launch.events``), so it works for any
training script that uses ``hvd.elastic.run``: a commit reported by a worker (``progress``),
a worker asking for its rank (``worker_ready``), a reset, a worker started for a world. Host
changes, exits and joiners are not progress: a joiner started (or started again after its pod's
cooldown) or waiting at the rendezvous says nothing of the world it waits for, so a world whose
every member hung while a joiner waits to be taken in (the reset it asked for never begins:
nobody checks in, so the registration barrier's deadline never arms) is stopped here, with the
joiner named as waiting. The clock runs only while a worker runs: a job that has no worker yet
(its hosts being prepared: keys pinned, a large dataset synced) or none any more (waiting for
hosts) is waiting, not hung -- ``--first-world-timeout`` and Horovod's elastic timeout judge
that wait -- so it is never stopped as stalled.

``Activity`` is pure: ``observe(records)`` folds records in; ``stalled(now, timeout)`` says
whether the last progress is older than ``timeout``; ``report(now)`` is the text naming what
each rank and host was last seen doing. ``StallPolicy(timeout, started)`` is the launcher
monitor's policy (``elastic.launch.monitor``): one ``Stop`` (exit 1) with the report.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from elastic.launch.decisions import Decision, Stop, Tick
from elastic.launch.events import Record
from shared.event_kinds import Kind

PROGRESS_KINDS = frozenset({Kind.PROGRESS, Kind.WORKER_READY, Kind.WORKER_START, Kind.RESET, Kind.WORKER_REGISTERED})

_DOING: dict[Kind | str, str] = {
    Kind.WORKER_START: "started",
    Kind.WORKER_REGISTERED: "training (notification service up)",
    Kind.WORKER_READY: "rendezvous (asked for its rank)",
    Kind.PROGRESS: "committed",
    Kind.WORKER_EXIT: "exited",
    Kind.JOINER_READY: "waiting to join (at the rendezvous, not yet taken into a world)",
    Kind.JOINER_TAKEN: "taken into a world",
}


def is_progress(record: Record) -> bool:
    """Whether ``record`` shows the world moving (the module docstring): a joiner's start is not."""
    if record.kind == Kind.WORKER_START and record.detail.get("joiner") is True:
        return False
    return record.kind in PROGRESS_KINDS


@dataclass
class _Seen:
    time: float
    text: str


class Activity:
    """What each worker and the driver were last seen doing (see the module docstring)."""

    def __init__(self, started: float):
        self.last_progress = started
        self.workers: dict[tuple[str, int], _Seen] = {}
        self.ranks: dict[tuple[str, int], int] = {}
        self.running: set[tuple[str, int]] = set()
        self.driver: _Seen | None = None
        self.hosts: list[str] = []

    def observe(self, records: Iterable[Record]) -> None:
        for r in records:
            d = r.detail
            if is_progress(r):
                self.last_progress = max(self.last_progress, r.time)
            if r.kind == Kind.HOSTS:
                self.hosts = [str(h) for h in d.get("hosts", [])]
            if "host" in d and "slot" in d:
                key = (str(d["host"]), int(d["slot"]) if str(d["slot"]).isdigit() else 0)
                if r.kind == Kind.WORKER_START and isinstance(d.get("rank"), int):
                    self.ranks[key] = d["rank"]
                if r.kind == Kind.WORKER_START:
                    self.running.add(key)
                elif r.kind == Kind.WORKER_EXIT:
                    self.running.discard(key)
                text = _DOING.get(r.kind, r.kind)
                if r.kind == Kind.PROGRESS:
                    text = f"committed (commit #{d.get('commits')})"
                elif r.kind == Kind.WORKER_START and d.get("joiner") is True:
                    text = "started as a joiner"
                elif r.kind == Kind.JOINER_DROPPED:
                    text = f"dropped as a joiner: {d.get('reason')}"
                elif r.kind == Kind.WORKER_EXIT:
                    text = f"exited with {d.get('exit_code')}"
                self.workers[key] = _Seen(r.time, text)
            elif r.kind == Kind.RESET:
                self.driver = _Seen(r.time, f"reset to world size {d.get('world_size')}")
            elif r.kind in (Kind.ABORT, Kind.NOTIFY, Kind.STOP, Kind.HOSTS):
                said: dict[Kind | str, str] = {Kind.ABORT: f"aborted collectives: {d.get('reason')}",
                                               Kind.NOTIFY: "told the coordinator of a host change",
                                               Kind.STOP: "stopping",
                                               Kind.HOSTS: f"hosts changed ({d.get('update')})"}
                self.driver = _Seen(r.time, said[r.kind])

    def stalled(self, now: float, timeout: float) -> bool:
        """A worker runs and none made progress for more than ``timeout`` seconds."""
        return bool(self.running) and now - self.last_progress > timeout

    def report(self, now: float) -> str:
        lines = [f"no rank made progress for {now - self.last_progress:.0f}s; last seen:"]
        for (host, slot), seen in sorted(self.workers.items()):
            rank = self.ranks.get((host, slot))
            who = f"{host}[{slot}]" + (f" (rank {rank})" if rank is not None else "")
            lines.append(f"  worker {who}: {seen.text}, {now - seen.time:.0f}s ago")  # rank as first started
        if not self.workers:
            lines.append("  no worker was seen")
        if self.driver is not None:
            lines.append(f"  driver: {self.driver.text}, {now - self.driver.time:.0f}s ago")
        lines.append(f"  hosts discovered: {' '.join(self.hosts) or '-'}")
        return "\n".join(lines)


STALLED_EXIT = 1


class StallPolicy:
    """Decides ``Stop(report, 1)`` once no rank made progress for ``timeout`` seconds while a
    worker runs (module docstring); ``started``: unix seconds the clock starts from."""

    def __init__(self, timeout: float, started: float):
        if timeout <= 0:
            raise ValueError(f"stall timeout must be positive, got {timeout}")
        self._timeout = timeout
        self._activity = Activity(started)
        self.done = False

    def step(self, records: Sequence[Record], tick: Tick) -> list[Decision]:
        self._activity.observe(records)
        if self.done or not self._activity.stalled(tick.wall, self._timeout):
            return []
        self.done = True
        return [Stop(f"the job stalled (--stall-timeout): {self._activity.report(tick.wall)}", STALLED_EXIT)]
