"""What must hold after every simulated run, checked against its ground truth (the ``Record``).

Each check returns the violations it found; a violation names its invariant, when, and who.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from elastic.simulation.faults import SHORT
from elastic.simulation.model import (
    BARRIER_DEADLINE,
    CHECK_IN,
    FILL_EVERY,
    JOIN_DEADLINE,
    LEASE,
    PROGRESS_ANSWER,
    START,
    Proc,
    Record,
    Reset,
    merge_spans,
)

INVARIANTS = {
    "healthy-kept": "a worker that answers is never lost: a pause or lost answers of up to "
                    f"{SHORT:g} s, slow answers, or a driver stall of up to 6 s cost nobody",
    "silent-lost": "a worker silent for good is lost within its bound, counted again after a "
                   "driver stall or a total silence the driver forgave",
    "hosts-serve-again": "a pod healthy again serves again within its cooldown bound",
    "joiners-settle": "every joiner is in the world or given up within its join deadline",
    "joiners-taken": "no waiting joiner is left out of the next world longer than a sibling's join deadline: "
                     "it is taken in or dropped",
    "driver-work": "the driver handles at most 3 pings, reports and connections per worker per second",
    "resets-end": "every reset forms its next world within its bound: the barrier's deadline, a member's "
                  "background write, a silent member's loss",
    "one-world": "each reset forms at most one world, of members that checked in for it (or joiners "
                 "waiting to be taken in) and still run",
}
WORK_LIMIT = 3.0


@dataclass(frozen=True)
class Violation:
    invariant: str
    when: float
    detail: str

    def line(self) -> str:
        return f"t={self.when:7.2f}  {self.invariant}: {self.detail}"


def check(rec: Record) -> list[Violation]:
    out: list[Violation] = []
    for f in (healthy_kept, silent_lost, hosts_serve_again, joiners_settle, joiners_taken, driver_work, resets_end,
              one_world):
        out += f(rec)
    return sorted(out, key=lambda v: v.when)


def stretches(rec: Record, p: Proc) -> list[tuple[float, float]]:
    """p's times of not answering, merged, while it ran (its own freezes and lost answers, its
    pod's freezes)."""
    end = p.gone if p.gone is not None else rec.end
    spans = sorted((max(a, p.started), min(b, end)) for a, b in p.freezes + rec.hosts[p.host].freezes)
    out: list[tuple[float, float]] = []
    for a, b in spans:
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _overlap(spans: Iterable[tuple[float, float]], a: float, b: float) -> float:
    """Seconds of ``spans`` (start, end) that fall within [a, b]."""
    return sum(max(0.0, min(y, b) - max(x, a)) for x, y in spans)


def healthy_kept(rec: Record) -> list[Violation]:
    s = rec.settings
    procs = {p.key: p for p in rec.procs}
    out = []
    for when, key, cause in rec.losses:
        p = procs[key]
        if cause == "lease":
            stall = max((b - a for a, b in rec.stalls if a <= when <= b + LEASE), default=0.0)
            if stall <= 6.5:
                out.append(Violation("healthy-kept", when, f"{key} ended by its lease after a {stall:.1f} s "
                                                         "driver stall"))
            continue
        if cause == "barrier":
            hung = any(a <= when <= b for a, b in p.stuck)
            frozen = p.freezes + rec.hosts[p.host].freezes
            unanswered = _overlap(merge_spans(frozen), when, when + PROGRESS_ANSWER) >= PROGRESS_ANSWER - 1e-6
            if not hung and not unanswered:
                out.append(Violation("healthy-kept", when, f"{key} lost at the barrier deadline, neither hung nor "
                                                         "silent (busy in a background write, or on its way)"))
            continue
        window = s.timeout + s.interval + s.ping_timeout
        silent = _overlap(stretches(rec, p), when - window, when)
        if silent < SHORT + 0.5:
            out.append(Violation("healthy-kept", when, f"{key} lost ({cause}) after {silent:.2f} s of silence "
                                                     f"in the {window:g} s before"))
    return out


