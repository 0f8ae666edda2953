"""Write tests/durations.json, the seconds each test group took, from pytest's JUnit reports.

    python -m tests.durations REPORT.xml [REPORT.xml ...]

A report is what ``pytest --junitxml`` writes; a group is what tests/conftest.py puts a test
in for a parallel run (``group_of``: ``images`` for every test under tests/images, else the
module's path under tests/). The seconds of all reports are summed per group and averaged over the reports
that hold the group. tests/conftest.py orders a parallel run's groups by them, longest first.
Exit 2 with one line when a report cannot be read.
"""
from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from shared.atomicfile import write_atomic
from tests import conftest

TESTS = Path(__file__).resolve().parent
OUT = TESTS / "durations.json"


def group_of(classname: str) -> str | None:
    """The group (tests/conftest.py's ``group_of``) of a JUnit ``classname``
    (``tests.discovery.test_hosts.TestX``), None for a name outside tests/."""
    parts = classname.split(".")
    path = TESTS.parent
    for n, part in enumerate(parts):
        if (path / f"{part}.py").is_file():
            return conftest.group_of("/".join(parts[:n] + [f"{part}.py"]))
        path = path / part
    return None


def seconds_per_group(report: Path) -> dict[str, float]:
    """Each group's summed test time in one JUnit report."""
    totals: dict[str, float] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        group = group_of(case.get("classname", ""))
        if group is not None:
            totals[group] = totals.get(group, 0.0) + float(case.get("time", "0") or 0)
    return totals


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m tests.durations REPORT.xml [REPORT.xml ...]", file=sys.stderr)
        return 2
    runs: list[dict[str, float]] = []
    for name in argv:
        try:
            runs.append(seconds_per_group(Path(name)))
        except (OSError, ET.ParseError) as e:
            print(f"durations: error: cannot read {name}: {e}", file=sys.stderr)
            return 2
    groups = sorted({g for run in runs for g in run})
    mean = {g: round(sum(r[g] for r in runs if g in r) / sum(1 for r in runs if g in r), 1) for g in groups}
    doc = {"about": "seconds per test group, from scripts/test's JUnit reports (python -m tests.durations); "
                    "tests/conftest.py starts the longest first in a parallel run",
           "modules": dict(sorted(mean.items(), key=lambda kv: -kv[1]))}
    write_atomic(OUT, json.dumps(doc, indent=1) + "\n")
    print(f"durations: {len(groups)} groups, {sum(mean.values()) / 60:.1f} min in all -> {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
