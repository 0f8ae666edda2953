"""The soak's invariants, checked after the fact from what the run left (pure).

Inputs are plain data the runner collected: the faults it injected (``Fault``), the training's
committed samples (``--trace-dir``'s ``.samples`` lines read back by
``training.commits.committed``: ``{"epoch", "time", "size", "rank", "resets", "processed",
"indices"}``), its ``.final.json`` records, the driver's resource samples (``Sample``), the
processes of the job still alive after it ended, and the world size the healthy pods should
give at the end. Each check returns a ``Check``; a failed one names the fault that came
before the moment it failed (``Check.when``), the first suspect.

``at_size(size, since, commits, workers)`` says when the job was first at a world size after a
moment: a commit at that size, or a whole world of that size formed (every rank's
``.worker.json``, written at each reset: a world held before its last step commits nothing).

``pauses(faults, commit_times)`` measures each fault's pause: the longest gap between two
consecutive commits (of any rank) from the last commit before the fault to the first after
its recovery; ``summarize_pauses`` gives the worst and the 95th percentile per kind.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from training.commits import committed

WAITING = "recovered, the job waiting before its last step"  # a Fault's outcome: no pause measured


@dataclass
class Fault:
    """One injected fault: ``kind`` on ``target`` at ``start`` (unix s), its action done at
    ``end``; ``recovered`` when training ran again at the expected world size (None: it did
    not within the deadline; ``outcome`` says why); ``pause`` in seconds, filled in later."""

    kind: str
    target: str
    start: float
    end: float
    expected_size: int
    recovered: float | None = None
    outcome: str = "recovered"
    pause: float | None = None
    detail: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    when: float | None = None  # when it went wrong (unix s), to name the fault before it


@dataclass(frozen=True)
class Sample:
    """The driver process and its events file at ``time``."""

    time: float
    rss_mb: float
    threads: int
    fds: int
    events_bytes: int


def preceding_fault(faults: Sequence[Fault], t: float | None) -> Fault | None:
    """The last fault that started at or before ``t`` (None: before any, or ``t`` unknown)."""
    if t is None:
        return None
    before = [f for f in faults if f.start <= t]
    return before[-1] if before else None


def exit_zero(code: int | None, last_progress: float | None = None) -> Check:
    """``code`` 0 (None: it never ended and was stopped); ``when``: its last progress."""
    return Check("the job finished with exit 0", code == 0,
                 f"exit {code}" if code is not None else "no progress, stopped", None if code == 0 else last_progress)


def samples_exactly_once(commits: Iterable[dict], dataset_size: int, epochs: int) -> Check:
    """Within every epoch, every sample index in ``range(dataset_size)`` committed exactly once,
    and every epoch of ``range(epochs)`` present. ``commits``: the ``.samples`` lines as written
    (both phases) or as ``training.commits.committed`` gives them; a rank's samples count when
    any rank marked their commit, its own mark missing or not (killed in between). ``when``: the
    first commit that repeated a sample, else the last commit of the first incomplete epoch."""
    seen: dict[int, dict[int, float]] = {}
    first_repeat: tuple[float, int, int] | None = None
    last_time: dict[int, float] = {}
    for c in committed(commits):
        epoch = int(c["epoch"])
        bucket = seen.setdefault(epoch, {})
        last_time[epoch] = float(c["time"])
        for i in c["indices"]:
            if i in bucket and first_repeat is None:
                first_repeat = (float(c["time"]), epoch, int(i))
            bucket.setdefault(int(i), float(c["time"]))
    name = "every sample trained exactly once per epoch"
    if first_repeat is not None:
        t, epoch, i = first_repeat
        return Check(name, False, f"epoch {epoch + 1}: sample {i} committed twice", t)
    for epoch in range(epochs):
        got = seen.get(epoch, {})
        missing = dataset_size - len(got)
        extra = [i for i in got if not 0 <= i < dataset_size]
        if missing or extra:
            what = f"{missing} of {dataset_size} samples never committed" if missing else f"unknown index {extra[0]}"
            return Check(name, False, f"epoch {epoch + 1}: {what}", last_time.get(epoch))
    return Check(name, True, f"{epochs} epochs x {dataset_size} samples")


def same_parameters(finals: Sequence[dict], world: int | None = None) -> Check:
    """Every rank that finished holds the same parameters (their SHA-256), ranks 0..n-1."""
    name = "every rank ended with the same parameters"
    if not finals:
        return Check(name, False, "no rank finished")
    digests = {f["params_sha256"] for f in finals}
    ranks = sorted(int(f["rank"]) for f in finals)
    if len(digests) != 1:
        return Check(name, False, f"{len(digests)} different parameter sets over {len(finals)} ranks")
    if ranks != list(range(len(ranks))) or (world is not None and len(ranks) != world):
        return Check(name, False, f"finished ranks {ranks}")
    return Check(name, True, f"{len(finals)} ranks, {next(iter(digests))[:12]}")


def no_leftovers(processes: Sequence[str]) -> Check:
    """No process of the job alive once it ended (``processes``: one description each)."""
    shown = "; ".join(processes[:3]) + (f"; +{len(processes) - 3} more" if len(processes) > 3 else "")
    return Check("no process of the job left on any pod or the launcher", not processes,
                 shown if processes else "none")


def world_formed(size: int, since: float, workers: Iterable[dict]) -> float | None:
    """When a whole world of ``size`` formed after ``since``, from the ranks' ``.worker.json``
    records (``{"time", "rank", "size", "resets"}``, each process's latest, written when a reset
    is done): ranks ``0..size-1`` all at ``size`` with the same ``resets`` (one world), written
    after ``since``; the time its last rank wrote. None when no such world."""
    worlds: dict[int, dict[int, float]] = {}
    for w in workers:
        try:
            t, rank, n, resets = float(w["time"]), int(w["rank"]), int(w["size"]), int(w["resets"])
        except (KeyError, TypeError, ValueError):
            continue
        if n == size and t > since:
            worlds.setdefault(resets, {})[rank] = t
    whole = [max(ranks.values()) for ranks in worlds.values() if set(ranks) == set(range(size))]
    return min(whole) if whole else None


def at_size(size: int, since: float, commits: Sequence[dict], workers: Iterable[dict]) -> float | None:
    """When the job was first at world ``size`` after ``since``: the first commit at that size, or
    the world of that size formed (``world_formed``), whichever came first; None: neither yet.
    A world waiting before the run's last step (``--debug-hold-file``) forms but never commits:
    judged by its commits alone it would look like the world before it."""
    committed = [float(c["time"]) for c in commits if float(c["time"]) > since and int(c["size"]) == size]
    seen = [t for t in (min(committed, default=None), world_formed(size, since, workers)) if t is not None]
    return min(seen) if seen else None


def world_now(commits: Sequence[dict], workers: Iterable[dict]) -> int | None:
    """The job's world size now: that of its last commit, or of a whole world (ranks
    ``0..size-1`` of one reset in ``.worker.json``) formed after it; None: neither yet."""
    last = max(commits, key=lambda c: float(c["time"]), default=None)
    best = (float(last["time"]), int(last["size"])) if last is not None else None
    worlds: dict[tuple[int, int], dict[int, float]] = {}
    for w in workers:
        try:
            t, rank, n, resets = float(w["time"]), int(w["rank"]), int(w["size"]), int(w["resets"])
        except (KeyError, TypeError, ValueError):
            continue
        worlds.setdefault((n, resets), {})[rank] = t
    for (n, _), ranks in worlds.items():
        if set(ranks) == set(range(n)) and (best is None or max(ranks.values()) > best[0]):
            best = (max(ranks.values()), n)
    return best[1] if best is not None else None


def out_of_work(commits: Iterable[dict], dataset_size: int, epochs: int, slack: int) -> bool:
    """Whether the job has (nearly) trained all its epochs: at least ``epochs * dataset_size -
    slack`` samples committed (``slack``: what the steps not committed yet may hold). Such a job
    waits before its last step (``--debug-hold-file``) and commits nothing."""
    return sum(len(c["indices"]) for c in commits) >= epochs * dataset_size - slack


def all_pods_used(ready_pods: int, world_size: int | None, max_np: int, when: float | None) -> Check:
    """At the end, every healthy pod (up to ``max_np``) has a worker: the world is that size."""
    want = min(ready_pods, max_np)
    return Check("no healthy pod left without a worker at the end", world_size == want,
                 f"{ready_pods} Ready pods, world size {world_size} (want {want})", when)


def every_fault_recovered(faults: Sequence[Fault]) -> Check:
    bad = [f for f in faults if f.recovered is None]
    if bad:
        f = bad[0]
        return Check("every fault recovered (training at the expected size)", False,
                     f"{len(bad)} of {len(faults)}; first: {f.kind} ({f.target}): {f.outcome}", f.start)
    return Check("every fault recovered (training at the expected size)", True, f"{len(faults)} faults")


# growth allowed from the first third of the run to the last: relative, plus an absolute slack
BOUNDS = {"rss_mb": (1.5, 64.0), "threads": (1.5, 16.0), "fds": (1.5, 32.0)}
EVENTS_BYTES_PER_DAY = 2 * 1024 ** 3  # the launcher's ephemeral-storage limit in deploy/


def bounded(samples: Sequence[Sample]) -> Check:
    """The driver's RSS, threads and fds in the last third of the run within ``BOUNDS`` of the
    first third's peak, and the events file growing slower than ``EVENTS_BYTES_PER_DAY``."""
    name = "driver RSS, threads, fds and events file bounded"
    if len(samples) < 6:
        return Check(name, False, f"only {len(samples)} samples of the driver")
    third = len(samples) // 3
    early, late = samples[:third], samples[-third:]
    worst = []
    for metric, (factor, slack) in BOUNDS.items():
        a = max(getattr(s, metric) for s in early)
        b = max(getattr(s, metric) for s in late)
        worst.append(f"{metric} {a:g}->{b:g}")
        if b > a * factor + slack:
            over = next(s for s in late if getattr(s, metric) > a * factor + slack)
            return Check(name, False, f"{metric} grew from {a:g} to {b:g} (bound {a * factor + slack:g})", over.time)
    span = late[-1].time - early[0].time
    rate = (late[-1].events_bytes - late[0].events_bytes) / max(late[-1].time - late[0].time, 1e-9)
    worst.append(f"events {rate * 86400 / 1024 ** 2:.0f} MiB/day")
    if span > 0 and rate * 86400 > EVENTS_BYTES_PER_DAY:
        return Check(name, False, f"events file grows {rate * 86400 / 1024 ** 3:.1f} GiB/day", late[-1].time)
    return Check(name, True, ", ".join(worst))