def _deadline(rec: Record, a: float) -> float:
    """By when a worker silent for good since a must be lost: a base bound (the timeout, a
    round, two ping deadlines, the lag limit and a second), counted again from the end of each
    driver stall it meets (the driver re-baselines: what it missed proves nothing), and again
    from its end when the whole world was silent within it (a total silence is forgiven once,
    and again after anyone answered)."""
    s = rec.settings
    base = s.timeout + s.interval + 2 * s.ping_timeout + s.lag_limit + 1.0
    t0, answered_since = a, True
    for _ in range(20):
        d = t0 + base
        stalls = [y for x, y in rec.stalls if x < d and y > t0]
        if stalls:
            t0 = max(stalls)
            continue
        samples = [t0 + i * 0.5 for i in range(int(base / 0.5) + 1)]
        if answered_since and any(_everyone_silent(rec, t) for t in samples):
            answered_since = not all(_everyone_silent(rec, t) for t in samples)
            t0 = d
            continue
        return d
    return t0 + base


def _everyone_silent(rec: Record, t: float) -> bool:
    alive = [p for p in rec.procs if p.ready is not None and p.ready <= t and (p.gone is None or p.gone > t)]
    return bool(alive) and all(any(x <= t < y for x, y in stretches(rec, p)) for p in alive)


def silent_lost(rec: Record) -> list[Violation]:
    out = []
    for p in rec.procs:
        if p.ready is None:
            continue
        for a, b in stretches(rec, p):
            if a < p.ready:
                continue
            deadline = _deadline(rec, a)
            if b >= deadline and deadline <= rec.end and (p.gone is None or p.gone > deadline):
                gone = "still in the world" if p.gone is None else f"lost {p.gone - a:.1f} s later"
                out.append(Violation("silent-lost", a, f"{p.key} silent from t={a:.2f}: {gone} "
                                                       f"(bound {deadline - a:.1f} s)"))
                break
    return out


SETTLE = 16.0 + JOIN_DEADLINE + START[1] + 2 * FILL_EVERY + 2.0  # cooldown's longest + a join


def hosts_serve_again(rec: Record) -> list[Violation]:
    out = []
    quiet = rec.end - SETTLE
    for host in rec.hosts.values():
        spans = host.freezes + host.bad_start + host.hang_start
        if any(b > quiet for _, b, *_ in spans):
            continue  # not healthy long enough before the end (or never again)
        serving = {p.slot for p in rec.procs if p.host == host.name and p.gone is None and p.ready is not None}
        missing = [s for s in range(host.slots) if s not in serving]
        if missing:
            why = "refused for ever" if host.name in rec.refused_for_ever else "no worker"
            out.append(Violation("hosts-serve-again", rec.end, f"{host.name} healthy since t={quiet:.0f} or "
                                 f"earlier, slots {missing} empty at the end: {why}"))
    return out


def joiners_settle(rec: Record) -> list[Violation]:
    out = []
    for p in rec.procs:
        if p.started == 0.0:
            continue
        settled = min(x for x in (p.ready, p.gone, math.inf) if x is not None)
        limit = JOIN_DEADLINE + 0.5 + _overlap(rec.stalls, p.started, p.started + JOIN_DEADLINE + 7.0)
        if settled - p.started > limit and p.started + limit <= rec.end:
            out.append(Violation("joiners-settle", p.started + limit, f"{p.key} neither joined nor given up "
                                 f"{limit:.1f} s after its start"))
    return out


BLOCKED = JOIN_DEADLINE + 2 * FILL_EVERY + 0.5  # a sibling below still starting: its deadline


