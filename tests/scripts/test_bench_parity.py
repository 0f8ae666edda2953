"""scripts/benchmarks/bench-parity end to end with --quick (one seed, two epochs): both runs train on the
real digits to the end on the local cluster, the elastic one through its whole schedule
(2 -> 3 -> 2 -> 3 with a hard kill mid-epoch), and the table and JSON have their shape. What
it asserts is what a user of the bench relies on, not an accuracy (one seed of two epochs
measures nothing); bad flags are one-line errors."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "scripts" / "benchmarks" / "bench-parity"


@pytest.mark.parametrize("argv, message", [
    (["--seeds", "0"], "--seeds must be at least 1"),
    (["--epochs", "1"], "--epochs must be at least 2"),
    (["--fixed-np", "0"], "--fixed-np must be between 1 and 8"),
    (["--step-delay", "-1"], "--step-delay must not be negative"),
    (["--seeds", "x"], "--seeds"),
    (["--lr-milestones", "3,x"], "--lr-milestones wants a comma list"),
])
def test_bad_flags_are_one_line_errors(argv, message):
    proc = subprocess.run([sys.executable, str(BENCH), *argv], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and message in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.horovod
@pytest.mark.timeout(1800)
def test_quick_runs_both_worlds_to_the_end_and_prints_the_table(tmp_path):
    out = tmp_path / "parity.json"
    proc = subprocess.run([sys.executable, str(BENCH), "--quick", "--work", str(tmp_path / "work"),
                           "--json", str(out)], capture_output=True, text=True, timeout=1700,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-6000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[0].split("|")[0].strip() == "seed" and "fixed (np 3)" in lines[0] and "elastic" in lines[0]
    assert [line.split("|")[0].strip() for line in lines[2:3] + lines[4:8]] == ["1", "mean", "std", "min", "max"]
    assert lines[-1].startswith("final validation accuracy, %: elastic - fixed = ")

    doc = json.loads(out.read_text())
    runs = {r["kind"]: r for r in doc["runs"]}
    assert set(runs) == {"fixed", "elastic"}
    for r in runs.values():
        assert r["exit_code"] == 0 and r["epochs"] == 2
        assert 0.0 <= r["accuracy"] <= 1.0
        assert sum(r["samples_by_world"].values()) >= 2 * 1348  # two epochs of every sample
    assert runs["fixed"]["world_sizes"] == [3]
    assert runs["elastic"]["world_sizes"][:4] == [2, 3, 2, 3]
    assert [s["step"] for s in runs["elastic"]["steps"]] == ["add", "kill", "add"]
    kill = runs["elastic"]["steps"][1]
    assert kill["detail"] == "worker-1" and kill["epoch"] is not None and 0 <= kill["epoch_fraction"] < 1
    assert set(runs["elastic"]["samples_by_world"]) == {"2", "3"}
    row = doc["rows"][0]
    assert (row["fixed"], row["elastic"]) == (runs["fixed"]["accuracy"], runs["elastic"]["accuracy"])
    assert doc["summary"]["difference"] == pytest.approx(row["elastic"] - row["fixed"])