def pauses(faults: Sequence[Fault], commit_times: Sequence[float]) -> None:
    """Fills in each recovered fault's ``pause``: the longest gap between consecutive commit
    times from the last commit at or before its start to the first at or after its recovery
    (none for a fault that met the job waiting before its last step: ``WAITING``)."""
    times = sorted(set(commit_times))
    for f in faults:
        if f.recovered is None or f.outcome == WAITING:  # no commits while it waits
            continue
        before = [t for t in times if t <= f.start]
        after = [t for t in times if t >= f.recovered]
        lo = before[-1] if before else f.start
        hi = after[0] if after else f.recovered
        window = [lo] + [t for t in times if lo < t < hi] + [hi]
        f.pause = max((b - a for a, b in zip(window, window[1:], strict=False)), default=0.0)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` (0..1) percentile by the nearest-rank rule."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def summarize_pauses(faults: Sequence[Fault]) -> list[tuple[str, int, float | None, float | None]]:
    """Per kind: (kind, count, worst pause s, p95 pause s), kinds in first-seen order."""
    out = []
    for kind in dict.fromkeys(f.kind for f in faults):
        vals = [f.pause for f in faults if f.kind == kind and f.pause is not None]
        out.append((kind, sum(1 for f in faults if f.kind == kind), max(vals) if vals else None,
                    percentile(vals, 0.95) if vals else None))
    return out
