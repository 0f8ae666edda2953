"""scripts/benchmarks/bench-parity's pure parts: when the next elastic step is due, and the summary table.

- ``fraction_done(records, epochs, train_size)``: how far the training is (0..1) by rank 0's
  metrics records (``epoch`` 1-based, ``samples`` trained in that epoch so far);
- ``due(steps, at, progress, records, events, epochs, train_size)``: the step of the schedule
  due now, or None: the previous one took effect (``settled``: the job trains at the world
  size it should give, or the driver re-formed the world at that size) and the training has passed the step's share
  ``at[i]`` of all its samples, so the changes land spread over the run, not all at its start;
- ``summarize(rows)`` -> ``Summary``: mean, sample standard deviation, min and max of each
  arm's final validation accuracy over the seeds, the difference of the means (elastic minus
  fixed), the per-seed (paired: same seed, same initial weights and epoch orders) differences'
  mean and deviation, and the verdict: the difference of the means is within the seed-to-seed
  spread when its size is at most the larger of the two arms' standard deviations;
- ``table(rows, summary)``: the text table the bench prints.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass

from localcluster.chaos import Progress, took_effect
from shared.driver_events import Record
from shared.event_kinds import Kind
from shared.metrics_record import MetricsRecord


def fraction_done(records: list[MetricsRecord], epochs: int, train_size: int) -> float:
    """The share of the run's ``epochs * train_size`` samples trained, by the newest metrics
    record (0.0 before any); an ``epoch`` record counts its epoch as done."""
    if epochs < 1 or train_size < 1:
        raise ValueError(f"epochs and train_size must be positive, got {epochs} and {train_size}")
    best = 0.0
    for r in records:
        done = r.epoch if r.event == "epoch" else r.epoch - 1 + min(r.samples, train_size) / train_size
        best = max(best, done / epochs)
    return min(best, 1.0)


def settled(progress: Progress, records: list[MetricsRecord], events: list[Record]) -> bool:
    """True once the last step took effect: the job trains at the world size it should give
    (``localcluster.chaos.took_effect``), or the driver re-formed the world at that size after
    the step (a ``reset`` event): a training held before its last step (the slow motion's
    hold file) takes no step at the new size until the schedule is done."""
    if took_effect(progress, records, events):
        return True
    return any(e.kind == Kind.RESET and e.time > progress.last_time
               and e.detail.get("world_size") == progress.expected_world for e in events)


def due(steps: tuple[str, ...], at: tuple[float, ...], progress: Progress, records: list[MetricsRecord],
        events: list[Record], epochs: int, train_size: int) -> str | None:
    """The step due now (see the module docstring), or None."""
    if len(at) != len(steps):
        raise ValueError(f"{len(steps)} steps need {len(steps)} points, got {len(at)}")
    if progress.done >= len(steps):
        return None
    if progress.done and not settled(progress, records, events):
        return None
    return steps[progress.done] if fraction_done(records, epochs, train_size) >= at[progress.done] else None


@dataclass(frozen=True)
class Row:
    """One seed: the final validation accuracy of each run, and what the elastic one saw."""

    seed: int
    fixed: float
    elastic: float
    elastic_world_sizes: tuple[int, ...]
    elastic_resets: int


@dataclass(frozen=True)
class Arm:
    mean: float
    std: float  # sample standard deviation over the seeds (0 for one seed)
    low: float
    high: float


@dataclass(frozen=True)
class Summary:
    fixed: Arm
    elastic: Arm
    difference: float  # elastic mean - fixed mean
    paired_mean: float  # mean of the per-seed differences (the same number as ``difference``)
    paired_std: float
    within_spread: bool

    def to_json(self) -> dict:
        return asdict(self)


def _arm(values: list[float]) -> Arm:
    return Arm(mean=statistics.fmean(values), std=statistics.stdev(values) if len(values) > 1 else 0.0,
               low=min(values), high=max(values))


def summarize(rows: list[Row]) -> Summary:
    """The summary of ``rows`` (at least one); ``ValueError`` for none or an accuracy that is
    not a number in [0, 1]."""
    if not rows:
        raise ValueError("no seeds to summarize")
    for r in rows:
        for value in (r.fixed, r.elastic):
            if not (isinstance(value, float) and math.isfinite(value) and 0.0 <= value <= 1.0):
                raise ValueError(f"seed {r.seed}: accuracy {value!r} is not a number in [0, 1]")
    fixed, elastic = _arm([r.fixed for r in rows]), _arm([r.elastic for r in rows])
    diffs = [r.elastic - r.fixed for r in rows]
    difference = elastic.mean - fixed.mean
    return Summary(fixed=fixed, elastic=elastic, difference=difference,
                   paired_mean=statistics.fmean(diffs),
                   paired_std=statistics.stdev(diffs) if len(diffs) > 1 else 0.0,
                   within_spread=abs(difference) <= max(fixed.std, elastic.std))


def _pct(x: float) -> str:
    return f"{100 * x:.2f}"


def table(rows: list[Row], s: Summary, fixed_np: int) -> str:
    """The per-seed rows, then mean, std, min-max and the difference, accuracies in percent."""
    head = f"{'seed':>6} | {f'fixed (np {fixed_np})':>14} | {'elastic':>8} | {'diff':>6} | elastic world sizes"
    lines = [head, "-" * len(head)]
    for r in rows:
        sizes = " -> ".join(map(str, r.elastic_world_sizes)) or "-"
        lines.append(f"{r.seed:>6} | {_pct(r.fixed):>14} | {_pct(r.elastic):>8} | "
                     f"{_pct(r.elastic - r.fixed):>6} | {sizes} ({r.elastic_resets} resets)")
    lines.append("-" * len(head))
    lines.append(f"{'mean':>6} | {_pct(s.fixed.mean):>14} | {_pct(s.elastic.mean):>8} | {_pct(s.difference):>6} |")
    lines.append(f"{'std':>6} | {_pct(s.fixed.std):>14} | {_pct(s.elastic.std):>8} | {_pct(s.paired_std):>6} |")
    lines.append(f"{'min':>6} | {_pct(s.fixed.low):>14} | {_pct(s.elastic.low):>8} | {'':>6} |")
    lines.append(f"{'max':>6} | {_pct(s.fixed.high):>14} | {_pct(s.elastic.high):>8} | {'':>6} |")
    verdict = "within" if s.within_spread else "OUTSIDE"
    lines.append(f"final validation accuracy, %: elastic - fixed = {_pct(s.difference)} points, {verdict} "
                 f"the seed-to-seed spread (std {_pct(max(s.fixed.std, s.elastic.std))})")
    return "\n".join(lines)
