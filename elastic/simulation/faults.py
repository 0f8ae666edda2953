"""The fault kinds and a seeded schedule of them. The same (seed, workers) gives the same
topology and schedule, so a failing seed replays exactly."""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

FOREVER = math.inf

# kind -> what it does (targets: hosts, or workers as "host/slot")
KINDS = {
    "freeze-worker": "one training process stops (a GPU hang): sshd and its lease wrapper still run",
    "short-freeze": "one training process stops for at most 1.5 s (a GC pause): never a loss",
    "freeze-host": "every process of one pod stops (a vanished node)",
    "freeze-majority": "more than half of the world's processes stop at once",
    "freeze-two-hosts": "two pods stop, the second 0.5-5 s after the first",
    "kill": "one training process exits",
    "slow-answers": "one pod answers pings late, within the ping deadline",
    "lost-answers": "one process's answers are lost for at most 1.5 s",
    "driver-stall": "the driver process stops for up to 6 s",
    "bad-start": "joiners started on one pod fail at start, for a while",
    "hang-start": "joiners started on one pod hang at start, for a while",
    "hang-at-reset": "one training process hangs at its world's next reset, before it checks in (its "
                     "main thread stuck in a collective the abort did not reach): it still answers pings",
    "hang-pod-at-reset": "every training process of one pod hangs so (a multi-GPU pod's shared fault)",
    "busy-write": "one rank writes in the background (a checkpoint its restore waits for): at a reset it "
                  "checks in only once the write is done, busy meanwhile",
}
SHORT = 1.5  # the longest short freeze or answer loss: shorter than any loss may need


@dataclass(frozen=True)
class Fault:
    at: float
    kind: str
    targets: tuple[str, ...]
    duration: float  # FOREVER: never ends

    def line(self) -> str:
        d = "for ever" if self.duration == FOREVER else f"for {self.duration:.2f} s"
        return f"t={self.at:7.2f}  {self.kind:<17} {','.join(self.targets)}  {d}"


@dataclass(frozen=True)
class Topology:
    hosts: tuple[tuple[str, int], ...]  # (name, slots)

    @property
    def workers(self) -> list[str]:
        return [f"{h}/{s}" for h, n in self.hosts for s in range(n)]


def topology(rng: random.Random, workers: int) -> Topology:
    """workers processes on pods of 1, 2, 4 or 8 slots (one size per run, the last pod smaller)."""
    slots = rng.choice([s for s in (1, 1, 2, 4, 8) if s <= max(1, workers // 2)] or [1])
    hosts, left, i = [], workers, 0
    while left > 0:
        n = min(slots, left)
        hosts.append((f"pod-{i}", n))
        left -= n
        i += 1
    return Topology(tuple(hosts))


def _long(rng: random.Random) -> float:
    return FOREVER if rng.random() < 0.3 else rng.uniform(12.0, 40.0)


def schedule(rng: random.Random, topo: Topology, faults: int, window: float,
             kinds: tuple[str, ...] = tuple(KINDS)) -> list[Fault]:
    """faults faults at random times within (2, window), of kinds drawn from kinds; several may
    overlap."""
    hosts = [h for h, _ in topo.hosts]
    workers = topo.workers
    out: list[Fault] = []
    for _ in range(faults):
        at = rng.uniform(2.0, window)
        kind = rng.choice(kinds)
        if kind == "freeze-worker":
            f = Fault(at, kind, (rng.choice(workers),), _long(rng))
        elif kind == "short-freeze" or kind == "lost-answers":
            f = Fault(at, kind, (rng.choice(workers),), rng.uniform(0.1, SHORT))
        elif kind == "freeze-host":
            f = Fault(at, kind, (rng.choice(hosts),), _long(rng))
        elif kind == "freeze-majority":
            n = len(workers) // 2 + 1 + rng.randrange(max(1, len(workers) - len(workers) // 2 - 1))
            f = Fault(at, kind, tuple(sorted(rng.sample(workers, min(n, len(workers))))), _long(rng))
        elif kind == "freeze-two-hosts":
            if len(hosts) < 2:
                continue
            a, b = rng.sample(hosts, 2)
            d = _long(rng)
            out.append(Fault(at, kind, (a,), d))
            f = Fault(at + rng.uniform(0.5, 5.0), kind, (b,), d)
        elif kind == "kill":
            f = Fault(at, kind, (rng.choice(workers),), 0.0)
        elif kind == "slow-answers":
            f = Fault(at, kind, (rng.choice(hosts),), rng.uniform(5.0, 30.0))
        elif kind == "hang-at-reset":
            f = Fault(at, kind, (rng.choice(workers),), _long(rng))
        elif kind == "hang-pod-at-reset":
            f = Fault(at, kind, (rng.choice(hosts),), _long(rng))
        elif kind == "busy-write":
            f = Fault(at, kind, (rng.choice(workers),), rng.uniform(5.0, 25.0))
        elif kind == "driver-stall":
            f = Fault(at, kind, (), rng.uniform(0.5, 6.0))
        else:  # bad-start, hang-start
            f = Fault(at, kind, (rng.choice(hosts),), rng.uniform(10.0, 60.0))
        out.append(f)
    return sorted(out, key=lambda f: (f.at, f.kind, f.targets))
