"""``scripts/simulate``: run the elastic driver's decision cores under seeded fault schedules.

    scripts/simulate [--seeds N] [--first S] [--workers W | LO-HI] [--rules today|OLD]
                     [--kinds LIST] [--seed S]

Runs N schedules (seeds S .. S+N-1; --workers a count, or a range each seed draws from) and
prints a table: schedules, schedules per second, events, the largest world, and how many runs
broke each invariant. A failing run prints its schedule, its violations and the command that
replays it exactly; the exit code is then 1. ``--seed S`` runs that one schedule and prints it.
``--rules`` replays an old rule (to see what it broke). Exit 2 on bad flags.
"""
from __future__ import annotations

import sys

from elastic.common.table import render_table
from elastic.simulation import faults as F
from elastic.simulation.invariants import INVARIANTS
from elastic.simulation.rules import OLD, by_name
from elastic.simulation.run import simulate, sweep, workers_for
from shared.argparser import OneLineParser
from shared.exitcodes import EXIT_FAILURE, EXIT_OK
from shared.runner import run_main

SHOWN_FAILURES = 3


def _workers(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition("-")
    try:
        a, b = int(lo), int(hi or lo)
    except ValueError:
        raise ValueError(f"--workers wants a count or LO-HI, got {text!r}") from None
    if not 1 <= a <= b <= 4096:
        raise ValueError(f"--workers wants counts within 1-4096, LO <= HI, got {text!r}")
    return a, b


def _kinds(text: str) -> tuple[str, ...]:
    if text == "all":
        return tuple(F.KINDS)
    kinds = tuple(k for k in text.split(",") if k)
    bad = [k for k in kinds if k not in F.KINDS]
    if bad or not kinds:
        raise ValueError(f"--kinds wants all or a comma list of {', '.join(F.KINDS)}, got {text!r}")
    return kinds


def parse(argv: list[str]):
    p = OneLineParser(prog="simulate", description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=1000, help="how many schedules (1000)")
    p.add_argument("--first", type=int, default=0, help="the first seed (0)")
    p.add_argument("--seed", type=int, default=None, help="run this one schedule and print it")
    p.add_argument("--workers", default="3-64", help="a count, or LO-HI drawn per seed (3-64)")
    p.add_argument("--rules", default="today", help=f"today, or an old rule: {', '.join(OLD)}")
    p.add_argument("--kinds", default="all", help="fault kinds, a comma list (all)")
    a = p.parse_args(argv)
    try:
        a.workers = _workers(a.workers)
        a.rules = by_name(a.rules)
        a.kinds = _kinds(a.kinds)
    except ValueError as exc:
        p.error(str(exc))
    if a.seeds < 1:
        p.error(f"--seeds must be at least 1, got {a.seeds}")
    return a


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    return run_main("simulate", lambda: _run(parse(args)), usage=(), failure=())


def _run(a) -> int:
    pick = workers_for(a.workers)
    if a.seed is not None:
        o = simulate(a.seed, pick(a.seed), a.rules, a.kinds)
        print(o.report())
        return EXIT_OK if o.ok else EXIT_FAILURE
    s = sweep(range(a.first, a.first + a.seeds), pick, a.rules, a.kinds)
    lo, hi = a.workers
    print(render_table(["rules", "schedules", "workers", "largest", "per second", "events",
                        "simulated hours", "failed"],
                       [[a.rules.name, s.runs, f"{lo}-{hi}" if lo != hi else lo, s.largest,
                         f"{s.runs / s.seconds:.0f}", s.events, f"{s.simulated / 3600:.1f}",
                         len(s.failed)]]))
    print()
    print(render_table(["invariant", "checked after every run", "runs that broke it"],
                       [[k, v, s.by_invariant.get(k, 0)] for k, v in INVARIANTS.items()]))
    print()
    print(render_table(["fault kind", "drawn"], [[k, s.kinds.get(k, 0)] for k in F.KINDS]))
    for o in s.failed[:SHOWN_FAILURES]:
        print()
        print(o.report())
    if len(s.failed) > SHOWN_FAILURES:
        print(f"\n... and {len(s.failed) - SHOWN_FAILURES} more failed runs")
    return EXIT_OK if not s.failed else EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
