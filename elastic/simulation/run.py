"""One seeded schedule (``simulate``) and many (``sweep``)."""
from __future__ import annotations

import math
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from elastic.simulation import faults as F
from elastic.simulation.invariants import SETTLE, Violation, check
from elastic.simulation.model import World
from elastic.simulation.rules import TODAY, Rules

WINDOW = 40.0  # faults start within this many seconds of virtual time


@dataclass(frozen=True)
class Outcome:
    seed: int
    workers: int
    rules: Rules
    topology: F.Topology
    faults: tuple[F.Fault, ...]
    reports: bool
    violations: tuple[Violation, ...]
    events: int
    losses: int
    rebaselines: int
    end: float

    @property
    def ok(self) -> bool:
        return not self.violations

    def replay(self) -> str:
        rules = "" if self.rules.name == "today" else f" --rules {rule_name(self.rules)}"
        return f"scripts/simulate --seed {self.seed} --workers {self.workers}{rules}"

    def report(self) -> str:
        """The schedule, what broke, and the command that replays it exactly."""
        pods = ", ".join(f"{h} ({n} slots)" for h, n in self.topology.hosts)
        lines = [f"seed {self.seed}, {self.workers} workers on {pods}; rules: {self.rules.name}; "
                 f"progress reports: {'yes' if self.reports else 'no'}; {self.end:.0f} s simulated",
                 "faults:"] + ["  " + f.line() for f in self.faults]
        lines += ["violations:"] + ["  " + v.line() for v in self.violations] if self.violations else ["no violation"]
        lines.append(f"replay: {self.replay()}")
        return "\n".join(lines)


def rule_name(rules: Rules) -> str:
    from elastic.simulation.rules import OLD
    return next((k for k, v in OLD.items() if v == rules), "today")


def simulate(seed: int, workers: int, rules: Rules = TODAY, kinds: tuple[str, ...] = tuple(F.KINDS),
             faults: int | None = None) -> Outcome:
    """Run one schedule: the topology, the faults and every random draw come from (seed,
    workers), so the same arguments replay the same run."""
    rng = random.Random(f"{seed}/{workers}/{','.join(kinds)}/{faults}")
    topo = F.topology(rng, workers)
    sched = F.schedule(rng, topo, faults if faults is not None else rng.randint(1, 6), WINDOW, kinds)
    ends = [f.at + f.duration for f in sched if f.duration != F.FOREVER]
    end = max([WINDOW] + ends) + SETTLE + 5.0
    reports = rng.random() < 0.5
    world = World(random.Random(rng.random()), topo, sched, rules, end, reports)
    rec = world.run()
    return Outcome(seed, workers, rules, topo, tuple(sched), reports, tuple(check(rec)),
                   world.clock.events, len(rec.losses), len(rec.rebaselines), end)


def workers_for(spec: tuple[int, int]) -> Callable[[int], int]:
    """Workers per seed: a fixed count, or drawn (log-uniformly) from a range by the seed."""
    lo, hi = spec
    if lo == hi:
        return lambda seed: lo

    def draw(seed: int) -> int:
        r = random.Random(f"workers/{seed}").random()
        return int(round(math.exp(math.log(lo) + r * (math.log(hi) - math.log(lo)))))
    return draw


@dataclass
class Summary:
    runs: int = 0
    failed: list[Outcome] = field(default_factory=list)
    events: int = 0
    seconds: float = 0.0
    simulated: float = 0.0
    largest: int = 0
    by_invariant: Counter = field(default_factory=Counter)
    kinds: Counter = field(default_factory=Counter)


def sweep(seeds: Iterable[int], workers: Callable[[int], int], rules: Rules = TODAY,
          kinds: tuple[str, ...] = tuple(F.KINDS), stop_at_first: bool = False) -> Summary:
    s = Summary()
    start = time.perf_counter()
    for seed in seeds:
        o = simulate(seed, workers(seed), rules, kinds)
        s.runs += 1
        s.events += o.events
        s.simulated += o.end
        s.largest = max(s.largest, o.workers)
        s.kinds.update(f.kind for f in o.faults)
        if not o.ok:
            s.failed.append(o)
            s.by_invariant.update({v.invariant for v in o.violations})
            if stop_at_first:
                break
    s.seconds = time.perf_counter() - start
    return s
