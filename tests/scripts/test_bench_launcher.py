"""scripts/benchmarks/bench-launcher: bad flags are one-line errors (exit 2), before anything starts."""
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "scripts" / "benchmarks"


@pytest.mark.parametrize("argv, message", [
    (["--pods", "8,2"], "--pods: expected ascending counts >= 2, got '8,2'"),
    (["--pods", "1,8"], "--pods: expected ascending counts >= 2"),
    (["--window", "0"], "--window must be positive"),
    (["--build", "nothing-here"], "--build 'nothing-here': expected NAME=VENV with bin/elastic-run"),
    (["--build", "x=/nonexistent"], "--build 'x=/nonexistent': expected NAME=VENV"),
])
def test_bad_flags_are_one_line_errors(argv, message):
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "bench-launcher"), *argv], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and message in proc.stderr and "Traceback" not in proc.stderr
