"""Which samples an elastic run trained twice or never, per epoch, from its per-step sample
logs (``training.sample_log``; pure, no torch).

Contract. The records are the JSON objects of every worker's ``.steps`` file of one job
(``load(directory)``; a line that is not a whole JSON object, as a crash's partial last line,
or a record missing a field it needs, is skipped); every epoch with an ``enter`` or a
``step`` is audited. A *world* is named by the records'
``world``; the worlds are ordered by their first record's time (worlds of one job follow one
another). A world resumes epoch ``E`` at the ``processed`` of its ``enter`` lines when it
entered in ``E``, at 0 when it entered in an earlier epoch (it reached ``E`` by finishing the
one before), and does not train ``E`` when it entered later. A global step is one world's
``(epoch, start)``; its samples are the union of its ranks' ``indices``.

A step of world ``W`` is *rolled back* when a later world resumes its epoch at or before the
step's ``start``: the later world re-plans the epoch from there, so those samples are trained
again. That is Horovod's documented behaviour on a reset (a restore of the last commit; a new
run resumes from its snapshot or checkpoint) and is reported apart, as ``retrained`` ("re-trained
after a reset") with one ``Rollback`` per world and epoch. Every other step is *kept*: what
the model learned from. Per epoch:

- ``twice``: the indices the kept steps hold more than once (a user's "trained twice");
- ``never``: the indices ``0..samples-1`` no kept step holds, for a *complete* epoch only
  (its kept steps reach its end, or a later epoch has records); an incomplete epoch has none;
- ``retrained``: the samples of the rolled-back steps, each time counted.

A takeover that keeps the world (adoption) starts no world, so it adds neither a rollback nor
a duplicate; one that starts the job again shows as a rollback to where the new run resumed.
"""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from training.sample_log import COMMIT, ENTER, STEP


@dataclass(frozen=True)
class Rollback:
    """Steps of ``world`` in ``epoch`` from ``resumed_at`` on, trained again by ``successor``
    (which entered at ``time``): ``samples`` of them, up to the epoch position ``reached``."""

    epoch: int
    world: str
    successor: str
    resumed_at: int
    reached: int
    samples: int
    time: float


@dataclass(frozen=True)
class EpochAudit:
    epoch: int
    samples: int  # the epoch's size (0 when no record says)
    complete: bool
    trained: int  # samples trained in the epoch, each time counted (kept and rolled back)
    kept: int  # samples of the kept steps
    twice: tuple[int, ...]
    never: tuple[int, ...]
    retrained: int  # samples of the rolled-back steps ("re-trained after a reset")
    rollbacks: tuple[Rollback, ...]
    worlds: tuple[str, ...]  # the worlds that trained the epoch, in order

    @property
    def ok(self) -> bool:
        """Nothing trained twice or never (rollbacks aside)."""
        return not self.twice and not self.never

    def summary(self) -> str:
        return (f"epoch {self.epoch}: {self.samples} samples, {'complete' if self.complete else 'incomplete'}, "
                f"{self.trained} trained in {len(self.worlds)} world(s), {len(self.twice)} trained twice, "
                f"{len(self.never)} never, {self.retrained} re-trained after a reset "
                f"({len(self.rollbacks)} rollback(s))")


def read_lines(path: Path) -> list[dict]:
    """The JSON objects of one ``.steps`` file; partial or malformed lines skipped."""
    out: list[dict] = []
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def load(directory: Path | str) -> list[dict]:
    """Every record of every ``*.steps`` file in ``directory``."""
    return [rec for path in sorted(Path(directory).glob("*.steps")) for rec in read_lines(path)]


@dataclass
class _Step:
    total: int
    indices: list[int]
    samples: int