def joiners_taken(rec: Record) -> list[Violation]:
    """A waiting joiner the next world would not take (a slot of its host below it has no
    worker) waits at most a sibling's join deadline: the sibling joins, or is dropped and the
    waiting one with it (the fork left it waiting while the host was refused: for ever)."""
    out = []
    for p in rec.procs:
        spans = p.blocked + ([(p.blocked_since, rec.end)] if p.blocked_since is not None else [])
        for a, b in spans:
            limit = BLOCKED + _overlap(rec.stalls, a, a + BLOCKED + 7.0)
            if b - a > limit:
                out.append(Violation("joiners-taken", a + limit, f"{p.key} waited {b - a:.1f} s at the rendezvous "
                                     f"from t={a:.1f}, a slot of its host below it without a worker"))
                break
    return out


def _arrival(rec: Record, r: Reset, p: Proc) -> float:
    """When p's READY or FAILURE reaches reset r's barrier at the latest, as it behaves: a
    healthy member after its abort and restore; one in a background write once it is done;
    a silent one once it answers again or liveness loses it; one hung there never."""
    if any(a == r.began for a, _ in p.stuck):
        return math.inf
    t = r.began + CHECK_IN[1]
    t = max([t] + [b for a, b in p.waiting if a == r.began])
    for a, b in stretches(rec, p):
        if a <= t < b:
            t = min(b, _deadline(rec, a))
    return t


def reset_bound(rec: Record, r: Reset) -> float:
    """Seconds by which reset r must have formed its world: the barrier's deadline, one after
    the first READY or FAILURE arrives; a member's background write; a silent member's loss
    by liveness; each counted again past the driver's stalls."""
    procs = {p.key: p for p in rec.procs}
    arrivals = [_arrival(rec, r, procs[key]) for key in sorted(r.expected)]
    first = r.began if r.began_by_failure else min(arrivals, default=r.began)
    need = first - r.began + BARRIER_DEADLINE + 1.0
    need = max([need] + [t - r.began + 1.0 for t in arrivals if t < math.inf])
    return need + _overlap(rec.stalls, r.began, r.began + need + 7.0)


def resets_end(rec: Record) -> list[Violation]:
    out = []
    for r in rec.resets:
        bound = reset_bound(rec, r)
        took = (r.ended if r.ended is not None else math.inf) - r.began
        if took > bound and r.began + bound <= rec.end:
            by = r.began + bound
            recorded = {key for rid, key, when in rec.check_ins if rid == r.rid and when <= by}
            waiting = sorted(r.expected - recorded - r.failed)
            out.append(Violation("resets-end", r.began + bound, f"reset {r.rid} (t={r.began:.2f}) still waits "
                                 f"{bound:.1f} s later for {', '.join(waiting[:4])}"
                                 f"{' and more' if len(waiting) > 4 else ''}"))
    return out


def one_world(rec: Record) -> list[Violation]:
    out = []
    checked: dict[int, set[str]] = {}
    for rid, key, _ in rec.check_ins:
        checked.setdefault(rid, set()).add(key)
    for r in rec.resets:  # the joiners a reset takes in are no parties to its barrier
        checked.setdefault(r.rid, set()).update(r.joiners)
    known = {p.key: p.known for p in rec.procs}
    formed: set[int] = set()
    last = -math.inf
    for rid, when, members in rec.worlds:
        if rid in formed or when < last:
            out.append(Violation("one-world", when, f"reset {rid} formed a second world"))
        formed.add(rid)
        last = when
        strangers = sorted(m for m in members if m not in checked.get(rid, set()))
        dead = sorted(m for m in members if (k := known[m]) is not None and k < when)
        if strangers or dead:
            out.append(Violation("one-world", when, f"world {rid} counts {', '.join(strangers + dead)}: "
                                 "not checked in for it, or known gone"))
    return out


def driver_work(rec: Record) -> list[Violation]:
    alive = sum((p.gone if p.gone is not None else rec.end) - (p.ready if p.ready is not None else p.started)
                for p in rec.procs)
    rate = rec.work / alive if alive > 0 else 0.0
    if rate > WORK_LIMIT:
        return [Violation("driver-work", rec.end, f"{rate:.2f} per worker per second")]
    return []
