"""The registration barrier's deadline, pure: when it arms and whom it loses.

After a failure every worker of the world resets and checks in at the rendezvous for the next
world. A worker that never checks in would hold that world for ever: its main thread is hung
(blocked in a collective the abort did not reach, or in a GPU call), while its notification
thread still answers the driver's pings, so liveness never loses it. The deadline backs
liveness up. The rules, each with its reason:

- **Arms** (``arms``): once at least one worker has checked in and at least one is missing.
  A check-in proves the reset has begun; any number of missing workers is then judged. (The
  fork armed only when exactly one was missing: a multi-slot pod whose ranks all hung, or two
  hangs at once, held the next world for ever.)
- **Judged** (``judge``), each deadline: the progress of every missing worker's main thread
  is sampled when the deadline arms and again when it passes:

  - no answer to the progress request: **silent**, lost;
  - its main thread used ``CPU_SHARE`` of the time on CPU, or moved ``IO_BYTES`` of I/O, or
    began an elastic reset since the last sample: **busy** (a checkpoint written, an
    evaluation on one rank, a restore; work declared for it in other threads counts as its
    own): kept, and judged again one deadline later with this sample as the baseline;
  - otherwise **idle**: hung, lost.

  A worker with no baseline (it registered after the deadline armed) is kept once: nothing
  can be said of its progress yet.

Nothing here reads a clock or talks to a worker: samples come in as values (``Sample``) taken
by the driver (``ElasticDriver.unrecorded_progress``), decisions go out as a ``Verdict``.
"""
from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)  # a worker: (host, slot) in the driver

CPU_SHARE = 0.1  # of the time between two samples, on CPU: busy
IO_BYTES = 1 << 20  # read or written between two samples: busy


@dataclass(frozen=True)
class Sample:
    """How far a worker's main thread has come: when (the driver's clock), CPU seconds and
    bytes of I/O so far (None: not readable there), elastic resets begun (None: unknown)."""
    when: float
    cpu: float | None
    io: int | None
    resets: int | None = None

    @classmethod
    def of(cls, value: tuple | None) -> Sample | None:
        """The driver's tuple (when, cpu, io, resets) as a Sample; None stays None."""
        if value is None:
            return None
        when, cpu, io, *rest = value
        return cls(when, cpu, io, rest[0] if rest else None)


def _grew(before: float | int | None, after: float | int | None, by: float) -> bool:
    return before is not None and after is not None and after - before >= by


def progressed(before: Sample, after: Sample) -> bool:
    """Whether a main thread progressed between two samples: ``CPU_SHARE`` of the time on
    CPU, ``IO_BYTES`` of I/O, or an elastic reset begun (a reset's ``hvd.shutdown`` may wait
    without CPU or I/O; it checks in next)."""
    elapsed = max(after.when - before.when, 0.0)
    return (_grew(before.cpu, after.cpu, CPU_SHARE * elapsed) or _grew(before.io, after.io, IO_BYTES)
            or _grew(before.resets, after.resets, 1))


def arms(checked_in: int, size: int) -> bool:
    """Whether the deadline arms for a world of ``size`` workers of which ``checked_in`` have
    checked in: someone has, someone has not."""
    return 0 < checked_in < size


@dataclass(frozen=True)
class Verdict(Generic[Key]):
    """The deadline passed. ``kept``: busy workers and their samples, the next deadline's
    baseline (empty: the deadline is over). ``silent``: lost, no answer to the progress
    request. ``idle``: lost, answered but made no progress."""
    kept: dict[Key, Sample] = field(default_factory=dict)
    silent: tuple[Key, ...] = ()
    idle: tuple[Key, ...] = ()


def judge(baseline: Mapping[Key, Sample | None], now: Mapping[Key, Sample | None]) -> Verdict[Key]:
    """Judge each worker still missing at the deadline (the keys of ``now``) against its
    sample when the deadline armed (``baseline``; a missing or None entry: no baseline)."""
    kept: dict[Key, Sample] = {}
    silent: list[Key] = []
    idle: list[Key] = []
    for key, sample in now.items():
        before = baseline.get(key)
        if sample is None:
            silent.append(key)
        elif before is None or progressed(before, sample):
            kept[key] = sample
        else:
            idle.append(key)
    return Verdict(kept, tuple(silent), tuple(idle))


__all__ = ["CPU_SHARE", "IO_BYTES", "Sample", "Verdict", "arms", "judge", "progressed"]