class _Log:
    """The records parsed: worlds in order, their entries, their global steps."""

    def __init__(self, records: Iterable[dict]):
        self.first: dict[str, float] = {}
        self.entered: dict[str, tuple[int, int, float]] = {}  # world -> (epoch, processed, time)
        self.steps: dict[tuple[str, int, int], _Step] = {}  # (world, epoch, start)
        self.lines: list[tuple[tuple[str, int, int], dict]] = []  # every step line, by its step
        self.sizes: dict[int, int] = {}
        self.epochs: set[int] = set()  # with any record (an epoch's end commit names the next)
        self.trained: set[int] = set()  # with an entry or a step
        for rec in records:
            try:
                kind, world, t, epoch = rec["kind"], str(rec["world"]), float(rec["time"]), int(rec["epoch"])
                if kind == ENTER:
                    processed = int(rec["processed"])
                    self.sizes[epoch] = max(self.sizes.get(epoch, 0), int(rec["samples"]))
                    if world not in self.entered or t < self.entered[world][2]:
                        self.entered[world] = (epoch, processed, t)
                elif kind == STEP:
                    start, total = int(rec["start"]), int(rec["total"])
                    indices = [int(i) for i in rec["indices"]]
                    size = int(rec["samples"])
                    step = self.steps.setdefault((world, epoch, start), _Step(total, [], size))
                    step.indices.extend(indices)
                    self.lines.append(((world, epoch, start), rec))
                    self.sizes[epoch] = max(self.sizes.get(epoch, 0), size)
                elif kind != COMMIT:
                    continue
            except (KeyError, TypeError, ValueError):
                continue
            if kind != COMMIT:
                self.trained.add(epoch)
            self.epochs.add(epoch)
            self.first[world] = min(t, self.first.get(world, t))
        self.order = sorted(self.first, key=lambda w: self.first[w])

    def resume(self, world: str, epoch: int) -> int | None:
        """Where ``world`` starts ``epoch`` (None: it does not train it)."""
        if world in self.entered:
            e, processed, _ = self.entered[world]
            return processed if e == epoch else 0 if e < epoch else None
        starts = [s for (w, e, s) in self.steps if w == world and e == epoch]
        return min(starts) if starts else None

    def cut(self, world: str, epoch: int) -> tuple[int | None, str]:
        """The position from which a later world re-trains ``world``'s steps of ``epoch``
        (None: it keeps them all), and that world."""
        i = self.order.index(world)
        later = [(r, w) for w in self.order[i + 1:] if (r := self.resume(w, epoch)) is not None]
        return min(later, default=(None, ""))


def kept_steps(records: Iterable[dict]) -> list[dict]:
    """The step lines of the kept steps (what the model learned from), in time order."""
    log = _Log(records)
    cuts: dict[tuple[str, int], int | None] = {}
    out = []
    for key, rec in log.lines:
        world, epoch, start = key
        if (world, epoch) not in cuts:
            cuts[world, epoch] = log.cut(world, epoch)[0]
        cut = cuts[world, epoch]
        if cut is None or start < cut:
            out.append(rec)
    return sorted(out, key=lambda r: float(r["time"]))


def audit(records: Iterable[dict]) -> dict[int, EpochAudit]:
    """Per epoch with an entry or a step: what was trained twice, never, and re-trained after
    a reset."""
    log = _Log(records)
    out = {}
    for epoch in sorted(log.trained):
        n = log.sizes.get(epoch, 0)
        kept: Counter[int] = Counter()
        trained = retrained = 0
        reached = 0
        rollbacks = []
        worlds = []
        for world in log.order:
            mine = sorted((s, st) for (w, e, s), st in log.steps.items() if w == world and e == epoch)
            if not mine:
                continue
            worlds.append(world)
            cut, successor = log.cut(world, epoch)
            back = 0
            for start, st in mine:
                trained += len(st.indices)
                if cut is not None and start >= cut:
                    back += len(st.indices)
                else:
                    kept.update(st.indices)
                    reached = max(reached, start + st.total)
            if back:
                retrained += back
                end = max(s + st.total for s, st in mine)
                since = log.entered.get(successor, (0, 0, log.first.get(successor, 0.0)))[2]
                rollbacks.append(Rollback(epoch, world, successor, int(cut or 0), end, back, since))
        complete = (n > 0 and reached >= n) or any(e > epoch for e in log.epochs)
        out[epoch] = EpochAudit(
            epoch=epoch, samples=n, complete=complete, trained=trained, kept=sum(kept.values()),
            twice=tuple(sorted(i for i, c in kept.items() if c > 1)),
            never=tuple(sorted(set(range(n)) - set(kept))) if complete else (),
            retrained=retrained, rollbacks=tuple(rollbacks), worlds=tuple(worlds))
    return out
