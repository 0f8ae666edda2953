"""The trace's ``.samples`` records read back: which traced samples a job committed (pure; no
torch, so the soak's checker and the tests read traces without it).

A worker writes two ``.samples`` lines per commit (``training.trace``):

- ``{"phase": "trained", "epoch", "time", "size", "rank", "resets", "processed", "indices"}``
  *before* the commit's collective: the sample indices this rank trained on since its
  previous commit;
- ``{"phase": "committed", "epoch", "time", "size", "rank", "resets", "processed"}`` once the
  state holding those steps is saved.

A rank can be killed between the two. The collective completes on no rank unless every rank
of the world took part in it, so a commit that any rank marked ``committed`` holds every
rank's ``trained`` samples of that commit, the dead rank's included, although its own mark is
missing. A commit is named by ``(epoch, resets, processed)``: ``processed`` (the epoch's samples
done over all ranks after the commit) grows within one world, and every new world counts one
more reset, so the name never recurs in a job. ``trained`` lines of a commit no rank marked
(the collective failed, the steps were rolled back) are not committed.

Lines without ``phase`` (traces written before the two phases) count as committed as they are.
"""
from __future__ import annotations

from collections.abc import Iterable

TRAINED = "trained"
COMMITTED = "committed"


def commit_key(record: dict) -> tuple[int, int, int]:
    """The commit a ``.samples`` record belongs to: ``(epoch, resets, processed)``."""
    return int(record["epoch"]), int(record.get("resets", 0)), int(record["processed"])


def committed(records: Iterable[dict]) -> list[dict]:
    """The ``trained`` records of every commit some rank marked ``committed`` (and the records
    without a phase), in time order, as records without a phase (so reading them again gives
    them again); each carries its commit's time (the first mark's), so consumers that time
    commits see when the commit happened. Records missing a field a phase needs are skipped,
    as a half-written line would be."""
    trained: list[dict] = []
    marked: dict[tuple[int, int, int], float] = {}
    out: list[dict] = []
    for rec in records:
        phase = rec.get("phase")
        try:
            if phase is None:
                out.append(rec)
            elif phase == TRAINED:
                commit_key(rec)
                trained.append(rec)
            elif phase == COMMITTED:
                key, t = commit_key(rec), float(rec["time"])
                marked[key] = min(t, marked.get(key, t))
        except (KeyError, TypeError, ValueError):
            continue
    for rec in trained:
        key = commit_key(rec)
        if key in marked:
            out.append({**{k: v for k, v in rec.items() if k != "phase"}, "time": marked[key]})
    return sorted(out, key=lambda r: float(r["time"]))


def per_epoch(records: Iterable[dict]) -> dict[int, list[int]]:
    """Every committed sample index per epoch (``committed(records)``'s indices, in time order)."""
    out: dict[int, list[int]] = {}
    for rec in committed(records):
        out.setdefault(int(rec["epoch"]), []).extend(int(i) for i in rec["indices"])
    return out
